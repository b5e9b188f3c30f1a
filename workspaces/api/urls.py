"""API routes of workspaces, mounted under /api/v1/ by console.urls."""

from django.urls import path
from rest_framework.routers import SimpleRouter

from workspaces.api.views import MEMBER_VIEWS, ROLE_VIEWS, WorkspaceViewSet

router = SimpleRouter(trailing_slash=True)
router.register("workspaces", WorkspaceViewSet, basename="workspace")

urlpatterns = [
    *router.urls,
    path("workspaces/<int:workspace_pk>/members/", MEMBER_VIEWS[0], name="workspace-member-list"),
    path("workspaces/<int:workspace_pk>/members/<int:pk>/", MEMBER_VIEWS[1], name="workspace-member-detail"),
    path("workspaces/<int:workspace_pk>/roles/", ROLE_VIEWS[0], name="workspace-role-list"),
    path("workspaces/<int:workspace_pk>/roles/<int:pk>/", ROLE_VIEWS[1], name="workspace-role-detail"),
]
