"""Pages: the workspace list, a workspace's members, and its Scheduling Configurations tab."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from workspaces import selectors, services
from workspaces.forms import RuleFormSet, initial_rules, refusals_in_words
from workspaces.models import Workspace
from workspaces.permissions import can, denial_reason, restrict, role_of


def _visible_workspace(request: HttpRequest, pk: int) -> Workspace:
    return get_object_or_404(restrict(Workspace.objects.all(), request.user, "view"), pk=pk)


@login_required
def workspace_list(request: HttpRequest) -> HttpResponse:
    return render(request, "workspaces/list.html", {"workspaces": selectors.workspace_list(user=request.user)})


@login_required
def workspace_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workspace = _visible_workspace(request, pk)
    details = can(request.user, "view_details", workspace)
    context = {
        "workspace": workspace,
        "tab": "members",
        "may_see_details": details,
        "may_manage": can(request.user, "manage", workspace),
        "role": role_of(request.user, workspace),
        "members": selectors.members(workspace=workspace) if details else [],
        "quotas": selectors.bound_quotas_with_status(workspace=workspace),
    }
    return render(request, "workspaces/detail.html", context)


@login_required
def workspace_scheduling(request: HttpRequest, pk: int) -> HttpResponse:
    workspace = _visible_workspace(request, pk)
    if not can(request.user, "view_details", workspace):
        raise PermissionDenied(denial_reason(request.user, "view_details", workspace))
    may_manage = can(request.user, "manage", workspace)
    config = services.scheduling_config(workspace)
    formset = RuleFormSet(initial=initial_rules(config), form_kwargs={"workspace": workspace}) if may_manage else None
    errors: list[str] = []
    if request.method == "POST":
        if not may_manage:
            raise PermissionDenied(denial_reason(request.user, "manage", workspace))
        formset = RuleFormSet(request.POST, form_kwargs={"workspace": workspace})
        if formset.is_valid():
            rule_forms = [form for form in formset if form.as_rule() is not None]
            rules = [rule for form in rule_forms if (rule := form.as_rule()) is not None]
            try:
                services.set_scheduling_config(actor=request.user, workspace=workspace, rules=rules)
            except ValidationError as refused:
                errors = refusals_in_words(refused, rule_forms)
            else:
                messages.success(request, f"Saved {len(rules)} scheduling rules of {workspace.name}.")
                return redirect("workspace-scheduling", pk=workspace.pk)
    context = {
        "workspace": workspace,
        "tab": "scheduling",
        "may_see_details": True,
        "may_manage": may_manage,
        "rules": config,
        "formset": formset,
        "errors": errors,
    }
    return render(request, "workspaces/scheduling.html", context, status=400 if errors else 200)
