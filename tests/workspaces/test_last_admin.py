"""A workspace keeps an admin of its own: its last one cannot be removed or demoted, by a platform
admin neither, through the service, the API or the Members tab; and a role change shows what
the member gains and loses before it is confirmed."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from tests.workspaces.permissions import PermissionWorld
from workspaces import selectors, services
from workspaces.models import JOB_SUBMIT, WORKSPACE_MANAGE, Membership

ONLY_ADMIN = "b-workspace-admin is workspace-b's only admin; make another member admin first."


def _membership(world: PermissionWorld, persona: str) -> Membership:
    return Membership.objects.select_related("user").get(workspace=world.own, user=world.user(persona))


def _signed_in(world: PermissionWorld, persona: str) -> Client:
    client = Client()
    client.force_login(world.user(persona))  # type: ignore[arg-type]
    return client


@pytest.mark.parametrize("actor", ["workspace_admin", "platform_admin", "system"])
def test_the_last_admin_is_neither_removed_nor_demoted(world: PermissionWorld, actor: str) -> None:
    who = None if actor == "system" else world.user(actor)
    admin = _membership(world, "workspace_admin")
    with pytest.raises(ValidationError) as removed:
        services.remove_member(actor=who, membership=admin)
    assert removed.value.message_dict == {"user": [ONLY_ADMIN]}
    with pytest.raises(ValidationError) as demoted:
        services.change_member_role(actor=who, membership=admin, role="developer")
    assert demoted.value.message_dict == {"role": [ONLY_ADMIN]}
    admin.refresh_from_db()
    assert admin.role == "admin"


def test_with_a_second_admin_the_first_may_go(world: PermissionWorld) -> None:
    services.change_member_role(actor=None, membership=_membership(world, "operator"), role="admin")
    services.change_member_role(actor=None, membership=_membership(world, "workspace_admin"), role="developer")
    with pytest.raises(ValidationError, match="b-operator is workspace-b's only admin"):
        services.remove_member(actor=None, membership=_membership(world, "operator"))
    # Re-saving the last admin's own role is no demotion.
    services.change_member_role(actor=None, membership=_membership(world, "operator"), role="admin")


def test_a_custom_role_that_manages_counts_as_admin(world: PermissionWorld) -> None:
    services.create_custom_role(actor=None, workspace=world.own, name="steward", permissions=[WORKSPACE_MANAGE])
    services.change_member_role(actor=None, membership=_membership(world, "visitor"), role="steward")
    services.remove_member(actor=None, membership=_membership(world, "workspace_admin"))
    steward = world.own.custom_roles.get(name="steward")
    with pytest.raises(ValidationError) as narrowed:
        services.update_custom_role(actor=None, role=steward, permissions=[JOB_SUBMIT])
    assert narrowed.value.message_dict == {
        "permissions": ["b-visitor manage workspace-b only through role 'steward'; make another member admin first."]
    }


def test_the_api_answers_400_with_the_sentence_on_the_field(world: PermissionWorld) -> None:
    client = APIClient()
    client.force_authenticate(user=world.user("platform_admin"))
    url = f"/api/v1/workspaces/{world.own.pk}/members/{_membership(world, 'workspace_admin').pk}/"
    demoted = client.patch(url, {"role": "visitor"}, format="json")
    assert demoted.status_code == 400
    assert demoted.json()["role"] == [ONLY_ADMIN]
    removed = client.delete(url)
    assert removed.status_code == 400
    assert removed.json()["user"] == [ONLY_ADMIN]
    assert _membership(world, "workspace_admin").role == "admin"


def test_the_members_tab_says_it_beside_the_action(world: PermissionWorld) -> None:
    admin = _membership(world, "workspace_admin")
    client = _signed_in(world, "workspace_admin")
    tab = client.get(f"/workspaces/{world.own.pk}/").content.decode()
    assert ONLY_ADMIN.replace("'", "&#x27;") in tab
    refused = client.post(
        f"/workspaces/{world.own.pk}/members/{admin.pk}/role/", {f"member-{admin.pk}-role": "visitor"}
    )
    assert refused.status_code == 400
    assert ONLY_ADMIN.replace("'", "&#x27;") in refused.content.decode()
    removal = client.get(f"/workspaces/{world.own.pk}/members/{admin.pk}/remove/").content.decode()
    assert ONLY_ADMIN.replace("'", "&#x27;") in removal
    assert "Confirm: remove" not in removal
    assert client.post(f"/workspaces/{world.own.pk}/members/{admin.pk}/remove/").status_code == 400
    assert Membership.objects.filter(pk=admin.pk).exists()


def test_the_role_change_preview_says_what_is_gained_and_lost(world: PermissionWorld) -> None:
    change = selectors.role_change(workspace=world.own, membership=_membership(world, "developer"), role="visitor")
    assert change.losses == ["submit jobs"]
    assert change.gains == []
    assert change.quotas_lost == ["Quota1.1"]
    assert change.refusal is None
    promoted = selectors.role_change(workspace=world.own, membership=_membership(world, "visitor"), role="admin")
    assert promoted.gains == [
        "submit jobs",
        "manage every job of the workspace",
        "manage members, roles and the scheduling configuration",
    ]
    assert promoted.quotas_gained == ["Quota1.1"]
    # The rule of Quota1.1 does not name "visitor" nor "auditor": a role that may submit but is
    # not named still uses no quota.
    services.update_custom_role(actor=None, role=world.own.custom_roles.get(name="auditor"), permissions=[JOB_SUBMIT])
    assert selectors.role_quotas(workspace=world.own, role="auditor") == []
    assert selectors.role_quotas(workspace=world.own, role="submitter") == ["Quota1.1"]


def test_changing_a_role_on_the_tab_previews_then_confirms(world: PermissionWorld) -> None:
    developer = _membership(world, "developer")
    client = _signed_in(world, "workspace_admin")
    url = f"/workspaces/{world.own.pk}/members/{developer.pk}/role/preview/"
    preview = client.get(url, {f"member-{developer.pk}-role": "visitor"})
    assert preview.status_code == 200
    page = preview.content.decode()
    assert "b-developer loses: submit jobs." in page
    assert "May submit to: Quota1.1 → none." in page
    assert "Their running jobs keep running" in page
    assert _membership(world, "developer").role == "developer"  # the preview changed nothing
    bad = client.get(url, {f"member-{developer.pk}-role": "wizard"})
    assert bad.status_code == 400
    assert "unknown role" in bad.content.decode().lower() or "Select a valid choice" in bad.content.decode()
    confirmed = client.post(
        f"/workspaces/{world.own.pk}/members/{developer.pk}/role/", {f"member-{developer.pk}-role": "visitor"}
    )
    assert confirmed.status_code == 302
    assert _membership(world, "developer").role == "visitor"
