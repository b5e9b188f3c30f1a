"""Page routes of workspaces, mounted by console.urls (the tabs that read jobs are scheduling's)."""

from django.urls import path

from workspaces import views

urlpatterns = [
    path("workspaces/", views.workspace_list, name="workspace-list"),
    path("workspaces/<int:pk>/", views.workspace_detail, name="workspace-detail"),
    path("workspaces/<int:pk>/members/add/", views.member_add, name="workspace-member-add"),
    path("workspaces/<int:pk>/members/<int:member_pk>/role/", views.member_role, name="workspace-member-role"),
    path("workspaces/<int:pk>/roles/new/", views.role_create, name="workspace-role-new"),
    path("workspaces/<int:pk>/roles/<int:role_pk>/delete/", views.role_delete, name="workspace-role-delete"),
    path("workspaces/<int:pk>/scheduling/", views.workspace_scheduling, name="workspace-scheduling"),
]
