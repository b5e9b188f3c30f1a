"""The choke point itself: restrict(), can() and check_submission(), persona by persona."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.models import Quota
from tests.workspaces.permissions import PERSONAS, PermissionWorld, make_account
from workspaces import services
from workspaces.models import Membership, Workspace, WorkspaceUserPermission
from workspaces.permissions import can, check_submission, restrict
from workspaces.services import CapSpec

VISIBLE_WORKSPACES = {
    "platform_admin": {"workspace-b", "workspace-c"},
    "workspace_admin": {"workspace-b"},
    "developer": {"workspace-b"},
    "operator": {"workspace-b"},
    "labeling_admin": {"workspace-b"},
    "visitor": {"workspace-b"},
    "custom_role": {"workspace-b"},
    "authorized_non_member": {"workspace-b"},
    "non_member": set(),
    "anonymous": set(),
}

VISIBLE_QUOTAS = {
    "platform_admin": {"Quota1", "Quota1.1", "Quota1.2"},
    "workspace_admin": {"Quota1.1"},
    "developer": {"Quota1.1"},
    "operator": {"Quota1.1"},
    "labeling_admin": {"Quota1.1"},
    "visitor": {"Quota1.1"},
    "custom_role": {"Quota1.1"},
    "authorized_non_member": {"Quota1.1"},
    "non_member": set(),
    "anonymous": set(),
}

MANAGES_OWN_WORKSPACE = {"platform_admin", "workspace_admin"}


@pytest.mark.parametrize("persona", PERSONAS)
def test_workspaces_visible_to_each_persona(world: PermissionWorld, persona: str) -> None:
    visible = restrict(Workspace.objects.all(), world.user(persona), "view")
    assert set(visible.values_list("name", flat=True)) == VISIBLE_WORKSPACES[persona]


@pytest.mark.parametrize("persona", PERSONAS)
def test_quotas_visible_to_each_persona(world: PermissionWorld, persona: str) -> None:
    visible = restrict(Quota.objects.all(), world.user(persona), "view")
    assert set(visible.values_list("name", flat=True)) == VISIBLE_QUOTAS[persona]


@pytest.mark.parametrize("persona", PERSONAS)
def test_only_workspace_admins_manage_their_workspace(world: PermissionWorld, persona: str) -> None:
    assert can(world.user(persona), "manage", world.own) is (persona in MANAGES_OWN_WORKSPACE)
    assert can(world.user(persona), "manage", world.foreign) is (persona == "platform_admin")


def test_a_workspace_admin_of_one_workspace_cannot_manage_another(world: PermissionWorld) -> None:
    admin_c = world.foreign_users["workspace_admin"]
    assert can(admin_c, "manage", world.foreign)
    assert not can(admin_c, "manage", world.own)
    assert not can(admin_c, "view", world.own)


def test_restrict_rejects_an_unknown_action(world: PermissionWorld) -> None:
    with pytest.raises(ValueError, match=re.escape("unknown workspace action 'edit'")):
        restrict(Workspace.objects.all(), world.user("developer"), "edit")


def test_restrict_is_one_query_whatever_the_number_of_workspaces(world: PermissionWorld) -> None:
    developer = world.user("developer")
    with CaptureQueriesContext(connection) as few:
        list(restrict(Workspace.objects.all(), developer, "view"))
    for index in range(30):
        extra = services.create_workspace(actor=None, name=f"extra-{index}", quotas=[world.quotas["Quota1.2"]])
        services.add_member(actor=None, workspace=extra, user=make_account(f"extra-user-{index}"), role="developer")
    with CaptureQueriesContext(connection) as many:
        visible = list(restrict(Workspace.objects.all(), developer, "view"))
    assert len(few) == len(many) == 1
    assert [workspace.name for workspace in visible] == ["workspace-b"]


# --- submission ----------------------------------------------------------------------------------

# What each persona gets when submitting a 1-GPU job to each workspace's bound quota.
SUBMISSION = {
    "platform_admin": ("ok", "ok"),
    "workspace_admin": ("ok", "403"),
    "developer": ("ok", "403"),
    "operator": ("ok", "403"),
    "labeling_admin": ("ok", "403"),
    "visitor": ("403", "403"),
    "custom_role": ("ok", "403"),
    "authorized_non_member": ("ok", "403"),
    "non_member": ("403", "403"),
}


def _outcome(world: PermissionWorld, persona: str, workspace: Workspace, quota: Quota) -> str:
    user = world.user(persona)
    assert user is not None
    try:
        check_submission(user=user, workspace=workspace, quota=quota, priority=5, gpus_per_job=1, user_gpus_in_use=0)
    except PermissionDenied:
        return "403"
    except ValidationError:
        return "400"
    return "ok"


@pytest.mark.parametrize("persona", [p for p in PERSONAS if p != "anonymous"])
def test_who_may_submit_where(world: PermissionWorld, persona: str) -> None:
    own = _outcome(world, persona, world.own, world.quotas["Quota1.1"])
    foreign = _outcome(world, persona, world.foreign, world.quotas["Quota1.2"])
    assert (own, foreign) == SUBMISSION[persona]


def test_a_quota_not_bound_to_the_workspace_is_a_400_on_quota(world: PermissionWorld) -> None:
    with pytest.raises(ValidationError) as refused:
        check_submission(
            user=world.user("developer"),  # type: ignore[arg-type]
            workspace=world.own,
            quota=world.quotas["Quota1.2"],
            priority=5,
            gpus_per_job=1,
            user_gpus_in_use=0,
        )
    assert refused.value.message_dict == {
        "quota": ["Quota1.2 is not bound to workspace workspace-b (bound quotas: Quota1.1)."]
    }


def test_even_platform_admins_submit_only_to_bound_quotas(world: PermissionWorld) -> None:
    with pytest.raises(ValidationError, match=re.escape("Quota1 is not bound")):
        check_submission(
            user=world.user("platform_admin"),  # type: ignore[arg-type]
            workspace=world.own,
            quota=world.quotas["Quota1"],
            priority=5,
            gpus_per_job=1,
            user_gpus_in_use=0,
        )


def test_the_refusal_names_the_role_the_quota_and_the_workspace(world: PermissionWorld) -> None:
    with pytest.raises(PermissionDenied) as refused:
        check_submission(
            user=world.user("visitor"),  # type: ignore[arg-type]
            workspace=world.own,
            quota=world.quotas["Quota1.1"],
            priority=5,
            gpus_per_job=1,
            user_gpus_in_use=0,
        )
    assert str(refused.value) == "role 'visitor' may not use Quota1.1 in workspace-b"


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        pytest.param("admin", True, id="admin"),
        pytest.param("developer", True, id="developer"),
        pytest.param("operator", True, id="operator"),
        pytest.param("labeling_admin", True, id="labeling_admin"),
        pytest.param("visitor", False, id="visitor"),
    ],
)
def test_a_bound_quota_without_rules_is_open_to_members_except_visitors(
    world: PermissionWorld, role: str, allowed: bool
) -> None:
    member = make_account(f"c-{role}-member")
    services.add_member(actor=None, workspace=world.foreign, user=member, role=role)
    arguments = {
        "user": member,
        "workspace": world.foreign,
        "quota": world.quotas["Quota1.2"],
        "priority": 5,
        "gpus_per_job": 8,
        "user_gpus_in_use": 0,
    }
    if allowed:
        check_submission(**arguments)  # type: ignore[arg-type]
    else:
        with pytest.raises(PermissionDenied, match=re.escape(f"role '{role}' may not use Quota1.2 in workspace-c")):
            check_submission(**arguments)  # type: ignore[arg-type]


def test_a_rule_open_to_non_members_admits_any_signed_in_user(world: PermissionWorld) -> None:
    stranger = world.user("non_member")
    services.set_scheduling_config(
        actor=None, workspace=world.foreign, rules=[{"quota": "Quota1.2", "roles": ["admin"], "non_members": True}]
    )
    check_submission(
        user=stranger,  # type: ignore[arg-type]
        workspace=world.foreign,
        quota=world.quotas["Quota1.2"],
        priority=3,
        gpus_per_job=2,
        user_gpus_in_use=0,
    )
    assert set(restrict(Quota.objects.all(), stranger, "view").values_list("name", flat=True)) == {"Quota1.2"}
    assert list(restrict(Workspace.objects.all(), stranger, "submit").values_list("name", flat=True)) == ["workspace-c"]


# --- caps ----------------------------------------------------------------------------------------

PAI_CAPS: list[CapSpec] = [
    {"priority_min": 1, "priority_max": 7, "max_gpus_per_job": 100},
    {"priority_min": 7, "priority_max": 9, "max_gpus_per_job": 10},
]


def _set_caps(world: PermissionWorld, caps: list[CapSpec]) -> None:
    services.set_scheduling_config(
        actor=None,
        workspace=world.own,
        rules=[{"quota": "Quota1.1", "roles": ["admin", "developer"], "caps": caps}],
    )


@pytest.mark.parametrize(
    ("priority", "gpus", "refusal"),
    [
        pytest.param(6, 100, None, id="p6-100-under-admin-cap"),
        pytest.param(6, 101, "asks 101 GPUs per job; the cap for priority 6 on Quota1.1 is 100", id="p6-101"),
        pytest.param(7, 10, None, id="p7-10-strictest"),
        pytest.param(7, 16, "asks 16 GPUs per job; the cap for priority 7 on Quota1.1 is 10", id="p7-16-strictest"),
        pytest.param(9, 11, "asks 11 GPUs per job; the cap for priority 9 on Quota1.1 is 10", id="p9-11"),
    ],
)
def test_the_strictest_matching_cap_wins(
    world: PermissionWorld, priority: int, gpus: float, refusal: str | None
) -> None:
    _set_caps(world, PAI_CAPS)
    arguments = {
        "user": world.user("workspace_admin"),
        "workspace": world.own,
        "quota": world.quotas["Quota1.1"],
        "priority": priority,
        "gpus_per_job": gpus,
        "user_gpus_in_use": 0,
    }
    if refusal is None:
        check_submission(**arguments)  # type: ignore[arg-type]
        return
    with pytest.raises(ValidationError) as refused:
        check_submission(**arguments)  # type: ignore[arg-type]
    assert refused.value.message_dict == {"gpus": [refusal]}


def test_caps_of_two_rules_that_both_admit_the_user_combine(world: PermissionWorld) -> None:
    services.set_scheduling_config(
        actor=None,
        workspace=world.own,
        rules=[
            {
                "quota": "Quota1.1",
                "roles": ["admin"],
                "caps": [{"priority_min": 1, "priority_max": 7, "max_gpus_per_job": 100}],
            },
            {
                "quota": "Quota1.1",
                "roles": ["admin", "developer"],
                "caps": [{"priority_min": 7, "priority_max": 9, "max_gpus_per_job": 10}],
            },
        ],
    )
    with pytest.raises(ValidationError, match=re.escape("the cap for priority 7 on Quota1.1 is 10")):
        check_submission(
            user=world.user("workspace_admin"),  # type: ignore[arg-type]
            workspace=world.own,
            quota=world.quotas["Quota1.1"],
            priority=7,
            gpus_per_job=16,
            user_gpus_in_use=0,
        )


def test_the_per_user_cap_counts_what_the_user_already_uses(world: PermissionWorld) -> None:
    _set_caps(world, [{"priority_min": 1, "priority_max": 9, "max_gpus_per_user": 24}])
    common = {"user": world.user("developer"), "workspace": world.own, "quota": world.quotas["Quota1.1"], "priority": 3}
    check_submission(**common, gpus_per_job=8, user_gpus_in_use=16)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as refused:
        check_submission(**common, gpus_per_job=8.5, user_gpus_in_use=16)  # type: ignore[arg-type]
    assert refused.value.message_dict == {
        "gpus": [
            "asks 8.5 GPUs while b-developer already uses 16 on Quota1.1; "
            "the cap per user for priority 3 is 24: 16 + 8.5 > 24"
        ]
    }


def test_platform_admins_are_not_capped(world: PermissionWorld) -> None:
    _set_caps(world, PAI_CAPS)
    check_submission(
        user=world.user("platform_admin"),  # type: ignore[arg-type]
        workspace=world.own,
        quota=world.quotas["Quota1.1"],
        priority=9,
        gpus_per_job=48,
        user_gpus_in_use=0,
    )


# --- revocation and the guardian mirror ------------------------------------------------------------


def test_removing_a_member_takes_effect_on_the_next_check(world: PermissionWorld) -> None:
    admin = world.user("workspace_admin")
    assert can(admin, "manage", world.own)
    # A workspace keeps one admin (workspaces/services.py): the operator takes over first.
    services.change_member_role(
        actor=None, membership=Membership.objects.get(user=world.user("operator"), workspace=world.own), role="admin"
    )
    services.remove_member(actor=None, membership=Membership.objects.get(user=admin, workspace=world.own))
    assert not can(admin, "view", world.own)
    assert not can(admin, "manage", world.own)
    assert not WorkspaceUserPermission.objects.filter(user=admin).exists()


def test_demoting_a_member_takes_effect_on_the_next_check(world: PermissionWorld) -> None:
    operator = world.user("operator")
    services.change_member_role(
        actor=None, membership=Membership.objects.get(user=operator, workspace=world.own), role="visitor"
    )
    with pytest.raises(PermissionDenied, match=re.escape("role 'visitor' may not use Quota1.1")):
        check_submission(
            user=operator,  # type: ignore[arg-type]
            workspace=world.own,
            quota=world.quotas["Quota1.1"],
            priority=5,
            gpus_per_job=1,
            user_gpus_in_use=0,
        )


def test_changing_a_custom_role_changes_what_its_holders_may_do(world: PermissionWorld) -> None:
    holder = world.user("custom_role")
    assert not can(holder, "manage", world.own)
    role = world.own.custom_roles.get(name="submitter")
    services.update_custom_role(actor=None, role=role, permissions=["job.submit", "workspace.manage"])
    assert can(holder, "manage", world.own)


def test_dropping_an_authorized_user_from_the_rule_revokes_them(world: PermissionWorld) -> None:
    guest = world.user("authorized_non_member")
    services.set_scheduling_config(
        actor=None, workspace=world.own, rules=[{"quota": "Quota1.1", "roles": ["developer"]}]
    )
    assert not can(guest, "view", world.own)
    with pytest.raises(PermissionDenied, match=re.escape("non-member 'guest' may not use Quota1.1 in workspace-b")):
        check_submission(
            user=guest,  # type: ignore[arg-type]
            workspace=world.own,
            quota=world.quotas["Quota1.1"],
            priority=5,
            gpus_per_job=1,
            user_gpus_in_use=0,
        )
