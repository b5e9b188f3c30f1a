"""Pages: the workspace list, the Members tab (members, roles, custom roles) and the Scheduling
Configurations tab. The tabs that read jobs (member removal's preview, Quotas, Usage) are
scheduling's (scheduling/workspace_views.py): imports point one way, and jobs live above workspaces.

Who: a workspace the user may not see is a 404; members read the tabs, workspace admins and
platform admins write (anyone else a 403 with the reason)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.views.decorators.http import require_POST

from quotas import bounds
from quotas.bounds import readable
from workspaces import selectors, services
from workspaces.forms import (
    CAPABILITY_WORDS,
    NON_MEMBERS_LABEL,
    AddMemberForm,
    ChangeRoleForm,
    CustomRoleForm,
    RuleFormSet,
    initial_rules,
    open_roles,
    refusals_in_words,
    role_choices,
    rules_to_save,
)
from workspaces.models import Workspace
from workspaces.permissions import can, denial_reason, restrict, role_of


def _visible_workspace(request: HttpRequest, pk: int) -> Workspace:
    return get_object_or_404(restrict(Workspace.objects.all(), request.user, "view"), pk=pk)


@login_required
def workspace_list(request: HttpRequest) -> HttpResponse:
    return render(request, "workspaces/list.html", {"workspaces": selectors.workspace_list(user=request.user)})


def _details_or_403(request: HttpRequest, workspace: Workspace) -> None:
    if not can(request.user, "view_details", workspace):
        raise PermissionDenied(denial_reason(request.user, "view_details", workspace))


def _manage_or_403(request: HttpRequest, workspace: Workspace) -> None:
    _details_or_403(request, workspace)
    if not can(request.user, "manage", workspace):
        raise PermissionDenied(denial_reason(request.user, "manage", workspace))


def _refusal_text(refused: ValidationError) -> str:
    return " ".join(text for texts in refused.message_dict.values() for text in texts)


def members_context(request: HttpRequest, workspace: Workspace, **forms_given: Any) -> dict[str, Any]:
    """The Members tab: members with their roles, custom roles, and the forms of who may manage."""
    may_manage = can(request.user, "manage", workspace)
    members = list(selectors.members(workspace=workspace))
    context: dict[str, Any] = {
        "workspace": workspace,
        "tab": "members",
        "may_see_details": True,
        "may_manage": may_manage,
        "role": role_of(request.user, workspace),
        "members": members,
        "custom_roles": selectors.custom_roles(workspace=workspace),
        "role_words": dict(role_choices(workspace)),
        "capability_words": CAPABILITY_WORDS,
    }
    if may_manage:
        context["add_form"] = forms_given.get("add_form") or AddMemberForm(workspace=workspace)
        context["role_form"] = forms_given.get("role_form") or CustomRoleForm()
        refusals: dict[int, str] = forms_given.get("refusals") or {}
        # The last admin's row says up front why Remove and a demotion will be refused.
        admins = list(selectors.managing_memberships(workspace=workspace))
        for admin in admins:
            refusal = selectors.last_admin_refusal(workspace=workspace, membership=admin, admins=admins)
            if refusal:
                refusals.setdefault(admin.pk, refusal)
        context["role_rows"] = [
            (
                membership,
                ChangeRoleForm(
                    workspace=workspace, initial={"role": membership.role}, prefix=f"member-{membership.pk}"
                ),
                refusals.get(membership.pk, ""),
            )
            for membership in members
        ]
    return context


@login_required
def workspace_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """The Members tab; an authorized non-member sees the quotas they may use here instead."""
    workspace = _visible_workspace(request, pk)
    if not can(request.user, "view_details", workspace):
        context = {
            "workspace": workspace,
            "may_see_details": False,
            "quotas": selectors.bound_quotas_with_status(workspace=workspace),
        }
        return render(request, "workspaces/guest.html", context)
    return render(request, "workspaces/members.html", members_context(request, workspace))


@login_required
@require_POST
def member_add(request: HttpRequest, pk: int) -> HttpResponse:
    workspace = _visible_workspace(request, pk)
    _manage_or_403(request, workspace)
    form = AddMemberForm(request.POST, workspace=workspace)
    if form.is_valid():
        try:
            services.add_member(
                actor=request.user,
                workspace=workspace,
                user=form.cleaned_data["username"],
                role=form.cleaned_data["role"],
            )
        except ValidationError as refused:
            for name, texts in refused.message_dict.items():
                for text in texts:
                    form.add_error("username" if name == "user" else name if name in form.fields else None, text)
        else:
            user = form.cleaned_data["username"]
            messages.success(
                request, f"Added {user.get_username()} to {workspace.name} as {form.cleaned_data['role']}."
            )
            return redirect("workspace-detail", pk=workspace.pk)
    return render(request, "workspaces/members.html", members_context(request, workspace, add_form=form), status=400)


@login_required
@require_POST
def member_role(request: HttpRequest, pk: int, member_pk: int) -> HttpResponse:
    workspace = _visible_workspace(request, pk)
    membership = get_object_or_404(workspace.memberships.select_related("user"), pk=member_pk)
    _manage_or_403(request, workspace)
    form = ChangeRoleForm(request.POST, workspace=workspace, prefix=f"member-{membership.pk}")
    if not form.is_valid():
        messages.error(request, f"Choose one of the roles of {workspace.name} for {membership.user.get_username()}.")
        return redirect("workspace-detail", pk=workspace.pk)
    try:
        services.change_member_role(actor=request.user, membership=membership, role=form.cleaned_data["role"])
    except ValidationError as refused:
        # Beside the member's row, where the admin clicked.
        context = members_context(request, workspace, refusals={membership.pk: _refusal_text(refused)})
        return render(request, "workspaces/members.html", context, status=400)
    else:
        messages.success(
            request, f"{membership.user.get_username()} is now {form.cleaned_data['role']} in {workspace.name}."
        )
    return redirect("workspace-detail", pk=workspace.pk)


@login_required
@require_POST
def role_create(request: HttpRequest, pk: int) -> HttpResponse:
    workspace = _visible_workspace(request, pk)
    _manage_or_403(request, workspace)
    form = CustomRoleForm(request.POST)
    if form.is_valid():
        try:
            services.create_custom_role(
                actor=request.user, workspace=workspace, name=form.cleaned_data["name"], permissions=form.granted()
            )
        except ValidationError as refused:
            for name, texts in refused.message_dict.items():
                for text in texts:
                    form.add_error(name if name in form.fields else None, text)
        else:
            messages.success(request, f"Created role {form.cleaned_data['name']} in {workspace.name}.")
            return redirect("workspace-detail", pk=workspace.pk)
    return render(request, "workspaces/members.html", members_context(request, workspace, role_form=form), status=400)


@login_required
@require_POST
def role_delete(request: HttpRequest, pk: int, role_pk: int) -> HttpResponse:
    workspace = _visible_workspace(request, pk)
    role = get_object_or_404(workspace.custom_roles.all(), pk=role_pk)
    _manage_or_403(request, workspace)
    try:
        services.delete_custom_role(actor=request.user, role=role)
    except ValidationError as refused:
        messages.error(request, _refusal_text(refused))
    else:
        messages.success(request, f"Deleted role {role.name} of {workspace.name}.")
    return redirect("workspace-detail", pk=workspace.pk)


def _readable_rules(config: list[dict[str, Any]], workspace: Workspace) -> list[dict[str, Any]]:
    """The read-only table: one row per rule, then one per bound quota without rules."""
    words = dict(role_choices(workspace))
    rows = [
        {
            "quota": rule["quota"],
            "roles": [words.get(role, role) for role in rule["roles"]]
            + ([NON_MEMBERS_LABEL] if rule["non_members"] else []),
            "authorized_users": rule["authorized_users"],
            "caps": [_cap_words(cap) for cap in rule["caps"]],
            "implicit": False,
        }
        for rule in config
    ]
    with_rules = {rule["quota"] for rule in config}
    for name in workspace.quotas.order_by("name").values_list("name", flat=True):
        if name not in with_rules:
            roles = [words.get(role, role) for role in open_roles(workspace)]
            rows.append({"quota": name, "roles": roles, "authorized_users": [], "caps": [], "implicit": True})
    return rows


def _cap_words(cap: dict[str, Any]) -> str:
    """'7–9: 10 GPUs per job, 20 per user' (16.0 reads 16)."""
    amounts = []
    if cap["max_gpus_per_job"] is not None:
        amounts.append(f"{readable(cap['max_gpus_per_job'])} GPUs per job")
    if cap["max_gpus_per_user"] is not None:
        amounts.append(f"{readable(cap['max_gpus_per_user'])} per user")
    return f"{cap['priority_min']}–{cap['priority_max']}: {', '.join(amounts)}"


@login_required
def workspace_scheduling(request: HttpRequest, pk: int) -> HttpResponse:
    """PAI's Resource Usage table: workspace admins edit it whole (+Add, Save); others read it."""
    workspace = _visible_workspace(request, pk)
    _details_or_403(request, workspace)
    may_manage = can(request.user, "manage", workspace)
    config = services.scheduling_config(workspace)
    formset = (
        RuleFormSet(initial=initial_rules(config, workspace), form_kwargs={"workspace": workspace})
        if may_manage
        else None
    )
    errors: list[str] = []
    if request.method == "POST":
        if not may_manage:
            raise PermissionDenied(denial_reason(request.user, "manage", workspace))
        formset = RuleFormSet(_with_added_row(request), form_kwargs={"workspace": workspace})
        if "add_row" not in request.POST and formset.is_valid():
            chosen = rules_to_save(list(formset), workspace, config)
            try:
                services.set_scheduling_config(
                    actor=request.user, workspace=workspace, rules=[rule for _form, rule in chosen]
                )
            except ValidationError as refused:
                errors = refusals_in_words(refused, [form for form, _rule in chosen])
            else:
                count = len(chosen)
                messages.success(request, f"Saved {count} scheduling rule{pluralize(count)} of {workspace.name}.")
                return redirect("workspace-scheduling", pk=workspace.pk)
    context = {
        "workspace": workspace,
        "tab": "scheduling",
        "may_see_details": True,
        "may_manage": may_manage,
        "rules": _readable_rules(config, workspace),
        "formset": formset,
        "errors": errors,
    }
    return render(request, "workspaces/scheduling.html", context, status=400 if errors else 200)


def _with_added_row(request: HttpRequest) -> Any:
    """+Add without JavaScript: the same table back with one more empty row (the script adds it
    in place instead, static/console/rules-table.js)."""
    if "add_row" not in request.POST:
        return request.POST
    data = request.POST.copy()
    total = int(data.get("form-TOTAL_FORMS") or 0)
    data["form-TOTAL_FORMS"] = str(min(total + 1, bounds.RULES_MAX))
    return data
