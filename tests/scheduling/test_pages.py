"""The Resource Quotas and Jobs pages, in a real browser: PAI's tree with live figures, a team's
jobs with why they wait, a job's history, cancel by its owner; and what each user may not see."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas import services as quota_services
from scheduling import services as job_services
from scheduling.models import Job
from tests.conftest import PASSWORD
from workspaces import services as workspace_services


def build_pai(make_user: Callable[..., AbstractUser]) -> dict[str, AbstractUser]:
    """PAI's example: 4 nodes × 8 GPUs, Quota1 = 32 → Quota1.1 = 12, Quota1.2 = 20; Team B trains."""
    users = {
        "admin": make_user("admin", platform_admin=True),
        "dave": make_user("dave"),
        "victor": make_user("victor"),
        "erin": make_user("erin"),
    }
    for index in range(1, 5):
        quota_services.create_node(actor=None, name=f"gpu-{index}", gpus=8)
    root = quota_services.create_quota(actor=None, name="Quota1", gpus=32, child_preemption=True)
    team_b = quota_services.create_quota(actor=None, name="Quota1.1", parent=root, gpus=12)
    team_c = quota_services.create_quota(actor=None, name="Quota1.2", parent=root, gpus=20)
    workspace_b = workspace_services.create_workspace(actor=None, name="workspace-b", quotas=[team_b])
    workspace_c = workspace_services.create_workspace(actor=None, name="workspace-c", quotas=[team_c])
    workspace_services.add_member(actor=None, workspace=workspace_b, user=users["dave"], role="developer")
    workspace_services.add_member(actor=None, workspace=workspace_b, user=users["victor"], role="visitor")
    workspace_services.add_member(actor=None, workspace=workspace_c, user=users["erin"], role="developer")
    submit = job_services.submit_job
    submit(
        actor=users["dave"], workspace=workspace_b, quota=team_b, name="train-b", kind="training", gpus=8, replicas=3
    )
    submit(actor=users["erin"], workspace=workspace_c, quota=team_c, name="train-c", kind="training", gpus=8)
    submit(actor=users["dave"], workspace=workspace_b, quota=team_b, name="huge-b", kind="training", gpus=8, replicas=5)
    job_services.converge()
    return users


def sign_in(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("signed-in-user")).to_contain_text(username)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_team_member_follows_their_jobs_and_cancels_one(
    live_server: LiveServer, make_user: Callable[..., AbstractUser], browser_page: Page, settings: Any
) -> None:
    settings.SCHEDULER_TRIGGER = "inline"
    build_pai(make_user)
    page = browser_page
    sign_in(page, live_server.url, "dave")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Resource Quotas").click()
    rows = page.get_by_test_id("quota-row")
    expect(rows).to_have_count(1)  # only the quota bound to workspace-b
    expect(rows.first).to_have_attribute("data-quota", "Quota1.1")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    expect(page.get_by_test_id("job-row")).to_have_count(2)  # train-c is Team C's
    huge = page.locator("[data-job=huge-b]")
    expect(huge.get_by_test_id("reason")).to_contain_text("#1 in Quota1.1")

    page.get_by_role("link", name="train-b").click()
    expect(page.get_by_test_id("job-state")).to_have_text("Running")
    expect(page.get_by_test_id("job-events")).to_contain_text("Submitted")
    # Cancel previews first (the page kit): what the freed GPUs would admit, then Confirm. The
    # link opens a dialog once the deferred scripts run; before that it is a plain link to the
    # action's page, so wait for them (on a busy machine the click came first once).
    page.wait_for_load_state("load")
    page.get_by_role("link", name="Cancel job").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_text("Preview: what would change")).to_be_visible()
    dialog.get_by_role("button", name="Confirm: cancel job").click()
    expect(page.get_by_text("Job train-b cancelled; its GPUs are free.")).to_be_visible()
    expect(page.get_by_test_id("job-state")).to_have_text("Cancelled")
    assert Job.objects.get(name="train-b").state == "cancelled"


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_platform_admin_sees_the_whole_tree_with_fair_shares(
    live_server: LiveServer, make_user: Callable[..., AbstractUser], browser_page: Page, settings: Any
) -> None:
    settings.SCHEDULER_TRIGGER = "inline"
    build_pai(make_user)
    sign_in(browser_page, live_server.url, "admin")
    browser_page.goto(f"{live_server.url}/quotas/")
    rows = browser_page.get_by_test_id("quota-row")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-quota") for i in range(3)] == ["Quota1", "Quota1.1", "Quota1.2"]
    team_b = browser_page.locator("[data-quota='Quota1.1']")
    expect(team_b.get_by_test_id("allocated")).to_have_text("24")  # train-b's 3 × 8, borrowing beyond 12
    expect(browser_page.locator("[data-quota='Quota1']").get_by_test_id("allocated")).to_have_text("32")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("username", "job", "status"),
    [
        pytest.param("dave", "train-b", 200, id="member-own-job"),
        pytest.param("dave", "train-c", 404, id="member-foreign-job"),
        pytest.param("admin", "train-c", 200, id="platform-admin-any-job"),
    ],
)
def test_job_pages_show_only_visible_jobs(
    make_user: Callable[..., AbstractUser], client: Client, settings: Any, username: str, job: str, status: int
) -> None:
    settings.SCHEDULER_TRIGGER = "none"
    build_pai(make_user)
    # force_login: axes' backend refuses Client.login(), which authenticates without a request.
    client.force_login(get_user_model().objects.get(username=username))
    assert client.get(f"/jobs/{Job.objects.get(name=job).pk}/").status_code == status


@pytest.mark.django_db
def test_a_visitor_sees_no_cancel_button_and_is_refused_with_the_reason(
    make_user: Callable[..., AbstractUser], client: Client, settings: Any
) -> None:
    settings.SCHEDULER_TRIGGER = "none"
    build_pai(make_user)
    client.force_login(get_user_model().objects.get(username="victor"))
    job = Job.objects.get(name="train-b")
    page = client.get(f"/jobs/{job.pk}/")
    assert page.status_code == 200
    assert b"Cancel job" not in page.content
    refused = client.post(f"/jobs/{job.pk}/cancel/")
    assert refused.status_code == 403
    assert b"may not" in refused.content  # the reason, on the console's own 403 page
    assert Job.objects.get(pk=job.pk).state != "cancelled"
