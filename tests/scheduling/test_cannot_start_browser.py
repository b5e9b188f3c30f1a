"""Issue 28 in Chromium: a job that can never start as asked says so. On PAI's cluster (4 nodes ×
8 GPUs) dave opens Submit job from the Jobs page and asks 12 GPUs per replica: the estimate reads
"Cannot start: needs 12 GPUs on one node; the largest node has 8 …" with a warning, and the Submit
button is still there. Submitted, the job's page says why it cannot start, and the Jobs page's
State filter "Cannot start" lists it with huge-b (5 × 8 GPUs on a 32-GPU pool). axe on each page,
screenshots at 1280 and 390 px in /tmp/shots-cannot-start/."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from scheduling.models import Job
from tests.console.conftest import check_accessibility
from tests.scheduling.test_pages import build_pai, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("CANNOT_START_SHOTS", "/tmp/shots-cannot-start"))


def _shoot(page: Page, name: str, *, reload: bool = False) -> None:
    """At each width (a page whose chart lays out on load is loaded again at that width), axe-checked."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        if reload:
            page.reload()
        for box in page.locator(".scroll-box").all():
            box.evaluate("box => { box.scrollLeft = box.scrollWidth; }")  # the reason column, at the right end
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        assert scroll_width <= width, f"the page scrolls sideways at {width} px ({scroll_width} px wide)"
        check_accessibility(page)
    page.set_viewport_size({"width": 1280, "height": 900})


@pytest.fixture
def pai(make_user: Callable[..., AbstractUser], settings: Any) -> dict[str, AbstractUser]:
    settings.SCHEDULER_TRIGGER = "inline"
    settings.SCHEDULER_PUBLISH_EVENTS = False
    return build_pai(make_user)


def test_a_job_larger_than_every_node_cannot_start_and_is_listed_as_such(
    live_server: LiveServer, pai: dict[str, AbstractUser], browser_page: Page
) -> None:
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(page, live_server.url, "dave")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="Submit job").click()
    expect(page.get_by_role("heading", name="Submit job")).to_be_visible()
    page.get_by_label("Job name").fill("wide")
    page.get_by_label("GPUs per replica").fill("12")
    estimate = page.get_by_test_id("estimate")
    expect(estimate).to_have_text(
        "Cannot start: needs 12 GPUs on one node; the largest node has 8 (#2 in the queue, exceeds_cluster)."
    )
    expect(page.get_by_test_id("cannot-start-warning")).to_contain_text("Submit still queues it")
    submit = page.get_by_role("button", name="Submit", exact=True)
    expect(submit).to_be_visible()
    _shoot(page, "estimate")

    submit.click()
    expect(page.get_by_role("heading", name="wide")).to_be_visible()
    expect(page.get_by_text("Why it cannot start")).to_be_visible()
    expect(page.get_by_test_id("reason")).to_contain_text("Cannot start: needs 12 GPUs on one node")
    assert Job.objects.get(name="wide").shown_code == "exceeds_cluster"
    _shoot(page, "job", reload=True)

    page.get_by_role("link", name="← Jobs").click()
    page.get_by_label("State").select_option(label="Cannot start")
    expect(page).to_have_url(f"{live_server.url}/jobs/?state=cannot_start")
    rows = page.get_by_test_id("job-row")
    expect(rows).to_have_count(2)
    expect(page.locator('[data-job="wide"]').get_by_test_id("reason")).to_contain_text(
        "Cannot start: needs 12 GPUs on one node; the largest node has 8"
    )
    expect(page.locator('[data-job="huge-b"]').get_by_test_id("reason")).to_contain_text(
        "Cannot start: asks 40 GPUs, the pool has 32"
    )
    _shoot(page, "jobs")
