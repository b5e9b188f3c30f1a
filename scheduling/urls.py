"""Page routes of scheduling, mounted by console.urls: the jobs' pages, and the pages that show
jobs beside what lower apps hold (quotas, nodes, a workspace's Quotas and Usage tabs)."""

from django.urls import path

from scheduling import node_actions, node_views, pool_views, quota_actions, quota_views, views, workspace_views

urlpatterns = [
    path("jobs/", views.job_list_page, name="jobs-page"),
    path("jobs/new/", views.job_submit_page, name="job-submit-page"),
    path("jobs/new/estimate/", views.job_estimate, name="job-estimate"),
    path("jobs/<int:pk>/", views.job_detail_page, name="job-page"),
    path("jobs/<int:pk>/cancel/", views.job_cancel_page, name="job-cancel-page"),
    path("quotas/", quota_views.resource_quotas, name="resource-quotas"),
    path("quotas/new/", quota_actions.quota_new, name="quota-new"),
    path("quotas/<int:quota_id>/", quota_views.quota_detail, name="quota-detail"),
    path("quotas/<int:quota_id>/new-child/", quota_actions.quota_new_child, name="quota-new-child"),
    path("quotas/<int:quota_id>/scale/", quota_actions.quota_scale, name="quota-scale"),
    path("quotas/<int:quota_id>/transfer/", quota_actions.quota_transfer, name="quota-transfer"),
    path("quotas/<int:quota_id>/edit/", quota_actions.quota_edit, name="quota-edit"),
    path("quotas/<int:quota_id>/delete/", quota_actions.quota_delete, name="quota-delete"),
    path("quotas/<int:quota_id>/switch/<slug:switch>/", quota_actions.quota_switch, name="quota-switch"),
    path("nodes/", node_views.nodes_page, name="nodes-page"),
    path("nodes/new/", node_actions.node_new, name="node-new"),
    path("pools/new/", node_actions.pool_new, name="pool-new"),
    path("pools/<int:pool_id>/", pool_views.pool_page, name="pool-page"),
    path("pools/<int:pool_id>/delete/", pool_views.pool_delete, name="pool-delete"),
    path("nodes/<int:node_id>/edit/", node_actions.node_edit, name="node-edit"),
    path("nodes/<int:node_id>/cordon/", node_actions.node_cordon, name="node-cordon"),
    path("nodes/<int:node_id>/drain/", node_actions.node_drain, name="node-drain"),
    path("nodes/<int:node_id>/uncordon/", node_actions.node_uncordon, name="node-uncordon"),
    path("nodes/<int:node_id>/token/", node_actions.node_token, name="node-token"),
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
]
