"""CONSOLE.md's journey 4, played in Chromium by the workspace admin, and every workspace tab
under axe, with screenshots at 1280 and 390 px in /tmp/shots-ws/ (looked at by the developer).

Journey 4: wanda opens workspace-b → Scheduling Configurations and gives Quota1.1 the usable
roles developer and operator, then +Add a row that authorizes olga (a non-member), and Saves.
The visitor and the labeling admin may then no longer use Quota1.1 and olga may: checked on
Submit job (/jobs/new/) as each of them sees it, and through the API's dry-run submit.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser, User
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer
from rest_framework.test import APIClient

from tests.console.conftest import check_accessibility
from workspaces import services as workspace_services
from workspaces.models import Workspace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SignIn = Callable[[Page, str], None]
SHOTS = Path("/tmp/shots-ws")


def _dry_run(user: AbstractUser) -> Any:
    client = APIClient()
    client.force_authenticate(user=user)
    body = {
        "name": "probe",
        "workspace": "workspace-b",
        "quota": "Quota1.1",
        "kind": "training",
        "gpus": 1,
        "dry_run": True,
    }
    return client.post("/api/v1/jobs/", body, format="json")


def _shoot(page: Page, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_journey_4_the_workspace_admin_changes_who_may_use_a_quota(
    live_server: LiveServer,
    pai_world: dict[str, AbstractUser],
    make_user: Callable[..., User],
    browser_page: Page,
    sign_in: SignIn,
) -> None:
    workspace = Workspace.objects.get(name="workspace-b")
    visitor, labeler, operator = make_user("vera"), make_user("lara"), make_user("otto")
    for user, role in ((visitor, "visitor"), (labeler, "labeling_admin"), (operator, "operator")):
        workspace_services.add_member(actor=None, workspace=workspace, user=user, role=role)
    olga = pai_world["outsider"]
    # Before: no rule, so every role that may submit uses Quota1.1; olga may not.
    assert _dry_run(labeler).status_code == 200
    assert _dry_run(olga).status_code == 400  # not a workspace she may submit to at all

    page = browser_page
    sign_in(page, "wanda")
    page.get_by_role("navigation").get_by_role("link", name="Workspaces").click()
    page.get_by_role("link", name="workspace-b").click()
    tabs = page.get_by_role("navigation", name="Workspace")
    tabs.get_by_role("link", name="Scheduling Configurations").click()
    content = page.locator("main")
    expect(content.get_by_role("heading", name="Resource Usage")).to_be_visible()
    check_accessibility(page)
    _shoot(page, "scheduling-admin")

    content.get_by_label("Rule 1, usable roles").select_option(["developer", "operator"])
    content.get_by_role("button", name="+Add").click()
    expect(content.get_by_label("Rule 2, quota")).to_be_visible()
    content.get_by_label("Rule 2, quota").select_option("Quota1.1")
    content.get_by_label("Rule 2, authorized users").fill("olga")
    content.get_by_role("button", name="Save", exact=True).click()
    expect(page.get_by_text("Saved 2 scheduling rules of workspace-b.")).to_be_visible()
    expect(content.get_by_label("Rule 2, authorized users")).to_have_value("olga")

    # The API agrees with the page.
    assert workspace_services.scheduling_config(workspace) == [
        {
            "quota": "Quota1.1",
            "roles": ["developer", "operator"],
            "non_members": False,
            "authorized_users": [],
            "caps": [],
        },
        {"quota": "Quota1.1", "roles": [], "non_members": False, "authorized_users": ["olga"], "caps": []},
    ]
    # The visitor (reads only) and the labeling admin (no longer listed) lose Quota1.1; olga gains it.
    refused = _dry_run(visitor)
    assert refused.status_code == 403
    assert "role 'visitor' may not use Quota1.1 in workspace-b" in refused.json()["detail"]
    refused = _dry_run(labeler)
    assert refused.status_code == 403
    assert "role 'labeling_admin' may not use Quota1.1 in workspace-b" in refused.json()["detail"]
    assert _dry_run(operator).status_code == 200
    assert _dry_run(pai_world["developer"]).status_code == 200
    allowed = _dry_run(olga)
    assert allowed.status_code == 200, allowed.content

    # On Submit job: the labeling admin is told why Quota1.1 is missing; olga is offered it.
    page.context.clear_cookies()
    sign_in(page, "lara")
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("Workspace").select_option(label="workspace-b")
    expect(page.get_by_test_id("quota-missing")).to_contain_text(
        "Quota1.1 is not offered: Role 'labeling_admin' may not use Quota1.1 in workspace-b"
    )
    expect(page.get_by_role("button", name="Submit", exact=True)).to_have_count(0)
    page.context.clear_cookies()
    sign_in(page, "olga")
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("Workspace").select_option(label="workspace-b")
    expect(page.get_by_label("Quota", exact=True).locator("option", has_text="Quota1.1")).to_have_count(1)
    check_accessibility(page)
    page.context.clear_cookies()
    sign_in(page, "wanda")
    page.goto(f"{live_server.url}/workspaces/{workspace.pk}/scheduling/")

    # Every tab passes axe, as the admin sees it; screenshots of each.
    for name, label in (("members", "Members"), ("quotas", "Quotas"), ("usage", "Usage")):
        tabs.get_by_role("link", name=label, exact=True).click()
        expect(tabs.get_by_role("link", name=label, exact=True)).to_have_attribute("aria-current", "page")
        check_accessibility(page)
        _shoot(page, f"{name}-admin")
    tabs.get_by_role("link", name="Members", exact=True).click()
    content.locator('tr[data-member="dave"]').get_by_role("link", name="Remove dave").click()
    expect(content.get_by_test_id("preview-running")).to_contain_text("1 running job (train-b) keeps running")
    check_accessibility(page)
    _shoot(page, "member-remove-preview")

    # Changing a role previews what the member gains and loses; wanda, the only admin, is told
    # beside her row why she cannot be removed or demoted.
    page.goto(f"{live_server.url}/workspaces/{workspace.pk}/")
    expect(content.locator('tr[data-member="wanda"]').get_by_test_id("member-refusal")).to_have_text(
        "wanda is workspace-b's only admin; make another member admin first."
    )
    row = content.locator('tr[data-member="otto"]')
    row.get_by_label("Role of otto").select_option("visitor")
    row.get_by_role("button", name="Change role of otto").click()
    expect(content.get_by_test_id("preview-losses")).to_have_text(
        "otto loses: submit jobs; manage every job of the workspace."
    )
    expect(content.get_by_test_id("preview-quotas")).to_have_text("May submit to: Quota1.1 → none. Lost: Quota1.1.")
    expect(content.get_by_text("Their running jobs keep running")).to_be_visible()
    check_accessibility(page)
    _shoot(page, "member-role-preview")
    assert workspace.memberships.get(user=operator).role == "operator"  # the preview changed nothing
    content.get_by_role("button", name="Confirm: change role").click()
    expect(page.get_by_text("otto is now visitor in workspace-b.")).to_be_visible()
    assert workspace.memberships.get(user=operator).role == "visitor"


def test_a_visitor_reads_the_rules_and_a_platform_admin_unbinds_after_a_preview(
    live_server: LiveServer,
    pai_world: dict[str, AbstractUser],
    make_user: Callable[..., AbstractUser],
    browser_page: Page,
    sign_in: SignIn,
) -> None:
    workspace = Workspace.objects.get(name="workspace-b")
    workspace_services.add_member(actor=None, workspace=workspace, user=make_user("vera"), role="visitor")
    page = browser_page
    sign_in(page, "vera")
    page.goto(f"{live_server.url}/workspaces/{workspace.pk}/scheduling/")
    content = page.locator("main")
    expect(content.get_by_test_id("rule-row")).to_contain_text("Quota1.1")
    expect(content.get_by_role("button", name="Save")).to_have_count(0)
    check_accessibility(page)
    _shoot(page, "scheduling-visitor")

    page.context.clear_cookies()
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/workspaces/{workspace.pk}/quotas/")
    content.get_by_label("Quota to bind").select_option(label="Quota1.2")
    content.get_by_role("button", name="Bind").click()
    expect(page.get_by_text("Bound Quota1.2 to workspace-b.")).to_be_visible()
    content.get_by_role("link", name="Unbind Quota1.1").click()
    expect(content.get_by_test_id("preview-running")).to_contain_text("1 running job (train-b) keeps running")
    check_accessibility(page)
    _shoot(page, "unbind-preview")
    content.get_by_role("button", name="Confirm: unbind").click()
    expect(page.get_by_text("Unbound Quota1.1 from workspace-b.")).to_be_visible()
    expect(content.locator('tr[data-quota="Quota1.1"]')).to_have_count(0)
    _shoot(page, "quotas-platform-admin")
