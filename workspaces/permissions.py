"""The one permission choke point (NetBox's `restrict()`): who sees and may touch which row.

Every queryset the API or a page shows goes through `restrict(queryset, user, action)`; object
checks (`can`) are the same filter applied to one row, so a list and a detail can never
disagree. Each check is a set of `Exists` filters on the one query, so the query count does not
depend on how many workspaces, members or jobs there are. Nothing is cached between requests:
revoking a membership or a rule is seen by the very next query.

Who may do what:

- anonymous: nothing. Platform admins (superusers): everything.
- Workspace, "view": members (any role) and users named in one of its rules' authorized_users.
  "view_details" (members, roles, scheduling configuration): members. "submit": where the user
  could submit at all (viewers, plus workspaces with a rule open to non-members); which quota
  and how much is `check_submission`'s call. "manage" (members, roles, rules, description):
  holders of `workspace.manage` (the admin role, custom roles with it). "administer" (create,
  rename, bind quotas, delete): platform admins only.
- Quota, "view": quotas bound to a workspace the user is a member of, or named in a rule that
  authorizes the user or is open to non-members. Every other action: platform admins only.
- Any model with `workspace_field = "workspace"` (jobs; optionally `owner_field = "owner"` and
  `manage_capability`): "view": members of that workspace (any role) and the row's owner;
  "manage": holders of `manage_capability` (default `job.manage_all`: operators, admins), and
  the owner while they still may submit in that workspace (not once demoted to a visitor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Exists, Model, OuterRef, Q, QuerySet

from quotas.models import Quota
from workspaces.models import (
    CAPABILITY_CODENAMES,
    JOB_MANAGE_ALL,
    JOB_SUBMIT,
    ROLE_PERMISSIONS,
    WORKSPACE_MANAGE,
    CustomRole,
    Membership,
    QuotaBinding,
    SchedulingRule,
    Workspace,
    WorkspaceUserPermission,
)

M = TypeVar("M", bound=Model)
User = AbstractBaseUser | AnonymousUser

WORKSPACE_ACTIONS = frozenset({"view", "view_details", "submit", "manage", "administer"})
SCOPED_ACTIONS = frozenset({"view", "manage"})


def restrict(queryset: QuerySet[M], user: User | None, action: str = "view") -> QuerySet[M]:
    """The rows of `queryset` on which `user` may perform `action`; still one lazy query."""
    model = queryset.model
    if user is None or not user.is_authenticated:
        return queryset.none()
    if getattr(user, "is_superuser", False):
        return queryset
    if issubclass(model, Workspace):
        return queryset.filter(_workspace_condition(user, action, "pk"))
    if issubclass(model, Quota):
        if action != "view":
            return queryset.none()
        return queryset.filter(_quota_visible(user))
    workspace_field = getattr(model, "workspace_field", None)
    if workspace_field is None:
        raise TypeError(f"{model.__name__} declares no workspace_field; restrict() does not know who may see it")
    return queryset.filter(_scoped_condition(model, user, action, workspace_field))


def can(user: User | None, action: str, obj: Model) -> bool:
    """Whether `user` may perform `action` on `obj`: `restrict` applied to that one row."""
    if user is None or not user.is_authenticated:
        return False
    if getattr(user, "is_superuser", False):
        return True
    return restrict(type(obj)._default_manager.filter(pk=obj.pk), user, action).exists()


def role_of(user: User | None, workspace: Workspace) -> str | None:
    """The user's role in the workspace, None when not a member; read fresh on every call."""
    if user is None or not user.is_authenticated:
        return None
    return Membership.objects.filter(workspace=workspace, user_id=_uid(user)).values_list("role", flat=True).first()


def role_capabilities(workspace: Workspace, role: str) -> frozenset[str]:
    """The capabilities a basic role slug or one of the workspace's custom roles grants."""
    if role in ROLE_PERMISSIONS:
        return ROLE_PERMISSIONS[role]
    permissions_list = CustomRole.objects.filter(workspace=workspace, name=role).values_list("permissions", flat=True)
    granted = permissions_list.first()
    return frozenset(granted or ())


