"""URL map: pages, the REST API under /api/v1/, the schema, health and the admin."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from console import api, metrics, node_views, quota_views, views, workspace_views

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
    path("quotas/", quota_views.resource_quotas, name="resource-quotas"),
    path("quotas/new/", quota_views.quota_new, name="quota-new"),
    path("quotas/<int:quota_id>/", quota_views.quota_detail, name="quota-detail"),
    path("quotas/<int:quota_id>/new-child/", quota_views.quota_new_child, name="quota-new-child"),
    path("quotas/<int:quota_id>/scale/", quota_views.quota_scale, name="quota-scale"),
    path("quotas/<int:quota_id>/transfer/", quota_views.quota_transfer, name="quota-transfer"),
    path("quotas/<int:quota_id>/edit/", quota_views.quota_edit, name="quota-edit"),
    path("quotas/<int:quota_id>/delete/", quota_views.quota_delete, name="quota-delete"),
    path("quotas/<int:quota_id>/switch/<slug:switch>/", quota_views.quota_switch, name="quota-switch"),
    path("nodes/", node_views.nodes_page, name="nodes-page"),
    path("nodes/new/", node_views.node_new, name="node-new"),
    path("nodes/<int:node_id>/edit/", node_views.node_edit, name="node-edit"),
    path("nodes/<int:node_id>/cordon/", node_views.node_cordon, name="node-cordon"),
    path("nodes/<int:node_id>/drain/", node_views.node_drain, name="node-drain"),
    path("nodes/<int:node_id>/uncordon/", node_views.node_uncordon, name="node-uncordon"),
    path("nodes/<int:node_id>/token/", node_views.node_token, name="node-token"),
    path("workspaces/<int:pk>/quotas/", workspace_views.workspace_quotas, name="workspace-quotas"),
    path(
        "workspaces/<int:pk>/quotas/<int:quota_pk>/unbind/", workspace_views.quota_unbind, name="workspace-quota-unbind"
    ),
    path(
        "workspaces/<int:pk>/members/<int:member_pk>/role/preview/",
        workspace_views.member_role_preview,
        name="workspace-member-role-preview",
    ),
    path(
        "workspaces/<int:pk>/members/<int:member_pk>/remove/",
        workspace_views.member_remove,
        name="workspace-member-remove",
    ),
    path("workspaces/<int:pk>/usage/", workspace_views.workspace_usage_tab, name="workspace-usage"),
    path("", include("workspaces.urls")),
    path("", include("scheduling.urls")),
]
