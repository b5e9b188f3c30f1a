"""URL map: pages, the REST API under /api/v1/, the schema, health and the admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from console import api, metrics, views

api_v1: list[URLPattern | URLResolver] = [
    path("auth/token/", api.ObtainTokenView.as_view(), name="api-token"),
    path("auth/sign-out-everywhere/", api.SignOutEverywhereView.as_view(), name="api-sign-out-everywhere"),
    path("", include("console.api_urls")),
    path("", include("quotas.api.urls")),
    path("", include("workspaces.api.urls")),
    path("", include("scheduling.api.urls")),
]

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon, name="favicon"),
    # A signed-in user who opens the sign-in page (a bookmark, the back button) goes on to the dashboard.
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("metrics", metrics.metrics, name="metrics"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("sign-out-everywhere/", views.sign_out_everywhere, name="sign-out-everywhere"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's init script as a file (?script=), not inline: the CSP allows no inline script.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    # [\s\S] and \Z: a path with a newline in it (%0A) is an API address too, not Django's HTML 404.
    re_path(r"^(?P<unmatched>api/[\s\S]*)\Z", api.not_found, name="api-not-found"),
    path("", include("workspaces.urls")),
    path("", include("scheduling.urls")),
]
