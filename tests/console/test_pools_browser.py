"""Pools in headless Chromium (issue 24), as a platform admin sets one up and a developer uses
it: Add pool, Add node into it, New quota rooted in it, the Resource Quotas pool switch showing
that pool's tree alone; then a developer's job on that quota runs on that pool's node. axe on
each page; screenshots at 1280 and 390 px (light and dark) in /tmp/shots-pools/."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas.models import Node, Quota
from scheduling.models import Job
from tests.console.conftest import check_accessibility
from workspaces.models import Workspace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("POOL_SHOTS", "/tmp/shots-pools"))
SignIn = Callable[[Page, str], None]


def test_a_platform_admin_sets_up_a_pool_and_a_developers_job_runs_there(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")

    # Add pool, from the Nodes page.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Nodes").click()
    page.get_by_role("link", name="Add pool").click()
    expect(page.get_by_role("heading", name="Add pool")).to_be_visible()
    check_accessibility(page)
    page.get_by_label("Name").fill("a100")
    page.get_by_label("Placement").select_option("spread")
    page.get_by_label("Description").fill("NVIDIA A100 nodes.")
    page.get_by_role("button", name="Add pool").click()
    expect(page.get_by_text("Added the pool a100.")).to_be_visible()

    # Add node, into the new pool.
    page.get_by_role("link", name="Add node").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name").fill("a-1")
    dialog.get_by_label("Pool").select_option("a100")
    dialog.get_by_label("GPUs", exact=True).fill("8")
    dialog.get_by_label("GPU model").fill("A100")
    dialog.get_by_role("button", name="Preview").click()
    dialog.get_by_role("button", name="Confirm: add").click()
    expect(page.get_by_text("Added a-1 with 8 GPUs.")).to_be_visible()
    page.goto(f"{live_server.url}/nodes/")
    expect(page.locator("[data-testid=pool-head][data-pool=a100]")).to_have_text("Pool a100")
    expect(page.get_by_text("1 node, 8 GPUs of A100; places by spread")).to_be_visible()
    check_accessibility(page)
    assert Node.objects.get(name="a-1").pool.name == "a100"

    # New quota, rooted in the new pool.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Resource Quotas").click()
    page.get_by_role("link", name="New quota").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name").fill("batch")
    dialog.get_by_label("Pool").select_option("a100")
    dialog.get_by_label("Guaranteed GPUs").fill("8")
    dialog.get_by_role("button", name="Preview").click()
    dialog.get_by_role("button", name="Confirm: create").click()
    expect(page.get_by_text("Created batch with 8 GPUs.")).to_be_visible()
    assert Quota.objects.get(name="batch").pool.name == "a100"

    # The pool switch shows the a100 tree alone.
    page.goto(f"{live_server.url}/quotas/")
    switch = page.get_by_role("navigation", name="Pools")
    switch.get_by_role("link", name="Pool a100").click()
    expect(switch.get_by_role("link", name="Pool a100")).to_have_attribute("aria-current", "page")
    tree = page.get_by_test_id("quota-tree")
    expect(tree.locator("[data-quota=batch]")).to_be_visible()
    expect(tree.locator("[data-quota=Quota1]")).to_have_count(0)
    assert "pool=a100" in page.url
    SHOTS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 900})
            for name, path in (("quotas", "/quotas/?pool=a100"), ("nodes", "/nodes/")):
                page.goto(f"{live_server.url}{path}")
                check_accessibility(page)
                page.screenshot(path=str(SHOTS / f"{name}-{width}-{scheme}.png"), full_page=True)
                assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 900})

    # A developer's job on batch runs on the a100 node.
    Workspace.objects.get(name="workspace-b").quotas.add(Quota.objects.get(name="batch"))
    page.context.clear_cookies()
    sign_in(page, "dave")
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("Workspace").select_option(label="workspace-b")
    page.get_by_label("Quota", exact=True).select_option(label="batch")
    expect(page.get_by_text("Runs on its quota's pool: Quota1.1 in default, batch in a100.")).to_be_visible()
    page.get_by_label("Job name").fill("eval-a100")
    page.get_by_label("GPUs per replica").fill("4")
    check_accessibility(page)
    page.get_by_role("button", name="Submit", exact=True).click()
    expect(page.get_by_role("heading", name="eval-a100")).to_be_visible()
    # A cycle, then the live push: seconds on a loaded CI machine.
    expect(page.get_by_test_id("job-state")).to_have_text("Running", timeout=15_000)
    expect(page.get_by_test_id("placement")).to_contain_text("a-1")
    assert set(Job.objects.get(name="eval-a100").placements.values_list("node__name", flat=True)) == {"a-1"}
