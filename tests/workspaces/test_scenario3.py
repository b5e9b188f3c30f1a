"""PAI's Scenario 3 end to end through the API: teams B and C manage their own resources and
rules independently, and neither sees or touches the other's; plus mass-assignment attempts and
revocation that takes effect on the very next request."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from quotas.models import Quota
from tests.workspaces.permissions import PermissionWorld, make_account
from workspaces import services
from workspaces.models import Membership, Workspace

SignedIn = Callable[[User | None], APIClient]


@pytest.fixture
def signed_in() -> SignedIn:
    def make(user: User | None) -> APIClient:
        client = APIClient()
        client.force_authenticate(user=user)
        return client

    return make


def test_teams_b_and_c_are_fully_isolated(world: PermissionWorld, signed_in: SignedIn) -> None:
    admin_b = signed_in(world.user("workspace_admin"))
    admin_c = signed_in(world.foreign_users["workspace_admin"])
    make_account("bob")
    make_account("carol")

    # Each admin manages their own team …
    assert (
        admin_b.post(f"/api/v1/workspaces/{world.own.pk}/members/", {"user": "bob", "role": "developer"}).status_code
        == 201
    )
    assert (
        admin_c.post(
            f"/api/v1/workspaces/{world.foreign.pk}/members/", {"user": "carol", "role": "developer"}
        ).status_code
        == 201
    )
    config_c = {
        "rules": [
            {
                "quota": "Quota1.2",
                "roles": ["developer"],
                "caps": [{"priority_min": 1, "priority_max": 9, "max_gpus_per_job": 16}],
            }
        ]
    }
    assert (
        admin_c.put(f"/api/v1/workspaces/{world.foreign.pk}/scheduling-config/", config_c, format="json").status_code
        == 200
    )

    # … and cannot see, read or change the other's, nor bind the other's quota.
    for path in ("", "members/", "roles/", "scheduling-config/"):
        assert admin_b.get(f"/api/v1/workspaces/{world.foreign.pk}/{path}").status_code == 404
        assert admin_c.get(f"/api/v1/workspaces/{world.own.pk}/{path}").status_code == 404
    assert (
        admin_b.post(f"/api/v1/workspaces/{world.foreign.pk}/members/", {"user": "bob", "role": "admin"}).status_code
        == 404
    )
    hijack = {"rules": [{"quota": "Quota1.2", "roles": ["developer"]}]}
    assert (
        admin_b.put(f"/api/v1/workspaces/{world.own.pk}/scheduling-config/", hijack, format="json").status_code == 400
    )
    assert (
        admin_b.patch(
            f"/api/v1/workspaces/{world.own.pk}/", {"quotas": ["Quota1.1", "Quota1.2"]}, format="json"
        ).status_code
        == 403
    )

    # Lists never hold a foreign row.
    assert [w["name"] for w in admin_b.get("/api/v1/workspaces/").json()["results"]] == ["workspace-b"]
    assert [w["name"] for w in admin_c.get("/api/v1/workspaces/").json()["results"]] == ["workspace-c"]
    members_b = {m["user"] for m in admin_b.get(f"/api/v1/workspaces/{world.own.pk}/members/").json()["results"]}
    assert "carol" not in members_b and "bob" in members_b
    assert Membership.objects.get(user__username="carol").workspace == world.foreign


def test_mass_assignment_cannot_move_rows_or_set_read_only_fields(world: PermissionWorld, signed_in: SignedIn) -> None:
    admin_b = signed_in(world.user("workspace_admin"))
    make_account("bob")
    added = admin_b.post(
        f"/api/v1/workspaces/{world.own.pk}/members/",
        {"user": "bob", "role": "developer", "workspace": world.foreign.pk, "id": 999_999},
        format="json",
    )
    assert added.status_code == 201
    membership = Membership.objects.get(user__username="bob")
    assert (membership.workspace, membership.pk == 999_999) == (world.own, False)

    moved = admin_b.patch(
        f"/api/v1/workspaces/{world.own.pk}/members/{membership.pk}/", {"user": "stranger"}, format="json"
    )
    assert moved.status_code == 400
    assert "cannot change" in moved.json()["user"][0]

    renamed_role = admin_b.patch(
        f"/api/v1/workspaces/{world.own.pk}/roles/{world.ids()['own_spare_role']}/", {"name": "boss"}, format="json"
    )
    assert renamed_role.status_code == 400

    created = signed_in(world.user("platform_admin")).post(
        "/api/v1/workspaces/",
        {"name": "workspace-d", "id": world.own.pk, "created_at": "2000-01-01T00:00:00Z"},
        format="json",
    )
    assert created.status_code == 201
    assert created.json()["id"] != world.own.pk
    assert Workspace.objects.get(name="workspace-d").created_at.year != 2000


def test_a_workspace_admin_cannot_grant_capabilities_that_do_not_exist(
    world: PermissionWorld, signed_in: SignedIn
) -> None:
    answer = signed_in(world.user("workspace_admin")).post(
        f"/api/v1/workspaces/{world.own.pk}/roles/", {"name": "god", "permissions": ["platform.admin"]}, format="json"
    )
    assert answer.status_code == 400
    assert answer.json() == {
        "permissions": ["unknown permissions: platform.admin; known: job.submit, job.manage_all, workspace.manage"]
    }


@pytest.mark.parametrize(
    ("rules", "field", "message"),
    [
        pytest.param(
            [{"quota": "Quota1.2"}],
            "rules[0].quota",
            "quota 'Quota1.2' is not bound to workspace-b (bound quotas: Quota1.1)",
            id="unbound-quota",
        ),
        pytest.param(
            [{"quota": "Quota1.1", "roles": ["chief"]}], "rules[0].roles", "unknown role 'chief'", id="unknown-role"
        ),
        pytest.param(
            [{"quota": "Quota1.1", "authorized_users": ["ghost"]}],
            "rules[0].authorized_users",
            "unknown users: ghost",
            id="unknown-user",
        ),
        pytest.param(
            [{"quota": "Quota1.1", "caps": [{"priority_min": 8, "priority_max": 3, "max_gpus_per_job": 4}]}],
            "rules[0].caps[0].priority_min",
            "priority_min 8 is above priority_max 3",
            id="reversed-range",
        ),
        pytest.param(
            [{"quota": "Quota1.1", "caps": [{"priority_min": 0, "priority_max": 12, "max_gpus_per_job": 4}]}],
            "rules[0].caps[0].priority_max",
            "priority_max must be at most 9, got 12",
            id="out-of-range",
        ),
        pytest.param(
            [{"quota": "Quota1.1", "caps": [{"priority_min": 1, "priority_max": 9, "max_gpus_per_user": -2}]}],
            "rules[0].caps[0].max_gpus_per_user",
            "max_gpus_per_user must be at least 0, got -2",
            id="negative-cap",
        ),
    ],
)
def test_bad_scheduling_config_names_the_field_and_the_numbers(
    world: PermissionWorld,
    signed_in: SignedIn,
    rules: list[dict[str, object]],
    field: str,
    message: str,
) -> None:
    answer = signed_in(world.user("workspace_admin")).put(
        f"/api/v1/workspaces/{world.own.pk}/scheduling-config/", {"rules": rules}, format="json"
    )
    assert answer.status_code == 400
    assert message in answer.json()[field][0]


@pytest.mark.parametrize("revoke", ["remove-membership", "demote-to-visitor"])
def test_revoking_takes_effect_on_the_very_next_request(
    world: PermissionWorld, signed_in: SignedIn, revoke: str
) -> None:
    admin = world.user("workspace_admin")
    client = signed_in(admin)  # the same client (and user object) before and after, as a live session would be
    platform = signed_in(world.user("platform_admin"))
    # A workspace keeps one admin (workspaces/services.py): the operator takes over first.
    services.change_member_role(
        actor=None, membership=Membership.objects.get(user=world.user("operator"), workspace=world.own), role="admin"
    )
    membership = Membership.objects.get(user=admin, workspace=world.own)
    assert (
        client.patch(f"/api/v1/workspaces/{world.own.pk}/", {"description": "before"}, format="json").status_code == 200
    )
    if revoke == "remove-membership":
        assert platform.delete(f"/api/v1/workspaces/{world.own.pk}/members/{membership.pk}/").status_code == 204
        expected = 404
    else:
        assert (
            platform.patch(
                f"/api/v1/workspaces/{world.own.pk}/members/{membership.pk}/", {"role": "visitor"}, format="json"
            ).status_code
            == 200
        )
        expected = 403
    assert (
        client.patch(f"/api/v1/workspaces/{world.own.pk}/", {"description": "after"}, format="json").status_code
        == expected
    )


def test_dropping_an_authorized_user_hides_the_workspace_and_its_quota_on_the_next_request(
    world: PermissionWorld, signed_in: SignedIn
) -> None:
    guest = signed_in(world.user("authorized_non_member"))
    assert guest.get(f"/api/v1/workspaces/{world.own.pk}/").status_code == 200
    assert (
        signed_in(world.user("workspace_admin"))
        .put(
            f"/api/v1/workspaces/{world.own.pk}/scheduling-config/",
            {"rules": [{"quota": "Quota1.1", "roles": ["developer"]}]},
            format="json",
        )
        .status_code
        == 200
    )
    assert guest.get(f"/api/v1/workspaces/{world.own.pk}/").status_code == 404
    assert Quota.objects.filter(name="Quota1.1").exists()
