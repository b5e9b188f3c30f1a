"""Every write to workspaces: members, roles and quota bindings here; the Scheduling
Configurations in rules.py, whose names this module re-exports.

Each function runs in one transaction, checks that the actor may do it (`actor=None` is the
system: a scenario, a management command) and writes an audit record. A membership's
capabilities are mirrored into guardian object permissions on the workspace here, in the same
transaction, which is what lets `workspaces.permissions.restrict` answer with one query.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Permission
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import ProtectedError

from quotas import audit, bounds
from quotas.models import Quota
from workspaces import selectors
from workspaces.access import notify_access_changed
from workspaces.models import (
    CAPABILITIES,
    CAPABILITY_CODENAMES,
    ROLE_PERMISSIONS,
    WORKSPACE_MANAGE,
    CustomRole,
    Membership,
    QuotaBinding,
    SchedulingRule,
    Workspace,
    WorkspaceUserPermission,
)
from workspaces.permissions import require, role_capabilities
from workspaces.rules import CapSpec as CapSpec
from workspaces.rules import RuleSpec as RuleSpec
from workspaces.rules import scheduling_config as scheduling_config
from workspaces.rules import set_scheduling_config as set_scheduling_config

Actor = AbstractBaseUser | AnonymousUser | None


# --- workspaces and bindings -------------------------------------------------------------------


@transaction.atomic
def create_workspace(*, actor: Actor, name: str, description: str = "", quotas: Iterable[Quota] = ()) -> Workspace:
    _require_platform_admin(actor, "create workspaces")
    name = name.strip()
    _check_workspace_text(name=name, description=description)
    if Workspace.objects.filter(name=name).exists():
        raise ValidationError({"name": f"A workspace named {name!r} already exists."})
    workspace = Workspace.objects.create(name=name, description=description)
    bound = _unique_quotas(quotas)
    QuotaBinding.objects.bulk_create([QuotaBinding(workspace=workspace, quota=quota) for quota in bound])
    audit.record(
        actor=actor,
        action="workspace.create",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        after=_workspace_state(workspace),
    )
    return workspace


@transaction.atomic
def update_workspace(
    *,
    actor: Actor,
    workspace: Workspace,
    name: str | None = None,
    description: str | None = None,
    quotas: Iterable[Quota] | None = None,
) -> Workspace:
    """Workspace admins edit the description; renaming and binding quotas are the platform's."""
    workspace = Workspace.objects.select_for_update().get(pk=workspace.pk)
    before = _workspace_state(workspace)
    renamed = name is not None and name.strip() != workspace.name
    rebound = quotas is not None and {quota.pk for quota in quotas} != set(
        workspace.bindings.values_list("quota_id", flat=True)
    )
    if renamed or rebound:
        _require_platform_admin(actor, "rename workspaces or bind quotas to them")
    if description is not None and description != workspace.description:
        require(actor, "manage", workspace)
        _check_workspace_text(name=None, description=description)
        workspace.description = description
    if renamed and name is not None:
        name = name.strip()
        _check_workspace_text(name=name, description=None)
        if Workspace.objects.filter(name=name).exclude(pk=workspace.pk).exists():
            raise ValidationError({"name": f"A workspace named {name!r} already exists."})
        workspace.name = name
    workspace.save()
    if rebound and quotas is not None:
        wanted = {quota.pk: quota for quota in _unique_quotas(quotas)}
        current = set(workspace.bindings.values_list("quota_id", flat=True))
        for quota_id in current - wanted.keys():
            _unbind(workspace, quota_id)
        QuotaBinding.objects.bulk_create(
            [QuotaBinding(workspace=workspace, quota=wanted[quota_id]) for quota_id in wanted.keys() - current]
        )
    audit.record(
        actor=actor,
        action="workspace.update",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        before=before,
        after=_workspace_state(workspace),
    )
    return workspace


@transaction.atomic
def delete_workspace(*, actor: Actor, workspace: Workspace) -> None:
    _require_platform_admin(actor, "delete workspaces")
    before = _workspace_state(workspace)
    workspace_id, workspace_name = workspace.pk, workspace.name
    try:
        workspace.delete()
    except ProtectedError as error:
        raise ValidationError(
            {
                "workspace": f"{workspace_name} still has {len(error.protected_objects)} jobs; "
                "cancel or remove them first."
            }
        ) from error
    audit.record(
        actor=actor,
        action="workspace.delete",
        object_type="workspace",
        object_id=workspace_id,
        object_repr=workspace_name,
        before=before,
    )


@transaction.atomic
def bind_quota(*, actor: Actor, workspace: Workspace, quota: Quota) -> QuotaBinding:
    _require_platform_admin(actor, "bind quotas to workspaces")
    if QuotaBinding.objects.filter(workspace=workspace, quota=quota).exists():
        raise ValidationError({"quota": f"{quota.name} is already bound to {workspace.name}."})
    binding = QuotaBinding.objects.create(workspace=workspace, quota=quota)
    audit.record(
        actor=actor,
        action="workspace.bind_quota",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        after={"quota": quota.name},
    )
    return binding