def denial_reason(user: User | None, action: str, obj: Model) -> str:
    """A sentence saying why `user` may not perform `action` on the (visible) `obj`."""
    if isinstance(obj, Quota):
        return f"Only platform admins may change quota {obj.name}."
    if isinstance(obj, Workspace):
        workspace = obj
        if action == "administer":
            return "Only platform admins may create, rename or delete workspaces or bind quotas to them."
        role = role_of(user, workspace)
        if role is None:
            return f"Only members of {workspace.name} may see its members, roles and scheduling configuration."
        return (
            f"Role '{role}' in {workspace.name} may not change its members, roles, "
            "scheduling configuration or description."
        )
    workspace_field = getattr(type(obj), "workspace_field", "workspace")
    workspace = getattr(obj, workspace_field)
    role = role_of(user, workspace)
    owner_field = getattr(type(obj), "owner_field", None)
    is_owner = owner_field is not None and user is not None and getattr(obj, f"{owner_field}_id", None) == user.pk
    described = f"{type(obj)._meta.verbose_name} '{obj}'"
    if is_owner and role is not None:
        return f"Role '{role}' in {workspace.name} may not manage jobs, not even its own {described}."
    if is_owner:
        return f"You are no longer allowed to use {workspace.name}, so you may not manage {described}."
    if role is not None:
        return (
            f"Role '{role}' in {workspace.name} may not manage {described}; only its owner, operators and admins may."
        )
    return f"Only the owner, operators and admins of {workspace.name} may manage {described}."


def require(actor: User | None, action: str, workspace: Workspace) -> None:
    """A write's check: `actor=None` is the system (a scenario, a management command); anyone else
    needs `action` on the workspace, or is refused with the reason."""
    if actor is not None and not can(actor, action, workspace):
        raise PermissionDenied(denial_reason(actor, action, workspace))


def check_submission(
    *,
    user: User,
    workspace: Workspace,
    quota: Quota,
    priority: int,
    gpus_per_job: float,
    user_gpus_in_use: float,
) -> None:
    """Refuse a submission that the workspace's Scheduling Configurations do not allow.

    `gpus_per_job` is everything the job asks (gpus per replica times replicas); `user_gpus_in_use`
    what the user's live jobs (pending and running) of this workspace in this quota hold or ask,
    the job being submitted excluded. Raises ValidationError ("quota" unbound; "gpus" over a
    cap, with the numbers) for a 400 and PermissionDenied (naming the role and the quota) for
    a 403. Platform admins may use any bound quota, without role rules or caps.
    """
    if not user.is_authenticated:
        raise PermissionDenied("Sign in to submit jobs.")
    if not QuotaBinding.objects.filter(workspace=workspace, quota=quota).exists():
        bound = ", ".join(workspace.quotas.order_by("name").values_list("name", flat=True)) or "none"
        raise ValidationError(
            {"quota": f"{quota.name} is not bound to workspace {workspace.name} (bound quotas: {bound})."}
        )
    if getattr(user, "is_superuser", False):
        return
    role = role_of(user, workspace)
    may_submit = role is None or JOB_SUBMIT in role_capabilities(workspace, role)
    refusal, admitting = _admission(
        user, workspace, quota, role=role, may_submit=may_submit, rules=_rules_for(user, workspace, quota=quota)
    )
    if refusal is not None:
        raise PermissionDenied(refusal)
    if admitting is None:
        return  # a bound quota without rules is open to every member who may submit
    _check_caps(
        admitting,
        quota=quota,
        priority=priority,
        gpus_per_job=gpus_per_job,
        user_gpus_in_use=user_gpus_in_use,
        username=user.get_username(),
    )


def _rules_for(user: User, workspace: Workspace, **quota_filter: Any) -> list[SchedulingRule]:
    """The workspace's rules (of one quota, or all), each knowing whether it names `user`."""
    return list(
        SchedulingRule.objects.filter(workspace=workspace, **quota_filter)
        .annotate(
            authorizes_user=Exists(
                SchedulingRule.authorized_users.through.objects.filter(
                    schedulingrule_id=OuterRef("pk"), user_id=_uid(user)
                )
            )
        )
        .prefetch_related("caps")
    )


