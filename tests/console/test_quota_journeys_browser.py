"""CONSOLE.md's journeys 1–2 and the Overview switch, played in Chromium by the platform admin,
and the pages under the strict Content-Security-Policy that the console is served with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser, User
from playwright.sync_api import Page, Route, expect
from pytest_django.live_server_helper import LiveServer
from rest_framework.test import APIClient

from quotas import services as quota_services
from quotas.models import AuditRecord
from scheduling import services as job_services
from scheduling.models import Job
from tests.console.conftest import check_accessibility, quota_id
from workspaces import services as workspace_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SignIn = Callable[[Page, str], None]
STRICT_POLICY = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:"


def row(page: Page, name: str):  # type: ignore[no-untyped-def]
    return page.locator(f"tr[data-quota='{name}']")


def preview_and_confirm(page: Page, confirm: str) -> None:
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_text("Preview: what would change")).to_be_visible()
    dialog.get_by_role("button", name=confirm).click()


def from_actions(page: Page, quota: str, action: str) -> None:
    row(page, quota).get_by_text("Actions").click()
    row(page, quota).get_by_role("link", name=action, exact=True).click()
    expect(page.get_by_role("dialog")).to_be_visible()


def test_the_admin_builds_and_scales_pai_tree_from_the_page(
    live_server: LiveServer, make_user: Callable[..., User], browser_page: Page, sign_in: SignIn
) -> None:
    admin = make_user("platform-admin", platform_admin=True)
    for index in range(1, 17):
        quota_services.create_node(actor=None, name=f"dgx-{index}", gpus=8)
    page = browser_page
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")

    # Journey 1: Quota1 = 128 with Child-level Preemption, then its children from its Actions.
    # With no quota yet the page offers New quota twice (the toolbar and the empty state's first
    # step); the admin takes the toolbar's, which comes first.
    page.get_by_role("link", name="New quota").first.click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name").fill("Quota1")
    dialog.get_by_label("Guaranteed GPUs").fill("128")
    dialog.get_by_label("Child-level Preemption").check()
    preview_and_confirm(page, "Confirm: create")
    expect(page.get_by_text("Created Quota1 with 128 GPUs.")).to_be_visible()
    for name, gpus in (("Quota1.1", "48"), ("Quota1.2", "80")):
        from_actions(page, "Quota1", "New child quota")
        page.get_by_role("dialog").get_by_label("Name").fill(name)
        page.get_by_role("dialog").get_by_label("Guaranteed GPUs").fill(gpus)
        preview_and_confirm(page, "Confirm: create")
        expect(page.get_by_text(f"Created {name} with {gpus} GPUs.")).to_be_visible()

    # Journey 2: 80 → 72 first (room in Quota1), then 48 → 56, each previewed.
    for name, before, after in (("Quota1.2", "80", "72"), ("Quota1.1", "48", "56")):
        from_actions(page, name, "Scale")
        page.get_by_role("dialog").get_by_label("New guaranteed GPUs").fill(after)
        page.get_by_role("dialog").get_by_role("button", name="Preview").click()
        expect(page.get_by_test_id("preview-move").first).to_contain_text(f"{before} → {after} GPUs")
        page.get_by_role("dialog").get_by_role("button", name="Confirm: scale").click()
        expect(page.get_by_text(f"Scaled {name} to {after} GPUs.")).to_be_visible()
        expect(row(page, name).locator("td").first).to_have_text(after)
    expect(row(page, "Quota1").get_by_text("Child-level")).to_be_visible()

    api = APIClient()
    api.force_authenticate(admin)
    tree = {entry["name"]: entry["gpus"] for entry in api.get("/api/v1/quotas/").json()["results"]}
    assert tree == {"Quota1": 128, "Quota1.1": 56, "Quota1.2": 72}

    # The Overview's switch: off previews first, then on again; the audit names the actor.
    page.goto(f"{live_server.url}/quotas/{quota_id('Quota1')}/")
    page.get_by_role("link", name="Turn off Child-level Preemption").click()
    preview_and_confirm(page, "Confirm: turn off")
    expect(page.get_by_test_id("child-preemption")).to_have_text("off")
    page.get_by_role("link", name="Turn on Child-level Preemption").click()
    preview_and_confirm(page, "Confirm: turn on")
    expect(page.get_by_test_id("child-preemption")).to_have_text("on")
    check_accessibility(page)
    page.get_by_role("link", name="Audit").click()
    expect(page.get_by_test_id("audit-row").first).to_contain_text("platform-admin")
    assert AuditRecord.objects.filter(actor=admin, action="quota.scale").count() == 2


def test_the_pages_work_under_the_strict_content_security_policy(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    """The policy django-csp will send (no 'unsafe-inline'): no violation while folding, opening a
    dialog and previewing; the bars are drawn through the CSSOM."""
    page = browser_page

    def with_policy(route: Route) -> None:
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "content-security-policy": STRICT_POLICY})

    page.route("**/*", with_policy)
    page.add_init_script(
        "window.cspViolations = [];"
        "document.addEventListener('securitypolicyviolation', e => window.cspViolations.push("
        "e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sourceFile + ':' + e.lineNumber));"
    )
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")
    page.get_by_role("button", name="Fold Quota1").click()
    page.get_by_role("button", name="Unfold Quota1").click()
    row(page, "Quota1.1").get_by_text("Actions").click()
    row(page, "Quota1.1").get_by_role("link", name="Scale", exact=True).click()
    page.get_by_role("dialog").get_by_label("New guaranteed GPUs").fill("8")
    page.get_by_role("dialog").get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("preview-reclaimable")).to_be_visible()
    width = page.locator("tr[data-quota='Quota1.1'] .bar-over").evaluate("e => e.style.width")
    assert width == "50%", width  # 24 allocated against 12 guaranteed: half the bar is over quota
    page.goto(f"{live_server.url}/quotas/{quota_id('Quota1.1')}/")
    page.get_by_role("link", name="Audit").click()
    expect(page.get_by_test_id("audit-row").first).to_be_visible()
    assert page.evaluate("window.cspViolations") == []


def test_child_level_preemption_turned_on_from_the_overview_evicts_training_for_inference(
    live_server: LiveServer, make_user: Callable[..., AbstractUser], browser_page: Page, sign_in: SignIn, settings: Any
) -> None:
    """Journey 3: the switch turned on from Quota1's Overview; workspace-a's inference on Quota1
    then preempts training in Quota1.1, and the training job's page names the rule and beneficiary."""
    settings.SCHEDULER_TRIGGER = "inline"
    settings.SCHEDULER_PUBLISH_EVENTS = False
    make_user("platform-admin", platform_admin=True)
    developer = make_user("dave")
    for index in range(1, 17):
        quota_services.create_node(actor=None, name=f"dgx-{index}", gpus=8)
    root = quota_services.create_quota(actor=None, name="Quota1", gpus=128)
    team = quota_services.create_quota(actor=None, name="Quota1.1", parent=root, gpus=56)
    quota_services.create_quota(actor=None, name="Quota1.2", parent=root, gpus=72)
    workspace = workspace_services.create_workspace(actor=None, name="workspace-a", quotas=[root, team])
    workspace_services.add_member(actor=None, workspace=workspace, user=developer, role="developer")
    job_services.submit_job(
        actor=developer, workspace=workspace, quota=team, name="train-a", kind="training", gpus=8, replicas=16
    )
    job_services.converge()
    assert Job.objects.get(name="train-a").state == "running"

    page = browser_page
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/{quota_id('Quota1')}/")
    page.get_by_role("link", name="Turn on Child-level Preemption").click()
    preview_and_confirm(page, "Confirm: turn on")
    expect(page.get_by_test_id("child-preemption")).to_have_text("on")

    api = APIClient()
    api.force_authenticate(developer)
    submitted = api.post(
        "/api/v1/jobs/",
        {
            "name": "serve-a",
            "workspace": "workspace-a",
            "quota": "Quota1",
            "kind": "inference",
            "gpus": 8,
            "replicas": 2,
        },
        format="json",
    )
    assert submitted.status_code == 201, submitted.json()
    job_services.converge()
    training = Job.objects.get(name="train-a")
    events = api.get(f"/api/v1/jobs/{training.pk}/events/").json()
    events = events.get("results", events) if isinstance(events, dict) else events
    evicted = [event for event in events if event["kind"] == "evicted"]
    assert evicted, events
    assert "serve-a" in str(evicted[0]["beneficiary"]), evicted[0]

    page.goto(f"{live_server.url}/jobs/{training.pk}/")
    events_table = page.get_by_test_id("job-events")
    expect(events_table).to_contain_text("Evicted")
    expect(events_table).to_contain_text("serve-a")
    expect(events_table).to_contain_text(evicted[0]["rule"])
    assert "child" in evicted[0]["rule"]
