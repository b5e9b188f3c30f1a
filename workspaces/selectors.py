"""Reads of workspaces that the pages and the API share; all go through `restrict`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, QuerySet

from quotas import hooks
from quotas.models import Quota
from workspaces.models import (
    JOB_MANAGE_ALL,
    JOB_SUBMIT,
    ROLE_PERMISSIONS,
    WORKSPACE_MANAGE,
    CustomRole,
    Membership,
    SchedulingRule,
    Workspace,
)
from workspaces.permissions import User, restrict, role_capabilities

# What each capability lets a member do, as the role-change preview words it.
CAPABILITY_DEEDS = {
    JOB_SUBMIT: "submit jobs",
    JOB_MANAGE_ALL: "manage every job of the workspace",
    WORKSPACE_MANAGE: "manage members, roles and the scheduling configuration",
}


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


def managing_memberships(*, workspace: Workspace) -> QuerySet[Membership]:
    """The members whose role lets them manage the workspace: admin, or a custom role granting it."""
    managing = [role for role, granted in ROLE_PERMISSIONS.items() if WORKSPACE_MANAGE in granted]
    managing += [
        name
        for name, granted in CustomRole.objects.filter(workspace=workspace).values_list("name", "permissions")
        if WORKSPACE_MANAGE in (granted or [])
    ]
    return Membership.objects.select_related("user").filter(workspace=workspace, role__in=managing).order_by("pk")


def last_admin_refusal(*, workspace: Workspace, membership: Membership, admins: list[Membership]) -> str | None:
    """The sentence refusing to take `membership` out of `admins` (the workspace's managing
    members), or None when another one still manages it."""
    if [admin.pk for admin in admins] != [membership.pk]:
        return None
    return f"{membership.user.get_username()} is {workspace.name}'s only admin; make another member admin first."


def role_quotas(*, workspace: Workspace, role: str) -> list[str]:
    """The bound quotas a member of `role` may submit to under the workspace's rules: none without
    the submit capability; a quota without rules is open to every role that may submit, one with
    rules to the roles they name (as `permissions.check_submission` decides). Two queries."""
    if JOB_SUBMIT not in role_capabilities(workspace, role):
        return []
    naming: dict[int, bool] = {}
    for quota_id, roles in SchedulingRule.objects.filter(workspace=workspace).values_list("quota_id", "roles"):
        naming[quota_id] = naming.get(quota_id, False) or role in roles
    return [
        name
        for quota_id, name in workspace.quotas.order_by("name").values_list("pk", "name")
        if naming.get(quota_id, True)
    ]


@dataclass(frozen=True)
class RoleChange:
    """What changing a member's role does, in words: what they gain and lose."""

    before: str
    after: str
    gains: list[str]
    losses: list[str]
    quotas_before: list[str]
    quotas_after: list[str]
    # Why the change is refused (the workspace would lose its last admin), or None.
    refusal: str | None

    @property
    def quotas_gained(self) -> list[str]:
        return [name for name in self.quotas_after if name not in self.quotas_before]

    @property
    def quotas_lost(self) -> list[str]:
        return [name for name in self.quotas_before if name not in self.quotas_after]


def role_change(*, workspace: Workspace, membership: Membership, role: str) -> RoleChange:
    """The role-change preview's reading: capabilities and usable quotas before and after."""
    held = role_capabilities(workspace, membership.role)
    granted = role_capabilities(workspace, role)
    refusal = None
    if WORKSPACE_MANAGE in held and WORKSPACE_MANAGE not in granted:
        admins = list(managing_memberships(workspace=workspace))
        refusal = last_admin_refusal(workspace=workspace, membership=membership, admins=admins)
    return RoleChange(
        before=membership.role,
        after=role,
        gains=[deed for capability, deed in CAPABILITY_DEEDS.items() if capability in granted - held],
        losses=[deed for capability, deed in CAPABILITY_DEEDS.items() if capability in held - granted],
        quotas_before=role_quotas(workspace=workspace, role=membership.role),
        quotas_after=role_quotas(workspace=workspace, role=role),
        refusal=refusal,
    )
