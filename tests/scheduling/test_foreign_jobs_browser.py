"""Issue 28 in Chromium: a workspace admin never reads another team's job names. On one 8-GPU node,
workspace-c's urgent-c (submitted to the parent Quota1, with child-level preemption) evicted
workspace-b's train-b. Wanda, workspace-b's admin, reads train-b's history, whose beneficiary is
"8 GPUs of Quota1 (workspace-c)", and asks Submit job for a priority-9 job on Quota1, whose
estimate would reclaim "8 GPUs from Quota1 (a job of workspace-c, preempt rule)"; the API's dry
run of the same job says the same, with the name and id left out. axe on each page, screenshots
at 1280 and 390 px in /tmp/shots-foreign-jobs/."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer
from rest_framework.test import APIClient

from quotas import services as quota_services
from scheduling import services as job_services
from scheduling.models import Job, JobState
from tests.conftest import PASSWORD
from tests.console.conftest import check_accessibility
from workspaces import services as workspace_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("FOREIGN_JOBS_SHOTS", "/tmp/shots-foreign-jobs"))
FOREIGN = "urgent-c"


def _sign_in(page: Page, live_server: LiveServer, username: str) -> None:
    """Through the sign-in form, as a person does (tests/console's `sign_in`, which lives in that
    package's conftest)."""
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("signed-in-user")).to_contain_text(username)


def _shoot(page: Page, name: str, *, reload: bool = False) -> None:
    """At each width (a page whose chart lays out on load is loaded again at that width) the
    page as a person sees it, axe-checked; a wide table shows its right end, the beneficiary."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        if reload:
            page.reload()
        for box in page.locator(".scroll-box").all():
            box.evaluate("box => { box.scrollLeft = box.scrollWidth; }")
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        assert scroll_width <= width, f"the page scrolls sideways at {width} px ({scroll_width} px wide)"
        check_accessibility(page)
    page.set_viewport_size({"width": 1280, "height": 900})


@pytest.fixture
def two_teams(make_user: Callable[..., AbstractUser], settings: Any) -> dict[str, AbstractUser]:
    settings.SCHEDULER_TRIGGER = "inline"
    settings.SCHEDULER_PUBLISH_EVENTS = False
    users = {"workspace-admin": make_user("wanda"), "foreign-developer": make_user("carl")}
    quota_services.create_node(actor=None, name="gpu-1", gpus=8)
    root = quota_services.create_quota(actor=None, name="Quota1", gpus=8, child_preemption=True)
    team_b = quota_services.create_quota(actor=None, name="Quota1.1", parent=root, gpus=4)
    team_c = quota_services.create_quota(actor=None, name="Quota1.2", parent=root, gpus=4)
    own = workspace_services.create_workspace(actor=None, name="workspace-b", quotas=[team_b, root])
    foreign = workspace_services.create_workspace(actor=None, name="workspace-c", quotas=[team_c, root])
    workspace_services.add_member(actor=None, workspace=own, user=users["workspace-admin"], role="admin")
    workspace_services.add_member(actor=None, workspace=foreign, user=users["foreign-developer"], role="developer")
    job_services.submit_job(
        actor=users["workspace-admin"], workspace=own, quota=team_b, name="train-b", kind="training", gpus=8
    )
    job_services.converge()
    job_services.submit_job(
        actor=users["foreign-developer"], workspace=foreign, quota=root, name=FOREIGN, kind="training", gpus=8
    )
    job_services.converge()
    assert Job.objects.get(name=FOREIGN).state == JobState.RUNNING
    assert Job.objects.get(name="train-b").state == JobState.PENDING
    return users


def test_a_workspace_admin_reads_a_foreign_job_as_its_quota_and_workspace(
    live_server: LiveServer, two_teams: dict[str, AbstractUser], browser_page: Page
) -> None:
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    _sign_in(page, live_server, "wanda")
    foreign = Job.objects.get(name=FOREIGN)

    # train-b's history: evicted for a job of workspace-c, which wanda may not open.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="train-b").click()
    expect(page.get_by_role("heading", name="train-b")).to_be_visible()
    history = page.get_by_test_id("job-events")
    beneficiary = history.get_by_test_id("foreign-beneficiary").first
    expect(beneficiary).to_have_text("8 GPUs of Quota1 (workspace-c)")
    expect(history).to_contain_text("child-level preemption: Quota1's own job (8 GPUs of Quota1 (workspace-c))")
    assert FOREIGN not in page.content()
    _shoot(page, "history", reload=True)

    # Submit job: priority 9 on Quota1 would preempt urgent-c, named by quota and workspace only.
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("Workspace").select_option(label="workspace-b")
    page.get_by_label("Quota", exact=True).select_option(label="Quota1")
    page.get_by_label("Job name").fill("train-urgent")
    page.get_by_label("GPUs per replica").fill("8")
    page.get_by_label("Priority").fill("9")
    estimate = page.get_by_test_id("estimate")
    expect(estimate).to_have_text(
        "Starts now on gpu-1, GPUs 0–7; would reclaim 8 GPUs from Quota1 (a job of workspace-c, preempt rule)."
    )
    assert FOREIGN not in page.content()
    _shoot(page, "estimate")

    # The API's dry run of the same job: the victim counted, its name and id left out.
    api = APIClient()
    api.force_authenticate(user=two_teams["workspace-admin"])
    body = {"name": "train-urgent", "workspace": "workspace-b", "quota": "Quota1", "kind": "training"}
    answer = api.post("/api/v1/jobs/", {**body, "gpus": 8, "priority": 9, "dry_run": True}, format="json")
    assert answer.status_code == 200, answer.content
    (victim,) = answer.json()["evict"]
    assert (victim["job"], victim["id"], victim["visible"], victim["rule"]) == (None, None, False, "preempt")
    assert victim["description"] == "8 GPUs of Quota1 (workspace-c)"
    assert FOREIGN not in answer.content.decode() and f"by {foreign.pk} " not in answer.content.decode()
