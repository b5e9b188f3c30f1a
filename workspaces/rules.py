"""The Scheduling Configurations tab's writes: a workspace's rules of who may use which of its bound
quotas (roles, non-members, authorized users) and with which caps (priorities, GPUs per job and
per user). workspaces.services re-exports these names; like every write there, each runs in one
transaction, checks that the actor may do it (`actor=None` is the system) and writes an audit
record."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from quotas import audit, bounds
from quotas.models import Quota
from workspaces.models import ROLE_PERMISSIONS, BasicRole, Cap, SchedulingRule, Workspace
from workspaces.permissions import User, require


class CapSpec(TypedDict, total=False):
    priority_min: int
    priority_max: int
    max_gpus_per_job: float | None
    max_gpus_per_user: float | None


class RuleSpec(TypedDict, total=False):
    """One rule as the API and the page send it: quota, roles and users by name."""

    quota: str
    roles: list[str]
    non_members: bool
    authorized_users: list[str]
    caps: list[CapSpec]


@transaction.atomic
def set_scheduling_config(
    *, actor: User | None, workspace: Workspace, rules: Sequence[RuleSpec]
) -> list[SchedulingRule]:
    """Replace all of the workspace's rules at once; nothing changes unless every rule is valid."""
    require(actor, "manage", workspace)
    Workspace.objects.select_for_update().get(pk=workspace.pk)
    resolved = _resolve_rules(workspace, rules)
    before = scheduling_config(workspace)
    SchedulingRule.objects.filter(workspace=workspace).delete()
    created: list[SchedulingRule] = []
    for position, (spec, quota, users) in enumerate(resolved):
        rule = SchedulingRule.objects.create(
            workspace=workspace,
            quota=quota,
            roles=list(dict.fromkeys(spec.get("roles", []))),
            non_members=bool(spec.get("non_members", False)),
            position=position,
        )
        rule.authorized_users.set([user.pk for user in users])
        Cap.objects.bulk_create(
            [
                Cap(
                    rule=rule,
                    priority_min=cap["priority_min"],
                    priority_max=cap["priority_max"],
                    max_gpus_per_job=cap.get("max_gpus_per_job"),
                    max_gpus_per_user=cap.get("max_gpus_per_user"),
                )
                for cap in spec.get("caps", [])
            ]
        )
        created.append(rule)
    audit.record(
        actor=actor,
        action="workspace.set_scheduling_config",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        before={"rules": before},
        after={"rules": scheduling_config(workspace)},
    )
    return created


def scheduling_config(workspace: Workspace) -> list[dict[str, Any]]:
    """The rules in the API's shape (names, not ids); used for the audit log and the API."""
    rules = (
        SchedulingRule.objects.filter(workspace=workspace)
        .select_related("quota")
        .prefetch_related("caps", "authorized_users")
    )
    return [
        {
            "quota": rule.quota.name,
            "roles": list(rule.roles),
            "non_members": rule.non_members,
            "authorized_users": sorted(user.get_username() for user in rule.authorized_users.all()),
            "caps": [
                {
                    "priority_min": cap.priority_min,
                    "priority_max": cap.priority_max,
                    "max_gpus_per_job": cap.max_gpus_per_job,
                    "max_gpus_per_user": cap.max_gpus_per_user,
                }
                for cap in rule.caps.all()
            ],
        }
        for rule in rules
    ]


def _resolve_rules(
    workspace: Workspace, rules: Sequence[RuleSpec]
) -> list[tuple[RuleSpec, Quota, list[AbstractBaseUser]]]:
    if len(rules) > bounds.RULES_MAX:
        raise ValidationError({"rules": f"a workspace has at most {bounds.RULES_MAX} rules, got {len(rules)}"})
    bound = {quota.name: quota for quota in workspace.quotas.all()}
    known_roles = set(ROLE_PERMISSIONS) | set(workspace.custom_roles.values_list("name", flat=True))
    usernames = {name for spec in rules for name in spec.get("authorized_users", [])}
    user_model = get_user_model()
    users = {user.get_username(): user for user in user_model.objects.filter(**{"username__in": usernames})}
    errors: dict[str, str] = {}
    resolved: list[tuple[RuleSpec, Quota, list[AbstractBaseUser]]] = []
    for index, spec in enumerate(rules):
        at = f"rules[{index}]"
        quota = bound.get(spec.get("quota", ""))
        if quota is None:
            errors[f"{at}.quota"] = (
                f"quota {spec.get('quota')!r} is not bound to {workspace.name} "
                f"(bound quotas: {', '.join(sorted(bound)) or 'none'})"
            )
        for role in spec.get("roles", []):
            if role not in known_roles:
                errors[f"{at}.roles"] = (
                    f"unknown role {role!r}; roles of {workspace.name}: {', '.join(sorted(known_roles))}"
                )
            elif role == BasicRole.VISITOR:
                errors[f"{at}.roles"] = "visitors read only; they cannot be allowed to use a quota"
        for field, given, most in (
            ("roles", len(spec.get("roles", [])), bounds.RULE_ROLES_MAX),
            ("authorized_users", len(spec.get("authorized_users", [])), bounds.RULE_USERS_MAX),
            ("caps", len(spec.get("caps", [])), bounds.RULE_CAPS_MAX),
        ):
            if given > most:
                errors[f"{at}.{field}"] = f"a rule lists at most {most} {field.replace('_', ' ')}, got {given}"
        unknown_users = [name for name in spec.get("authorized_users", []) if name not in users]
        if unknown_users:
            errors[f"{at}.authorized_users"] = f"unknown users: {', '.join(sorted(unknown_users))}"
        for cap_index, cap in enumerate(spec.get("caps", [])):
            errors.update(_cap_errors(f"{at}.caps[{cap_index}]", cap))
        if quota is not None:
            resolved.append((spec, quota, [users[name] for name in spec.get("authorized_users", []) if name in users]))
    if errors:
        raise ValidationError(errors)
    return resolved


def _cap_errors(at: str, cap: CapSpec) -> dict[str, str]:
    errors: dict[str, str] = {}
    low, high = cap.get("priority_min"), cap.get("priority_max")
    for field, value in (("priority_min", low), ("priority_max", high)):
        if value is None:
            errors[f"{at}.{field}"] = f"{field} is required (1-9)"
        elif not 1 <= value <= 9:
            errors[f"{at}.{field}"] = f"{field} must lie in 1-9, got {value}"
    if low is not None and high is not None and low > high and f"{at}.priority_min" not in errors:
        errors[f"{at}.priority_min"] = f"priority_min {low} is above priority_max {high}"
    for field, amount in (
        ("max_gpus_per_job", cap.get("max_gpus_per_job")),
        ("max_gpus_per_user", cap.get("max_gpus_per_user")),
    ):
        if amount is not None and amount < 0:
            errors[f"{at}.{field}"] = f"{field} must be at least 0, got {bounds.readable(amount)}"
        elif amount is not None and amount > bounds.CAP_GPUS_MAX:
            errors[f"{at}.{field}"] = (
                f"{field} must be at most {bounds.readable(bounds.CAP_GPUS_MAX)}, got {bounds.readable(amount)}"
            )
    if cap.get("max_gpus_per_job") is None and cap.get("max_gpus_per_user") is None:
        errors[f"{at}.max_gpus_per_job"] = "a cap needs max_gpus_per_job, max_gpus_per_user or both"
    return errors
