"""Page routes of workspaces, mounted by console.urls."""

from django.urls import path

from workspaces import views

urlpatterns = [
    path("workspaces/", views.workspace_list, name="workspace-list"),
    path("workspaces/<int:pk>/", views.workspace_detail, name="workspace-detail"),
    path("workspaces/<int:pk>/scheduling/", views.workspace_scheduling, name="workspace-scheduling"),
]
