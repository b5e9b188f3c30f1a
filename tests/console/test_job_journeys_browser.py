"""CONSOLE.md's journey 5 in Chromium, as the developer who makes it: Submit job with its live
estimate ("starts now"), the job page showing the job running, and a second job beyond the free
GPUs that "waits" with numbers, in the estimate and on its page. axe checks each page."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer
from rest_framework.test import APIClient

from scheduling.models import Job
from tests.console.conftest import check_accessibility

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SignIn = Callable[[Page, str], None]


def test_a_developer_submits_a_job_that_starts_now_and_one_that_waits(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    # PAI's world: 4 × 8 GPUs; train-b (3 × 8) holds 24, so 8 are free.
    page = browser_page
    sign_in(page, "dave")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    check_accessibility(page)
    page.get_by_role("link", name="Submit job").click()
    expect(page.get_by_role("heading", name="Submit job")).to_be_visible()

    page.get_by_label("Workspace").select_option(label="workspace-b")
    page.get_by_label("Quota", exact=True).select_option(label="Quota1.1")
    page.get_by_label("Job name").fill("train-small")
    page.get_by_label("Kind").select_option("training")
    page.get_by_label("GPUs per replica").fill("2")
    estimate = page.get_by_test_id("estimate")
    expect(estimate).to_contain_text(re.compile(r"Starts now on gpu-\d, GPUs \d+, \d+\."))
    expect(page.get_by_test_id("caps")).to_contain_text("Per job")
    check_accessibility(page)

    page.get_by_role("button", name="Submit", exact=True).click()
    expect(page.get_by_role("heading", name="train-small")).to_be_visible()
    expect(page.get_by_text("Submitted train-small: 1 × 2 GPUs to Quota1.1.")).to_be_visible()
    # The cycle ran on submit (inline trigger); the 2-second poll shows it if the page came first.
    expect(page.get_by_test_id("job-state")).to_have_text("Running", timeout=3_000)
    expect(page.get_by_test_id("placement")).to_contain_text("gpu-")
    check_accessibility(page)

    # A second job beyond the 6 GPUs left: the estimate says it waits, in numbers, and that the
    # 6 free GPUs are reserved for it (docs/scheduling.md "Reservations").
    page.get_by_role("link", name="Submit again").click()
    page.get_by_label("Job name").fill("train-big")
    page.get_by_label("GPUs per replica").fill("8")
    expect(estimate).to_contain_text("Waits: reserved: gpu-")
    expect(estimate).to_contain_text("6 of the 8 GPUs it needs are free now and kept for it")
    page.get_by_role("button", name="Submit", exact=True).click()
    expect(page.get_by_role("heading", name="train-big")).to_be_visible()
    expect(page.get_by_test_id("job-state")).to_have_text("Pending")
    expect(page.get_by_test_id("reason")).to_contain_text("6 of the 8 GPUs it needs are free now and kept for it")
    expect(page.get_by_test_id("position")).to_contain_text("#1 in Quota1.1's queue")

    # The list shows both, with state, reason code and queue position.
    page.get_by_role("link", name="← Jobs").click()
    expect(page.locator("[data-job=train-small]").get_by_test_id("job-row-state")).to_have_text("Running")
    expect(page.locator("[data-job=train-big]").get_by_test_id("reason")).to_contain_text("#1 in Quota1.1")
    check_accessibility(page)

    # And the API agrees.
    api = APIClient()
    api.force_authenticate(user=pai_world["developer"])
    states = {job["name"]: job["state"] for job in api.get("/api/v1/jobs/").json()["results"]}
    assert states["train-small"] == "running" and states["train-big"] == "pending"
    assert Job.objects.get(name="train-big").owner == pai_world["developer"]


def test_the_submit_page_reads_at_phone_width(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, "dave")
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("GPUs per replica").fill("2")
    expect(page.get_by_test_id("estimate")).to_contain_text("Starts now")
    # Nothing wider than the screen: no sideways scrolling of the whole page.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    check_accessibility(page)