@transaction.atomic
def unbind_quota(*, actor: Actor, workspace: Workspace, quota: Quota) -> None:
    """The workspace's rules for that quota go with the binding; running jobs are left alone."""
    _require_platform_admin(actor, "unbind quotas from workspaces")
    if not QuotaBinding.objects.filter(workspace=workspace, quota=quota).exists():
        raise ValidationError({"quota": f"{quota.name} is not bound to {workspace.name}."})
    _unbind(workspace, quota.pk)
    audit.record(
        actor=actor,
        action="workspace.unbind_quota",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        before={"quota": quota.name},
    )


# --- members -----------------------------------------------------------------------------------


@transaction.atomic
def add_member(*, actor: Actor, workspace: Workspace, user: AbstractBaseUser, role: str) -> Membership:
    require(actor, "manage", workspace)
    _validate_role(workspace, role)
    if Membership.objects.filter(workspace=workspace, user_id=user.pk).exists():
        raise ValidationError({"user": f"{user.get_username()} is already a member of {workspace.name}."})
    membership = Membership.objects.create(workspace=workspace, user_id=user.pk, role=role)
    _grant(membership)
    audit.record(
        actor=actor,
        action="workspace.add_member",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        after={"user": user.get_username(), "role": role},
    )
    return membership


@transaction.atomic
def change_member_role(*, actor: Actor, membership: Membership, role: str) -> Membership:
    workspace = membership.workspace
    require(actor, "manage", workspace)
    _validate_role(workspace, role)
    membership = Membership.objects.select_for_update().select_related("user").get(pk=membership.pk)
    if WORKSPACE_MANAGE not in role_capabilities(workspace, role):
        _keep_an_admin(workspace, leaving=membership, field="role")
    before = {"user": membership.user.get_username(), "role": membership.role}
    membership.role = role
    membership.save(update_fields=["role"])
    _grant(membership)
    notify_access_changed(user_ids=[membership.user_id])
    audit.record(
        actor=actor,
        action="workspace.change_member_role",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        before=before,
        after={"user": membership.user.get_username(), "role": role},
    )
    return membership


@transaction.atomic
def remove_member(*, actor: Actor, membership: Membership) -> None:
    workspace = membership.workspace
    require(actor, "manage", workspace)
    _keep_an_admin(workspace, leaving=membership, field="user")
    before = {"user": membership.user.get_username(), "role": membership.role}
    WorkspaceUserPermission.objects.filter(content_object=workspace, user_id=membership.user_id).delete()
    membership.delete()
    # The removed member's open pages stop receiving this workspace's jobs within seconds.
    notify_access_changed(user_ids=[membership.user_id])
    audit.record(
        actor=actor,
        action="workspace.remove_member",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        before=before,
    )


# --- custom roles ------------------------------------------------------------------------------


@transaction.atomic
def create_custom_role(*, actor: Actor, workspace: Workspace, name: str, permissions: Sequence[str]) -> CustomRole:
    require(actor, "manage", workspace)
    name = name.strip()
    if not name:
        raise ValidationError({"name": "A role needs a name."})
    if len(name) > bounds.NAME_MAX_LENGTH:
        raise ValidationError(
            {"name": f"A role name has at most {bounds.NAME_MAX_LENGTH} characters, got {len(name)}."}
        )
    if name in ROLE_PERMISSIONS:
        raise ValidationError({"name": f"{name!r} is a basic role; pick another name for a custom role."})
    if CustomRole.objects.filter(workspace=workspace, name=name).exists():
        raise ValidationError({"name": f"{workspace.name} already has a role named {name!r}."})
    role = CustomRole.objects.create(workspace=workspace, name=name, permissions=_validate_capabilities(permissions))
    audit.record(
        actor=actor,
        action="workspace.create_role",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        after={"role": name, "permissions": role.permissions},
    )
    return role


@transaction.atomic
def update_custom_role(*, actor: Actor, role: CustomRole, permissions: Sequence[str]) -> CustomRole:
    """Members holding the role get the new capabilities at once."""
    workspace = role.workspace
    require(actor, "manage", workspace)
    role = CustomRole.objects.select_for_update().get(pk=role.pk)
    before = {"role": role.name, "permissions": role.permissions}
    granted = _validate_capabilities(permissions)
    if WORKSPACE_MANAGE in role.permissions and WORKSPACE_MANAGE not in granted:
        admins = _admin_memberships(workspace)
        if admins and all(admin.role == role.name for admin in admins):
            names = ", ".join(admin.user.get_username() for admin in admins)
            raise ValidationError(
                {
                    "permissions": f"{names} manage {workspace.name} only through role {role.name!r}; "
                    "make another member admin first."
                }
            )
    role.permissions = granted
    role.save(update_fields=["permissions"])
    for membership in Membership.objects.filter(workspace=workspace, role=role.name):
        _grant(membership)
    audit.record(
        actor=actor,
        action="workspace.update_role",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        before=before,
        after={"role": role.name, "permissions": role.permissions},
    )
    return role


