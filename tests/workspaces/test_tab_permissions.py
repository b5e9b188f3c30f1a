"""The permission matrix of the workspace tabs and their form actions (issue 11, Workspaces).

Every page and form action, in the own workspace (workspace-b) and a foreign one (workspace-c),
for every persona: a workspace the user may not see is a 404; a forbidden action on one they see
is a 403 whose page says why in a sentence; anonymous users are sent to sign in (302).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from tests.workspaces.permissions import PERSONAS, PermissionWorld

SIGN_IN = 302


@dataclass(frozen=True)
class Page:
    name: str
    method: str
    url: str
    body: Callable[[PermissionWorld], dict[str, Any]] | None = None


def _rules(world: PermissionWorld) -> dict[str, Any]:
    return {
        "form-TOTAL_FORMS": "1",
        "form-INITIAL_FORMS": "0",
        "form-0-quota": "Quota1.1",
        "form-0-roles": ["developer"],
        "save": "1",
    }


OWN_PAGES = [
    Page("members-tab", "GET", "/workspaces/{own}/"),
    Page("quotas-tab", "GET", "/workspaces/{own}/quotas/"),
    Page("scheduling-tab", "GET", "/workspaces/{own}/scheduling/"),
    Page("usage-tab", "GET", "/workspaces/{own}/usage/"),
    Page("remove-preview", "GET", "/workspaces/{own}/members/{own_member}/remove/"),
    Page("unbind-preview", "GET", "/workspaces/{own}/quotas/{quota_own}/unbind/"),
    Page(
        "add-member", "POST", "/workspaces/{own}/members/add/", lambda w: {"username": "stranger", "role": "developer"}
    ),
    Page(
        "change-role",
        "POST",
        "/workspaces/{own}/members/{own_member}/role/",
        lambda w: {f"member-{w.ids()['own_member']}-role": "operator"},
    ),
    Page(
        "role-preview",
        "GET",
        "/workspaces/{own}/members/{own_member}/role/preview/",
        lambda w: {f"member-{w.ids()['own_member']}-role": "operator"},
    ),
    Page("remove-member", "POST", "/workspaces/{own}/members/{own_member}/remove/"),
    Page("new-role", "POST", "/workspaces/{own}/roles/new/", lambda w: {"name": "reviewer", "based_on": "developer"}),
    Page("delete-role", "POST", "/workspaces/{own}/roles/{own_spare_role}/delete/"),
    Page("save-rules", "POST", "/workspaces/{own}/scheduling/", _rules),
    Page("bind", "POST", "/workspaces/{own}/quotas/", lambda w: {"quota": w.quotas["Quota1"].pk}),
    Page("unbind", "POST", "/workspaces/{own}/quotas/{quota_own}/unbind/"),
]

MEMBERS_READ = {
    "platform_admin": 200,
    "workspace_admin": 200,
    "developer": 200,
    "operator": 200,
    "labeling_admin": 200,
    "visitor": 200,
    "custom_role": 200,
    "authorized_non_member": 403,
    "non_member": 404,
    "anonymous": SIGN_IN,
}


def _only(allowed: dict[str, int]) -> dict[str, int]:
    """Members other than `allowed` get a 403, the authorized non-member too; outsiders a 404."""
    row = {persona: 403 for persona in PERSONAS}
    row.update(non_member=404, anonymous=SIGN_IN, **allowed)
    return row


ADMINS_WRITE = _only({"platform_admin": 302, "workspace_admin": 302})
ADMINS_READ = _only({"platform_admin": 200, "workspace_admin": 200})
PLATFORM_WRITE = _only({"platform_admin": 302})
EXPECTED: dict[str, dict[str, int]] = {
    "members-tab": {**MEMBERS_READ, "authorized_non_member": 200},  # the guest view: the quotas they may use
    "quotas-tab": MEMBERS_READ,
    "scheduling-tab": MEMBERS_READ,
    "usage-tab": MEMBERS_READ,
    "remove-preview": ADMINS_READ,
    "unbind-preview": _only({"platform_admin": 200}),
    "add-member": ADMINS_WRITE,
    "change-role": ADMINS_WRITE,
    "role-preview": ADMINS_READ,
    "remove-member": ADMINS_WRITE,
    "new-role": ADMINS_WRITE,
    "delete-role": ADMINS_WRITE,
    "save-rules": ADMINS_WRITE,
    "bind": PLATFORM_WRITE,
    "unbind": PLATFORM_WRITE,
}

FOREIGN_PAGES = [
    Page(
        page.name,
        page.method,
        page.url.replace("{own}", "{foreign}")
        .replace("{own_member}", "{foreign_member}")
        .replace("{own_spare_role}", "{foreign_role}")
        .replace("{quota_own}", "{quota_foreign}"),
        page.body,
    )
    for page in OWN_PAGES
]


def _foreign_body(page: Page, world: PermissionWorld) -> dict[str, Any]:
    body = page.body(world) if page.body else {}
    if page.name in ("change-role", "role-preview"):
        body = {f"member-{world.ids()['foreign_member']}-role": "operator"}
    if page.name == "save-rules":
        body["form-0-quota"] = "Quota1.2"
    return body


def _client(world: PermissionWorld, persona: str) -> Client:
    client = Client()
    user = world.user(persona)
    if user is not None:
        client.force_login(user)
    return client


def _cases(pages: list[Page], foreign: bool) -> list[Any]:
    cases = []
    for page in pages:
        for persona in PERSONAS:
            status = EXPECTED[page.name][persona]
            if foreign and persona not in ("platform_admin", "anonymous"):
                status = 404  # nobody of workspace-b may even learn that workspace-c's rows exist
            cases.append(
                pytest.param(page, persona, status, id=f"{'foreign' if foreign else 'own'}-{page.name}-{persona}")
            )
    return cases


def _call(client: Client, page: Page, world: PermissionWorld, body: dict[str, Any] | None) -> Any:
    url = page.url.format(**world.ids())
    return client.get(url, body or {}) if page.method == "GET" else client.post(url, body or {})


@pytest.mark.parametrize(("page", "persona", "expected"), _cases(OWN_PAGES, foreign=False))
def test_own_workspace(world: PermissionWorld, page: Page, persona: str, expected: int) -> None:
    answer = _call(_client(world, persona), page, world, page.body(world) if page.body else None)
    assert answer.status_code == expected, answer.content.decode()[-600:]
    if expected == 403:
        reason = answer.content.decode()
        assert 'data-testid="denial-reason"' in reason
        assert ("Only platform admins may" in reason) or ("may not" in reason) or ("Only members of" in reason)
    if expected == SIGN_IN and persona == "anonymous":
        assert "/login/" in answer["Location"]


@pytest.mark.parametrize(("page", "persona", "expected"), _cases(FOREIGN_PAGES, foreign=True))
def test_foreign_workspace(world: PermissionWorld, page: Page, persona: str, expected: int) -> None:
    answer = _call(_client(world, persona), page, world, _foreign_body(page, world))
    assert answer.status_code == expected, answer.content.decode()[-600:]