def _admission(
    user: User,
    workspace: Workspace,
    quota: Quota,
    *,
    role: str | None,
    may_submit: bool,
    rules: Sequence[SchedulingRule],
) -> tuple[str | None, list[SchedulingRule] | None]:
    """(refusal, the rules that admit the user) for one bound quota; no refusal and None for the
    rules where the quota has no rules at all (open to every member who may submit)."""
    if role is not None:
        refusal = f"role '{role}' may not use {quota.name} in {workspace.name}"
        if not may_submit:
            return refusal, []
        if not rules:
            return None, None
        admitting = [rule for rule in rules if role in rule.roles]
    else:
        refusal = f"non-member '{user.get_username()}' may not use {quota.name} in {workspace.name}"
        admitting = [rule for rule in rules if rule.non_members or getattr(rule, "authorizes_user", False)]
    return (None if admitting else refusal), admitting


def usable_quotas(*, user: User, workspace: Workspace, quotas: Sequence[Quota]) -> dict[int, str | None]:
    """For each of the workspace's bound `quotas`: None where `check_submission`'s role rules let
    `user` use it, else its refusal. The same rules in three queries however many quotas are
    bound (Submit job lists them all; S3's workspaces hold 111)."""
    if not user.is_authenticated:
        return {quota.pk: "Sign in to submit jobs." for quota in quotas}
    if getattr(user, "is_superuser", False):
        return {quota.pk: None for quota in quotas}
    role = role_of(user, workspace)
    may_submit = role is None or JOB_SUBMIT in role_capabilities(workspace, role)
    by_quota: dict[int, list[SchedulingRule]] = {}
    for rule in _rules_for(user, workspace):
        by_quota.setdefault(rule.quota_id, []).append(rule)
    return {
        quota.pk: _admission(
            user, workspace, quota, role=role, may_submit=may_submit, rules=by_quota.get(quota.pk, [])
        )[0]
        for quota in quotas
    }


def submittable_workspaces(user: User | None) -> QuerySet[Workspace]:
    """Workspaces where the user may submit at all: holding `job.submit` as a member, or as a
    non-member named in (or let in by) a rule. Unlike restrict(..., "submit") a visitor's
    workspace is not among them, so pages offer Submit only where it can succeed."""
    if user is None or not user.is_authenticated:
        return Workspace.objects.none()
    if getattr(user, "is_superuser", False):
        return Workspace.objects.all()
    return Workspace.objects.filter(
        _holds(user, "pk", JOB_SUBMIT) | (~_member(user, "pk") & (_authorized(user, "pk") | _open_to_non_members("pk")))
    )


@dataclass(frozen=True, slots=True)
class SubmissionCaps:
    """The strictest caps that apply to one user's job at one priority; None: no cap."""

    per_job: float | None
    per_user: float | None


def submission_caps(*, user: User, workspace: Workspace, quota: Quota, priority: int) -> SubmissionCaps:
    """The caps `check_submission` would hold a job of this priority to, for showing them
    before submitting; no caps for platform admins or where no rule admits the user."""
    if not user.is_authenticated or getattr(user, "is_superuser", False):
        return SubmissionCaps(per_job=None, per_user=None)
    role = role_of(user, workspace)
    refusal, admitting = _admission(
        user, workspace, quota, role=role, may_submit=True, rules=_rules_for(user, workspace, quota=quota)
    )
    if refusal is not None or admitting is None:
        return SubmissionCaps(per_job=None, per_user=None)
    covering = [cap for rule in admitting for cap in rule.caps.all() if cap.covers(priority)]
    per_job = [cap.max_gpus_per_job for cap in covering if cap.max_gpus_per_job is not None]
    per_user = [cap.max_gpus_per_user for cap in covering if cap.max_gpus_per_user is not None]
    return SubmissionCaps(per_job=min(per_job) if per_job else None, per_user=min(per_user) if per_user else None)


