"""Reads of workspaces that the pages and the API share; all go through `restrict`."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet

from quotas import hooks
from quotas.models import Quota
from workspaces.models import Membership, Workspace
from workspaces.permissions import User, restrict


def workspace_list(*, user: User | None) -> QuerySet[Workspace]:
    return (
        restrict(Workspace.objects.all(), user, "view")
        .annotate(member_count=Count("memberships", distinct=True))
        .prefetch_related("quotas")
        .order_by("name")
    )


def members(*, workspace: Workspace) -> QuerySet[Membership]:
    return workspace.memberships.select_related("user").order_by("user__username")


def bound_quotas_with_status(*, workspace: Workspace) -> list[dict[str, Any]]:
    """The workspace's quotas with the figures the scheduler supplies (zeros until it registers)."""
    quotas = list(workspace.quotas.order_by("name"))
    statuses = hooks.quota_status(quotas)
    return [{"quota": quota, "status": statuses.get(quota.pk)} for quota in quotas]


def quota_binding_blocker(quota: Quota) -> str | None:
    """Why a quota may not be deleted: the workspaces bound to it (None when there are none)."""
    bound = list(quota.bindings.order_by("workspace__name").values_list("workspace__name", flat=True))
    if not bound:
        return None
    return f"{quota.name} is bound to workspaces {', '.join(bound)}; unbind it first."


def bound_workspace_names(*, quota: Quota) -> list[str]:
    """The workspaces bound to a quota, by name, for the quota's Overview."""
    return list(quota.bindings.order_by("workspace__name").values_list("workspace__name", flat=True))


def custom_roles(*, workspace: Workspace) -> list[dict[str, Any]]:
    """The workspace's custom roles with how many members hold each (two queries)."""
    holders = dict(workspace.memberships.values("role").annotate(count=Count("pk")).values_list("role", "count"))
    return [{"role": role, "holders": holders.get(role.name, 0)} for role in workspace.custom_roles.order_by("name")]
