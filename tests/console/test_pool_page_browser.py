"""Pools in headless Chromium, the parts after setting one up (issue 24): a platform admin renames
a pool from the Nodes page, is refused the deletion of a pool that holds a node and quotas (the
page names them), deletes an empty one after its confirmation; a quota page names its pool; and a
click on a treemap box of the Overview under ?pool=NAME opens that pool's quota, the pool kept.
axe on each page; screenshots at 1280 and 390 px in $POOL_SHOTS (default /tmp/shots-pool-page)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas import services as quota_services
from quotas.models import ResourcePool
from tests.console.conftest import check_accessibility, quota_id
from tests.console.test_live_quotas_browser import band_names, click_treemap_box
from tests.console.test_quota_overview_in_view import deeper_pai, two_pools  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("POOL_SHOTS", "/tmp/shots-pool-page"))
SignIn = Callable[[Page, str], None]


def shoot(page: Page, name: str) -> None:
    """The page at both widths, axe-checked at each, with nothing wider than the window."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        check_accessibility(page)
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
    page.set_viewport_size({"width": 1280, "height": 900})


def test_a_platform_admin_renames_a_pool_is_refused_a_busy_ones_deletion_and_deletes_an_empty_one(
    live_server: LiveServer,
    two_pools: dict[str, AbstractUser],  # noqa: F811 (a fixture)
    browser_page: Page,
    sign_in: SignIn,
) -> None:
    quota_services.create_pool(actor=None, name="spare", description="Kept for the H200 nodes.")
    page = browser_page
    page.set_default_navigation_timeout(60_000)  # the machine is shared; a slow load is no failure here
    sign_in(page, "platform-admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Nodes").click()
    expect(page.locator("[data-testid=pool-head][data-pool=spare]")).to_have_text("Pool spare")
    shoot(page, "nodes")

    # Rename spare, from its group on the Nodes page; a clash first, named beside the name.
    page.get_by_role("link", name="Rename or delete the pool spare").click()
    expect(page.get_by_role("heading", name="Pool spare", exact=True)).to_be_visible()
    expect(page.get_by_test_id("pool-holdings")).to_contain_text("0 nodes, 0 GPUs;")
    shoot(page, "pool")
    page.get_by_label("Name", exact=True).fill("a100")
    page.get_by_role("button", name="Save pool").click()
    expect(page.get_by_test_id("error-name")).to_have_text("A pool named 'a100' already exists; pool names are unique.")
    shoot(page, "pool-rename-refused")
    page.get_by_label("Name", exact=True).fill("h200")
    page.get_by_role("button", name="Save pool").click()
    expect(page.get_by_text("Saved the pool h200 (was spare).")).to_be_visible()
    expect(page.locator("[data-testid=pool-head][data-pool=h200]")).to_have_text("Pool h200")
    assert not ResourcePool.objects.filter(name="spare").exists()

    # a100 holds a node and quotas: its deletion is refused, and the page names them.
    page.get_by_role("link", name="Rename or delete the pool a100").click()
    expect(page.get_by_test_id("pool-delete-blockers")).to_contain_text("holds 1 node(s) (a-1)")
    page.get_by_role("link", name="Delete pool a100").click()
    refused = page.get_by_test_id("pool-delete-refused")
    expect(refused).to_contain_text("The pool a100 holds 1 node(s) (a-1); move or delete them first.")
    expect(refused).to_contain_text("The pool a100 holds 3 quota(s) (batch, batch.x, infer); delete them first.")
    expect(page.get_by_role("button", name=re.compile("Confirm"))).to_have_count(0)
    shoot(page, "pool-delete-refused")
    assert ResourcePool.objects.filter(name="a100").exists()

    # h200 is empty: deleted after its confirmation.
    page.goto(f"{live_server.url}/nodes/")
    page.get_by_role("link", name="Rename or delete the pool h200").click()
    page.get_by_role("link", name="Delete pool h200").click()
    expect(page.get_by_role("heading", name="Delete pool h200")).to_be_visible()
    shoot(page, "pool-delete-confirm")
    page.get_by_role("button", name="Confirm: delete pool h200").click()
    expect(page.get_by_text("Deleted the pool h200.")).to_be_visible()
    expect(page.locator("[data-testid=pool-head][data-pool=h200]")).to_have_count(0)
    assert not ResourcePool.objects.filter(name="h200").exists()

    # A quota page names its pool, and the link opens that pool's tree alone.
    page.goto(f"{live_server.url}/quotas/{quota_id('batch.x')}/")
    expect(page.get_by_test_id("quota-pool")).to_contain_text("Pool a100")
    shoot(page, "quota-pool")
    page.get_by_test_id("quota-pool").get_by_role("link", name="a100").click()
    expect(page).to_have_url(re.compile(r"/quotas/\?pool=a100$"))
    tree = page.get_by_test_id("quota-tree")
    expect(tree.locator("[data-quota=batch]")).to_be_visible()
    expect(tree.locator("[data-quota=Quota1]")).to_have_count(0)


def test_a_treemap_click_under_a_pool_opens_that_pools_quota_and_keeps_the_pool(
    live_server: LiveServer,
    two_pools: dict[str, AbstractUser],  # noqa: F811 (a fixture)
    browser_page: Page,
    sign_in: SignIn,
) -> None:
    page = browser_page
    page.set_default_navigation_timeout(60_000)  # the machine is shared; a slow load is no failure here
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/?view=overview&pool=a100")
    treemap = page.get_by_test_id("quota-treemap")
    expect(treemap).to_have_attribute("data-ready", "true")
    expect(page.get_by_test_id("quota-allocation")).to_have_attribute("data-ready", "true")
    assert band_names(page)[:2] == ["batch", "infer"]  # a100's roots alone

    click_treemap_box(page, "batch")

    expect(page.get_by_role("navigation", name="Quota in view")).to_contain_text("batch")
    expect(page.get_by_test_id("quota-allocation")).to_have_attribute("data-ready", "true")
    assert band_names(page)[:2] == ["batch.x", "batch (own jobs)"]
    expect(page).to_have_url(re.compile(rf"[?&]quota={quota_id('batch')}\b"))
    expect(page).to_have_url(re.compile(r"[?&]pool=a100\b"))
    expect(page.get_by_label("Stack the quotas under")).to_have_value(str(quota_id("batch")))
    shoot(page, "overview-a100-batch")
    # Back up by the trail: a100's roots again, not every pool's.
    page.get_by_role("navigation", name="Quota in view").get_by_role("link").first.click()
    expect(page).not_to_have_url(re.compile(r"[?&]quota="))
    expect(page.get_by_test_id("quota-allocation")).to_have_attribute("data-ready", "true")
    assert band_names(page)[:2] == ["batch", "infer"]
    expect(page).to_have_url(re.compile(r"[?&]pool=a100\b"))