@transaction.atomic
def delete_custom_role(*, actor: Actor, role: CustomRole) -> None:
    workspace = role.workspace
    require(actor, "manage", workspace)
    holders = Membership.objects.filter(workspace=workspace, role=role.name).count()
    if holders:
        raise ValidationError(
            {"name": f"{holders} members of {workspace.name} hold role {role.name!r}; change them first."}
        )
    naming_rules = [rule for rule in SchedulingRule.objects.filter(workspace=workspace) if role.name in rule.roles]
    if naming_rules:
        raise ValidationError(
            {
                "name": f"{len(naming_rules)} scheduling rules of {workspace.name} name role {role.name!r}; "
                "edit them first."
            }
        )
    before = {"role": role.name, "permissions": role.permissions}
    role.delete()
    audit.record(
        actor=actor,
        action="workspace.delete_role",
        object_type="workspace",
        object_id=workspace.pk,
        object_repr=workspace.name,
        before=before,
    )


# --- helpers -----------------------------------------------------------------------------------


def _check_workspace_text(*, name: str | None, description: str | None) -> None:
    errors: dict[str, str] = {}
    if name is not None and not name:
        errors["name"] = "A workspace needs a name."
    elif name is not None and len(name) > bounds.NAME_MAX_LENGTH:
        errors["name"] = f"A workspace name has at most {bounds.NAME_MAX_LENGTH} characters, got {len(name)}."
    if description is not None and len(description) > bounds.DESCRIPTION_MAX_LENGTH:
        errors["description"] = (
            f"A description has at most {bounds.DESCRIPTION_MAX_LENGTH:,} characters, got {len(description):,}."
        )
    if errors:
        raise ValidationError(errors)


def _validate_role(workspace: Workspace, role: str) -> None:
    if role in ROLE_PERMISSIONS or CustomRole.objects.filter(workspace=workspace, name=role).exists():
        return
    custom = list(workspace.custom_roles.values_list("name", flat=True))
    raise ValidationError(
        {"role": f"unknown role {role!r} in {workspace.name}; roles: {', '.join([*ROLE_PERMISSIONS, *custom])}"}
    )


def _validate_capabilities(permissions: Sequence[str]) -> list[str]:
    if len(permissions) > bounds.ROLE_PERMISSIONS_MAX:
        raise ValidationError(
            {"permissions": f"a role lists at most {bounds.ROLE_PERMISSIONS_MAX} permissions, got {len(permissions)}"}
        )
    unknown = [permission for permission in permissions if permission not in CAPABILITIES]
    if unknown:
        raise ValidationError(
            {"permissions": f"unknown permissions: {', '.join(unknown)}; known: {', '.join(CAPABILITIES)}"}
        )
    return [capability for capability in CAPABILITIES if capability in permissions]


def _grant(membership: Membership) -> None:
    """Mirror the member's capabilities into guardian permissions on the workspace."""
    workspace = membership.workspace
    WorkspaceUserPermission.objects.filter(content_object=workspace, user_id=membership.user_id).delete()
    codenames = [CAPABILITY_CODENAMES[capability] for capability in role_capabilities(workspace, membership.role)]
    granted = Permission.objects.filter(
        content_type=ContentType.objects.get_for_model(Workspace), codename__in=codenames
    )
    WorkspaceUserPermission.objects.bulk_create(
        [
            WorkspaceUserPermission(content_object=workspace, user_id=membership.user_id, permission=permission)
            for permission in granted
        ]
    )


def _admin_memberships(workspace: Workspace) -> list[Membership]:
    """The managing members, locked: two admins demoting each other at once must not both succeed."""
    return list(selectors.managing_memberships(workspace=workspace).select_for_update())


def _keep_an_admin(workspace: Workspace, *, leaving: Membership, field: str) -> None:
    """A workspace keeps an admin of its own. A platform admin (or the system) is no exception:
    without one, its members have nobody of the team to ask for a role or a rule."""
    refusal = selectors.last_admin_refusal(
        workspace=workspace, membership=leaving, admins=_admin_memberships(workspace)
    )
    if refusal:
        raise ValidationError({field: refusal})


def _unbind(workspace: Workspace, quota_id: int) -> None:
    SchedulingRule.objects.filter(workspace=workspace, quota_id=quota_id).delete()
    QuotaBinding.objects.filter(workspace=workspace, quota_id=quota_id).delete()


def _unique_quotas(quotas: Iterable[Quota]) -> list[Quota]:
    return list({quota.pk: quota for quota in quotas}.values())


def _workspace_state(workspace: Workspace) -> dict[str, Any]:
    return {
        "name": workspace.name,
        "description": workspace.description,
        "quotas": sorted(workspace.quotas.values_list("name", flat=True)),
    }


def _require_platform_admin(actor: Actor, what: str) -> None:
    if actor is None:
        return
    if not (actor.is_authenticated and getattr(actor, "is_superuser", False)):
        raise PermissionDenied(f"Only platform admins may {what}.")