def _check_caps(
    admitting: Sequence[SchedulingRule],
    *,
    quota: Quota,
    priority: int,
    gpus_per_job: float,
    user_gpus_in_use: float,
    username: str,
) -> None:
    # Every cap of every admitting rule that covers the priority applies: the strictest wins.
    covering = [cap for rule in admitting for cap in rule.caps.all() if cap.covers(priority)]
    per_job = [cap.max_gpus_per_job for cap in covering if cap.max_gpus_per_job is not None]
    per_user = [cap.max_gpus_per_user for cap in covering if cap.max_gpus_per_user is not None]
    if per_job and gpus_per_job > min(per_job):
        raise ValidationError(
            {
                "gpus": f"asks {_gpus(gpus_per_job)} GPUs per job; the cap for priority {priority} "
                f"on {quota.name} is {_gpus(min(per_job))}"
            }
        )
    if per_user and user_gpus_in_use + gpus_per_job > min(per_user):
        raise ValidationError(
            {
                "gpus": f"asks {_gpus(gpus_per_job)} GPUs while {username} already uses "
                f"{_gpus(user_gpus_in_use)} on {quota.name}; the cap per user for priority {priority} is "
                f"{_gpus(min(per_user))}: {_gpus(user_gpus_in_use)} + {_gpus(gpus_per_job)} > "
                f"{_gpus(min(per_user))}"
            }
        )


def _gpus(amount: float) -> str:
    return f"{amount:g}"


# --- the filters -------------------------------------------------------------------------------


def _uid(user: User) -> int:
    return cast(int, user.pk)  # callers have ruled out anonymous users


def _member(user: User, workspace_ref: str) -> Q:
    return Q(Exists(Membership.objects.filter(workspace=OuterRef(workspace_ref), user_id=_uid(user))))


def _holds(user: User, workspace_ref: str, capability: str) -> Q:
    grants = WorkspaceUserPermission.objects.filter(
        content_object=OuterRef(workspace_ref),
        user_id=_uid(user),
        permission__codename=CAPABILITY_CODENAMES[capability],
        permission__content_type__app_label="workspaces",
    )
    return Q(Exists(grants))


def _authorized(user: User, workspace_ref: str) -> Q:
    rules = SchedulingRule.objects.filter(workspace=OuterRef(workspace_ref), authorized_users__id=_uid(user))
    return Q(Exists(rules))


def _open_to_non_members(workspace_ref: str) -> Q:
    return Q(Exists(SchedulingRule.objects.filter(workspace=OuterRef(workspace_ref), non_members=True)))


def _workspace_condition(user: User, action: str, ref: str) -> Q:
    if action not in WORKSPACE_ACTIONS:
        raise ValueError(f"unknown workspace action {action!r}; known: {', '.join(sorted(WORKSPACE_ACTIONS))}")
    if action == "view":
        return _member(user, ref) | _authorized(user, ref)
    if action == "view_details":
        return _member(user, ref)
    if action == "submit":
        return _member(user, ref) | _authorized(user, ref) | _open_to_non_members(ref)
    if action == "manage":
        return _holds(user, ref, WORKSPACE_MANAGE)
    return Q(pk__in=[])  # administer: platform admins only, and they never get here


def _quota_visible(user: User) -> Q:
    bound_to_mine = QuotaBinding.objects.filter(quota=OuterRef("pk"), workspace__memberships__user_id=_uid(user))
    usable = SchedulingRule.objects.filter(quota=OuterRef("pk")).filter(
        Q(non_members=True) | Q(authorized_users__id=_uid(user))
    )
    return Q(Exists(bound_to_mine)) | Q(Exists(usable))


def _scoped_condition(model: type[Model], user: User, action: str, workspace_field: str) -> Q:
    if action not in SCOPED_ACTIONS:
        raise ValueError(f"unknown action {action!r} for {model.__name__}; known: {', '.join(sorted(SCOPED_ACTIONS))}")
    owner_field: str | None = getattr(model, "owner_field", None)
    owned = Q(**{f"{owner_field}_id": _uid(user)}) if owner_field else Q(pk__in=[])
    if action == "view":
        return _member(user, workspace_field) | owned
    manage_capability: str = getattr(model, "manage_capability", JOB_MANAGE_ALL)
    managers = _holds(user, workspace_field, manage_capability)
    if owner_field is None:
        return managers
    # An owner keeps managing their job only while they could still submit it.
    may_still_submit = _holds(user, workspace_field, JOB_SUBMIT) | (
        ~_member(user, workspace_field) & (_authorized(user, workspace_field) | _open_to_non_members(workspace_field))
    )
    return managers | (owned & may_still_submit)


# --- DRF ---------------------------------------------------------------------------------------
