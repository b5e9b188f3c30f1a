"""Pages: the list shows only visible workspaces; the Scheduling Configurations tab edits rules."""

from __future__ import annotations

import pytest
from django.test import Client

from quotas import hooks
from tests.workspaces.permissions import PermissionWorld
from workspaces import services


def _client(world: PermissionWorld, persona: str) -> Client:
    client = Client()
    user = world.user(persona)
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("persona", "shown"),
    [
        pytest.param("platform_admin", ["workspace-b", "workspace-c"], id="platform_admin"),
        pytest.param("developer", ["workspace-b"], id="developer"),
        pytest.param("authorized_non_member", ["workspace-b"], id="authorized_non_member"),
        pytest.param("non_member", [], id="non_member"),
    ],
)
def test_the_workspace_list_page_shows_visible_workspaces_only(
    world: PermissionWorld, persona: str, shown: list[str]
) -> None:
    page = _client(world, persona).get("/workspaces/")
    assert page.status_code == 200
    listed = [name for name in ("workspace-b", "workspace-c") if f">{name}</a>" in page.content.decode()]
    assert listed == shown


def test_anonymous_visitors_are_sent_to_sign_in(world: PermissionWorld) -> None:
    page = _client(world, "anonymous").get("/workspaces/")
    assert page.status_code == 302
    assert "/login/" in page["Location"]


@pytest.mark.parametrize(
    ("persona", "path", "expected"),
    [
        pytest.param("developer", "/workspaces/{own}/", 200, id="member-detail"),
        pytest.param("developer", "/workspaces/{foreign}/", 404, id="foreign-detail"),
        pytest.param("authorized_non_member", "/workspaces/{own}/", 200, id="authorized-detail"),
        pytest.param("authorized_non_member", "/workspaces/{own}/scheduling/", 403, id="authorized-scheduling"),
        pytest.param("visitor", "/workspaces/{own}/scheduling/", 200, id="visitor-reads-scheduling"),
        pytest.param("non_member", "/workspaces/{own}/scheduling/", 404, id="outsider-scheduling"),
        pytest.param("platform_admin", "/workspaces/{foreign}/scheduling/", 200, id="platform-scheduling"),
    ],
)
def test_page_access(world: PermissionWorld, persona: str, path: str, expected: int) -> None:
    assert _client(world, persona).get(path.format(**world.ids())).status_code == expected


def test_the_detail_page_lists_members_for_members_only(world: PermissionWorld) -> None:
    member_view = _client(world, "visitor").get(f"/workspaces/{world.own.pk}/").content.decode()
    guest_view = _client(world, "authorized_non_member").get(f"/workspaces/{world.own.pk}/").content.decode()
    assert "b-developer" in member_view
    assert "b-developer" not in guest_view


def _rule_post(quota: str, roles: list[str], caps: str, authorized: str = "") -> dict[str, object]:
    return {
        "form-TOTAL_FORMS": "1",
        "form-INITIAL_FORMS": "0",
        "form-0-quota": quota,
        "form-0-roles": roles,
        "form-0-authorized_users": authorized,
        "form-0-caps": caps,
    }


def test_a_workspace_admin_saves_rules_with_caps_on_the_tab(world: PermissionWorld) -> None:
    answer = _client(world, "workspace_admin").post(
        f"/workspaces/{world.own.pk}/scheduling/",
        _rule_post("Quota1.1", ["admin", "developer"], "1-7 job=100\n7-9 job=10 user=20", "guest"),
    )
    assert answer.status_code == 302
    assert services.scheduling_config(world.own) == [
        {
            "quota": "Quota1.1",
            "roles": ["admin", "developer"],
            "non_members": False,
            "authorized_users": ["guest"],
            "caps": [
                {"priority_min": 1, "priority_max": 7, "max_gpus_per_job": 100.0, "max_gpus_per_user": None},
                {"priority_min": 7, "priority_max": 9, "max_gpus_per_job": 10.0, "max_gpus_per_user": 20.0},
            ],
        }
    ]


def test_the_tab_shows_what_is_wrong_and_changes_nothing(world: PermissionWorld) -> None:
    before = services.scheduling_config(world.own)
    answer = _client(world, "workspace_admin").post(
        f"/workspaces/{world.own.pk}/scheduling/", _rule_post("Quota1.1", ["developer"], "9-3 job=4", "nobody")
    )
    assert answer.status_code == 400
    body = answer.content.decode()
    assert "priority_min 9 is above priority_max 3" in body
    assert "unknown users: nobody" in body
    assert services.scheduling_config(world.own) == before


def test_a_refusal_names_the_rule_and_field_in_words_beside_the_field(world: PermissionWorld) -> None:
    post = _rule_post("Quota1.1", ["developer"], "9-3 job=4", "nobody")
    # An empty first row is dropped before saving: the refused rule is still called by its row, 2.
    post.update(
        {
            "form-TOTAL_FORMS": "2",
            "form-1-quota": "Quota1.1",
            "form-1-roles": ["developer"],
            "form-1-authorized_users": "nobody",
            "form-1-caps": "9-3 job=4",
            "form-0-quota": "",
        }
    )
    body = _client(world, "workspace_admin").post(f"/workspaces/{world.own.pk}/scheduling/", post).content.decode()
    assert "Rule 2, authorized users: unknown users: nobody" in body
    assert "Rule 2, cap 1, lowest priority: priority_min 9 is above priority_max 3" in body
    assert "rules[" not in body
    # Also beside the field, in the row's own error list.
    errors_then_input = body.index("unknown users: nobody</li></ul><input")
    assert body.index('id="id_form-1-authorized_users"') > errors_then_input


def test_every_rule_control_has_a_label_tied_to_it(world: PermissionWorld) -> None:
    body = _client(world, "workspace_admin").get(f"/workspaces/{world.own.pk}/scheduling/").content.decode()
    for field, words in (
        ("quota", "quota"),
        ("roles", "usable roles"),
        ("authorized_users", "authorized users"),
        ("caps", "caps"),
    ):
        assert f'<label class="visually-hidden" for="id_form-0-{field}">Rule 1, {words}</label>' in body
    # PAI's multi-select: basic roles, custom roles and Non-Workspace Members in one control.
    assert '<option value="__non_members__">Non-Workspace Members</option>' in body
    assert '<optgroup label="Custom roles">' in body


def test_a_developer_may_read_the_tab_but_not_save_it(world: PermissionWorld) -> None:
    client = _client(world, "developer")
    assert 'value="1">Save</button>' not in client.get(f"/workspaces/{world.own.pk}/scheduling/").content.decode()
    answer = client.post(f"/workspaces/{world.own.pk}/scheduling/", _rule_post("Quota1.1", ["developer"], ""))
    assert answer.status_code == 403


def test_a_bound_quota_cannot_be_deleted(world: PermissionWorld) -> None:
    assert hooks.quota_delete_blockers(world.quotas["Quota1.1"]) == [
        "Quota1.1 is bound to workspaces workspace-b; unbind it first."
    ]
    assert hooks.quota_delete_blockers(world.quotas["Quota1"]) == []
