"""What the pages say of Slurm (issue 25), in headless Chromium: the Nodes page's badge with a
Slurm node's own state beside the console's, and the job page's Slurm job ids. Read by a platform
admin, axe on both, screenshots at 1280 and 390 px in /tmp/shots-slurm/."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from django.utils import timezone
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas.models import NodeExecutor
from quotas.services.nodes import NewNode, create_nodes
from scheduling.models import Job
from scheduling.node_views import SLURM_STATE_LABEL
from slurm.models import SlurmJob
from tests.console.conftest import check_accessibility

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("SLURM_SHOTS", "/tmp/shots-slurm"))
SignIn = Callable[[Page, str], None]


def slurm_world() -> Job:
    """A Slurm node beside pai_world's simulated ones, and train-b's replicas as Slurm jobs 812–814."""
    create_nodes(
        actor=None,
        nodes=[NewNode("n1", 2, executor=NodeExecutor.SLURM, labels={SLURM_STATE_LABEL: "IDLE+DRAIN"})],
    )
    job = Job.objects.get(name="train-b")
    for rank, placement in enumerate(job.placements.order_by("id")):
        SlurmJob.objects.create(
            job=job,
            replica=placement.pk,
            rank=rank,
            node_name=placement.node.name,
            name=f"gqc-test-{job.pk}-{placement.pk}",
            slurm_id=812 + rank,
            state="RUNNING",
            output="/dev/null",
            submitted_at=timezone.now(),
        )
    return job


def shoot(page: Page, url: str, name: str, shown: Callable[[], None]) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        # A loaded shared machine: more than the default 10 s to load a page is not the page's fault.
        page.goto(url, timeout=60_000)
        shown()
        check_accessibility(page)
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"))
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        assert scroll_width <= width, f"the page scrolls sideways at {width} px ({scroll_width} px wide)"


def test_the_nodes_page_shows_slurms_state_and_the_job_page_its_slurm_jobs(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    job = slurm_world()
    sign_in(page, "platform-admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Nodes").click()
    slurm_node = page.locator("section[data-node='n1']")
    expect(slurm_node.get_by_test_id("slurm-state")).to_have_text("Slurm IDLE+DRAIN")
    # Only Slurm nodes carry it.
    expect(page.get_by_test_id("slurm-state")).to_have_count(1)

    def badge_shown() -> None:
        slurm_node.scroll_into_view_if_needed()
        expect(slurm_node.get_by_test_id("slurm-state")).to_be_visible()

    shoot(page, f"{live_server.url}/nodes/", "nodes-slurm-state", badge_shown)

    page.goto(f"{live_server.url}/jobs/{job.pk}/", timeout=60_000)
    expect(page.get_by_test_id("slurm-job-ids")).to_have_text("812, 813, 814")

    def ids_shown() -> None:
        expect(page.get_by_test_id("slurm-job-ids")).to_be_visible()

    shoot(page, f"{live_server.url}/jobs/{job.pk}/", "job-slurm-ids", ids_shown)
