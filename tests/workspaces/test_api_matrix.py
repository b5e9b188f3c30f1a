"""The full permission matrix of the workspaces and quotas endpoints: every method, every persona,
own (workspace-b, Quota1.1) versus foreign (workspace-c, Quota1.2). The expected table is here.

Statuses: 404 where the user may not see the object, 403 (with a reason) where they see it but
their role forbids the action, 401 for anonymous. Jobs rows are added with the same helpers.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from tests.workspaces.permissions import Endpoint, PermissionWorld, matrix_cases, row

READ_FOR_MEMBERS = row(
    platform_admin=200,
    workspace_admin=200,
    developer=200,
    operator=200,
    labeling_admin=200,
    visitor=200,
    custom_role=200,
    authorized_non_member=403,
    non_member=404,
)


def admins_only(success: int) -> dict[str, int]:
    """A write inside the own workspace: its admins (and platform admins) may, other members 403."""
    return row(
        platform_admin=success,
        workspace_admin=success,
        developer=403,
        operator=403,
        labeling_admin=403,
        visitor=403,
        custom_role=403,
        authorized_non_member=403,
        non_member=404,
    )


def platform_only_on_own(success: int) -> dict[str, int]:
    """A platform-level change to the own workspace: everyone who sees it but the platform gets 403."""
    return row(
        platform_admin=success,
        workspace_admin=403,
        developer=403,
        operator=403,
        labeling_admin=403,
        visitor=403,
        custom_role=403,
        authorized_non_member=403,
        non_member=404,
    )


def foreign(success: int) -> dict[str, int]:
    """Anything on workspace-c: only the platform admin even knows it exists."""
    return row(
        platform_admin=success,
        workspace_admin=404,
        developer=404,
        operator=404,
        labeling_admin=404,
        visitor=404,
        custom_role=404,
        authorized_non_member=404,
        non_member=404,
    )


EVERYONE_SIGNED_IN = row(
    platform_admin=200,
    workspace_admin=200,
    developer=200,
    operator=200,
    labeling_admin=200,
    visitor=200,
    custom_role=200,
    authorized_non_member=200,
    non_member=200,
)

WORKSPACE_ENDPOINTS = [
    Endpoint("workspaces-list", "GET", "/api/v1/workspaces/"),
    Endpoint("workspaces-create", "POST", "/api/v1/workspaces/", lambda w: {"name": "workspace-d"}),
    Endpoint("own-get", "GET", "/api/v1/workspaces/{own}/"),
    Endpoint("own-edit-description", "PATCH", "/api/v1/workspaces/{own}/", lambda w: {"description": "team B"}),
    Endpoint("own-rename", "PATCH", "/api/v1/workspaces/{own}/", lambda w: {"name": "workspace-b2"}),
    Endpoint("own-bind", "PATCH", "/api/v1/workspaces/{own}/", lambda w: {"quotas": ["Quota1.1", "Quota1.2"]}),
    Endpoint(
        "own-put",
        "PUT",
        "/api/v1/workspaces/{own}/",
        lambda w: {"name": "workspace-b", "description": "team B", "quotas": ["Quota1.1"]},
    ),
    Endpoint("own-delete", "DELETE", "/api/v1/workspaces/{own}/"),
    Endpoint("foreign-get", "GET", "/api/v1/workspaces/{foreign}/"),
    Endpoint("foreign-edit", "PATCH", "/api/v1/workspaces/{foreign}/", lambda w: {"description": "mine now"}),
    Endpoint("foreign-delete", "DELETE", "/api/v1/workspaces/{foreign}/"),
    Endpoint("own-members", "GET", "/api/v1/workspaces/{own}/members/"),
    Endpoint("own-member-get", "GET", "/api/v1/workspaces/{own}/members/{own_member}/"),
    Endpoint(
        "own-member-add", "POST", "/api/v1/workspaces/{own}/members/", lambda w: {"user": "stranger", "role": "visitor"}
    ),
    Endpoint(
        "own-member-role", "PATCH", "/api/v1/workspaces/{own}/members/{own_member}/", lambda w: {"role": "operator"}
    ),
    Endpoint("own-member-remove", "DELETE", "/api/v1/workspaces/{own}/members/{own_member}/"),
    Endpoint("foreign-members", "GET", "/api/v1/workspaces/{foreign}/members/"),
    Endpoint(
        "foreign-member-add",
        "POST",
        "/api/v1/workspaces/{foreign}/members/",
        lambda w: {"user": "stranger", "role": "admin"},
    ),
    Endpoint(
        "foreign-member-role",
        "PATCH",
        "/api/v1/workspaces/{foreign}/members/{foreign_member}/",
        lambda w: {"role": "admin"},
    ),
    Endpoint("foreign-member-remove", "DELETE", "/api/v1/workspaces/{foreign}/members/{foreign_member}/"),
    Endpoint("own-roles", "GET", "/api/v1/workspaces/{own}/roles/"),
    Endpoint(
        "own-role-create",
        "POST",
        "/api/v1/workspaces/{own}/roles/",
        lambda w: {"name": "reviewer", "permissions": ["job.submit"]},
    ),
    Endpoint(
        "own-role-change",
        "PATCH",
        "/api/v1/workspaces/{own}/roles/{own_spare_role}/",
        lambda w: {"permissions": ["job.manage_all"]},
    ),
    Endpoint("own-role-delete", "DELETE", "/api/v1/workspaces/{own}/roles/{own_spare_role}/"),
    Endpoint("foreign-roles", "GET", "/api/v1/workspaces/{foreign}/roles/"),
    Endpoint(
        "foreign-role-change",
        "PATCH",
        "/api/v1/workspaces/{foreign}/roles/{foreign_role}/",
        lambda w: {"permissions": ["workspace.manage"]},
    ),
    Endpoint("foreign-role-delete", "DELETE", "/api/v1/workspaces/{foreign}/roles/{foreign_role}/"),
    Endpoint("own-config-get", "GET", "/api/v1/workspaces/{own}/scheduling-config/"),
    Endpoint(
        "own-config-put",
        "PUT",
        "/api/v1/workspaces/{own}/scheduling-config/",
        lambda w: {"rules": [{"quota": "Quota1.1", "roles": ["developer"], "non_members": True}]},
    ),
    Endpoint("foreign-config-get", "GET", "/api/v1/workspaces/{foreign}/scheduling-config/"),
    Endpoint(
        "foreign-config-put",
        "PUT",
        "/api/v1/workspaces/{foreign}/scheduling-config/",
        lambda w: {"rules": [{"quota": "Quota1.2", "roles": [], "non_members": True}]},
    ),
]

WORKSPACE_EXPECTED = {
    "workspaces-list": EVERYONE_SIGNED_IN,
    "workspaces-create": row(
        platform_admin=201,
        workspace_admin=403,
        developer=403,
        operator=403,
        labeling_admin=403,
        visitor=403,
        custom_role=403,
        authorized_non_member=403,
        non_member=403,
    ),
    "own-get": {**READ_FOR_MEMBERS, "authorized_non_member": 200},
    "own-edit-description": admins_only(200),
    "own-rename": platform_only_on_own(200),
    "own-bind": platform_only_on_own(200),
    "own-put": admins_only(200),
    "own-delete": platform_only_on_own(204),
    "foreign-get": foreign(200),
    "foreign-edit": foreign(200),
    "foreign-delete": foreign(204),
    "own-members": READ_FOR_MEMBERS,
    "own-member-get": READ_FOR_MEMBERS,
    "own-member-add": admins_only(201),
    "own-member-role": admins_only(200),
    "own-member-remove": admins_only(204),
    "foreign-members": foreign(200),
    "foreign-member-add": foreign(201),
    "foreign-member-role": foreign(200),
    "foreign-member-remove": foreign(204),
    "own-roles": READ_FOR_MEMBERS,
    "own-role-create": admins_only(201),
    "own-role-change": admins_only(200),
    "own-role-delete": admins_only(204),
    "foreign-roles": foreign(200),
    "foreign-role-change": foreign(200),
    "foreign-role-delete": foreign(204),
    "own-config-get": READ_FOR_MEMBERS,
    "own-config-put": admins_only(200),
    "foreign-config-get": foreign(200),
    "foreign-config-put": foreign(200),
}


@pytest.mark.parametrize(("endpoint", "persona", "expected"), matrix_cases(WORKSPACE_ENDPOINTS, WORKSPACE_EXPECTED))
def test_workspace_endpoints(
    world: PermissionWorld,
    persona_client: Callable[[str], APIClient],
    endpoint: Endpoint,
    persona: str,
    expected: int,
) -> None:
    response = endpoint.call(persona_client(persona), world)
    assert response.status_code == expected, response.content
    if expected == 403:
        # A forbidden action always says why, never DRF's generic sentence.
        assert "You do not have permission" not in response.json()["detail"]


VISIBLE_IN_LIST = {
    "platform_admin": ["workspace-b", "workspace-c"],
    "workspace_admin": ["workspace-b"],
    "developer": ["workspace-b"],
    "operator": ["workspace-b"],
    "labeling_admin": ["workspace-b"],
    "visitor": ["workspace-b"],
    "custom_role": ["workspace-b"],
    "authorized_non_member": ["workspace-b"],
    "non_member": [],
}


@pytest.mark.parametrize("persona", list(VISIBLE_IN_LIST))
def test_the_workspace_list_never_holds_a_foreign_row(
    world: PermissionWorld, persona_client: Callable[[str], APIClient], persona: str
) -> None:
    body = persona_client(persona).get("/api/v1/workspaces/").json()
    assert [workspace["name"] for workspace in body["results"]] == VISIBLE_IN_LIST[persona]
    assert body["count"] == len(VISIBLE_IN_LIST[persona])


# --- quotas: non-admins see the quotas bound to their workspaces ---------------------------------

QUOTA_ENDPOINTS = [
    Endpoint("quotas-list", "GET", "/api/v1/quotas/"),
    Endpoint("quota-own-get", "GET", "/api/v1/quotas/{quota_own}/"),
    Endpoint("quota-foreign-get", "GET", "/api/v1/quotas/{quota_foreign}/"),
    Endpoint("quota-own-patch", "PATCH", "/api/v1/quotas/{quota_own}/", lambda w: {"rank": 1}),
    Endpoint("quota-foreign-patch", "PATCH", "/api/v1/quotas/{quota_foreign}/", lambda w: {"rank": 1}),
]

QUOTA_EXPECTED = {
    "quotas-list": EVERYONE_SIGNED_IN,
    "quota-own-get": {**READ_FOR_MEMBERS, "authorized_non_member": 200},
    "quota-own-patch": platform_only_on_own(200),
    "quota-foreign-get": foreign(200),
    "quota-foreign-patch": foreign(200),
}


@pytest.mark.parametrize(("endpoint", "persona", "expected"), matrix_cases(QUOTA_ENDPOINTS, QUOTA_EXPECTED))
def test_quota_endpoints(
    world: PermissionWorld,
    persona_client: Callable[[str], APIClient],
    endpoint: Endpoint,
    persona: str,
    expected: int,
) -> None:
    response = endpoint.call(persona_client(persona), world)
    assert response.status_code == expected, response.content
