"""The workspace tabs that read jobs: a member's removal, a member's role change and a quota's
unbinding (each with a preview first), the Quotas tab and the Usage tab.

They live in scheduling, not workspaces, because they compose apps: the writes are the workspaces
services', the jobs and the usage come from scheduling (imports point one way, docs/console.md).
Who: a workspace the user may not see is a 404; members read the tabs; workspace admins (and
platform admins) remove members; platform admins alone bind and unbind; anyone else gets a 403
with the reason.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from scheduling.clock import get_clock
from scheduling.usage import WINDOWS, binding_live_jobs, member_live_jobs, workspace_usage
from workspaces import selectors, services
from workspaces.forms import BindQuotaForm, ChangeRoleForm
from workspaces.models import Workspace
from workspaces.permissions import can, denial_reason, restrict

BIND_REFUSAL = "Only platform admins may bind or unbind quotas."


def _visible_workspace(request: HttpRequest, pk: int) -> Workspace:
    workspace: Workspace = get_object_or_404(restrict(Workspace.objects.all(), request.user, "view"), pk=pk)
    if not can(request.user, "view_details", workspace):
        raise PermissionDenied(denial_reason(request.user, "view_details", workspace))
    return workspace


def _is_platform_admin(request: HttpRequest) -> bool:
    return bool(request.user.is_authenticated and getattr(request.user, "is_superuser", False))


def _refusal_text(refused: ValidationError) -> str:
    return " ".join(text for texts in refused.message_dict.values() for text in texts)


@login_required
def member_remove(request: HttpRequest, pk: int, member_pk: int) -> HttpResponse:
    """GET: the preview (their jobs keep running, new submits are refused); POST: Confirm."""
    workspace = _visible_workspace(request, pk)
    membership = get_object_or_404(workspace.memberships.select_related("user"), pk=member_pk)
    if not can(request.user, "manage", workspace):
        raise PermissionDenied(denial_reason(request.user, "manage", workspace))
    status = 200
    if request.method == "POST":
        try:
            services.remove_member(actor=request.user, membership=membership)
        except ValidationError as refused:
            refusal: str | None = _refusal_text(refused)
            status = 400
        else:
            messages.success(request, f"Removed {membership.user.get_username()} from {workspace.name}.")
            return redirect("workspace-detail", pk=workspace.pk)
    else:
        admins = list(selectors.managing_memberships(workspace=workspace))
        refusal = selectors.last_admin_refusal(workspace=workspace, membership=membership, admins=admins)
    context = {
        "workspace": workspace,
        "membership": membership,
        "refusal": refusal,
        "jobs": member_live_jobs(workspace=workspace, user_id=membership.user_id),
    }
    return render(request, "workspaces/member_remove.html", context, status=status)


@login_required
def member_role_preview(request: HttpRequest, pk: int, member_pk: int) -> HttpResponse:
    """GET only: what the new role gains and loses (capabilities, the quotas its rules open), and
    that the member's jobs keep running. Its Confirm posts to the Members tab's role change."""
    workspace = _visible_workspace(request, pk)
    membership = get_object_or_404(workspace.memberships.select_related("user"), pk=member_pk)
    if not can(request.user, "manage", workspace):
        raise PermissionDenied(denial_reason(request.user, "manage", workspace))
    form = ChangeRoleForm(request.GET, workspace=workspace, prefix=f"member-{membership.pk}")
    context: dict[str, Any] = {"workspace": workspace, "membership": membership, "form": form}
    if not form.is_valid():
        return render(request, "workspaces/member_role.html", context, status=400)
    role = form.cleaned_data["role"]
    context["change"] = selectors.role_change(workspace=workspace, membership=membership, role=role)
    context["jobs"] = member_live_jobs(workspace=workspace, user_id=membership.user_id)
    return render(request, "workspaces/member_role.html", context)


@login_required
def workspace_quotas(request: HttpRequest, pk: int) -> HttpResponse:
    """The Quotas tab: the bound quotas with their figures; platform admins bind and unbind."""
    workspace = _visible_workspace(request, pk)
    may_bind = _is_platform_admin(request)
    form = BindQuotaForm(workspace=workspace) if may_bind else None
    status = 200
    if request.method == "POST":
        if not may_bind:
            raise PermissionDenied(BIND_REFUSAL)
        form = BindQuotaForm(request.POST, workspace=workspace)
        if form.is_valid():
            quota = form.cleaned_data["quota"]
            try:
                services.bind_quota(actor=request.user, workspace=workspace, quota=quota)
            except ValidationError as refused:
                form.add_error("quota", _refusal_text(refused))
            else:
                messages.success(request, f"Bound {quota.name} to {workspace.name}.")
                return redirect("workspace-quotas", pk=workspace.pk)
        status = 400
    context = {
        "workspace": workspace,
        "tab": "quotas",
        "may_see_details": True,
        "may_bind": may_bind,
        "form": form,
        "quotas": selectors.bound_quotas_with_status(workspace=workspace),
    }
    return render(request, "workspaces/quotas.html", context, status=status)


@login_required
def quota_unbind(request: HttpRequest, pk: int, quota_pk: int) -> HttpResponse:
    """GET: the preview (which jobs keep running, what the scheduler does); POST: Confirm."""
    workspace = _visible_workspace(request, pk)
    quota = get_object_or_404(workspace.quotas.all(), pk=quota_pk)
    if not _is_platform_admin(request):
        raise PermissionDenied(BIND_REFUSAL)
    if request.method == "POST":
        services.unbind_quota(actor=request.user, workspace=workspace, quota=quota)
        messages.success(request, f"Unbound {quota.name} from {workspace.name}.")
        return redirect("workspace-quotas", pk=workspace.pk)
    context = {
        "workspace": workspace,
        "quota": quota,
        "jobs": binding_live_jobs(workspace=workspace, quota=quota),
        "rules": workspace.rules.filter(quota=quota).count(),
    }
    return render(request, "workspaces/quota_unbind.html", context)


@login_required
def workspace_usage_tab(request: HttpRequest, pk: int) -> HttpResponse:
    """The Usage tab: GPU-hours over the last 24 hours, 7 and 30 days (scheduling.usage)."""
    workspace = _visible_workspace(request, pk)
    context = {
        "workspace": workspace,
        "tab": "usage",
        "may_see_details": True,
        "windows": workspace_usage(workspace=workspace, now=get_clock().now(), windows=WINDOWS),
    }
    return render(request, "workspaces/usage.html", context)
