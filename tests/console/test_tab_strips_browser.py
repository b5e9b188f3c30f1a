"""Every tab strip at 390 px (a phone): each tab is on screen, inside the strip (none hidden past
its edge, as "Audit" was when the quota's five tabs scrolled with no sign of more), reachable from
the keyboard in order, and the page does not scroll sideways; axe finds nothing serious. The
strips: the quota page's sections, the workspace's tabs, the Resource Quotas List / Overview
switch. Screenshots at 1280 and 390 px go to $TABS_SHOTS (default /tmp/uilive-shots)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from tests.console.conftest import check_accessibility, quota_id
from tests.console.test_layout_browser import assert_fits
from workspaces.models import Workspace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

SHOTS = Path(os.environ.get("TABS_SHOTS", "/tmp/uilive-shots"))
PHONE = 390

# Each tab's box against the viewport and against its strip: a tab cut off by the strip's own
# clipping is as hidden as one past the screen's edge.
TAB_BOXES = """strip => [...strip.querySelectorAll("a")].map(tab => {
  const box = tab.getBoundingClientRect(), outer = strip.getBoundingClientRect();
  return {name: tab.textContent.trim(), left: box.left, right: box.right, top: box.top, bottom: box.bottom,
          stripLeft: outer.left, stripRight: outer.right, stripTop: outer.top, stripBottom: outer.bottom,
          hiddenInStrip: strip.scrollWidth > strip.clientWidth + 1};
})"""


def assert_every_tab_shows(page: Page, strip_label: str, names: list[str]) -> None:
    strip = page.get_by_role("navigation", name=strip_label)
    boxes = strip.evaluate(TAB_BOXES)
    assert [box["name"] for box in boxes] == names
    for box in boxes:
        where = f"{box['name']} of {strip_label} at {PHONE} px: {box}"
        assert not box["hiddenInStrip"], f"the strip scrolls, tabs hide in it: {where}"
        assert box["left"] >= 0 and box["right"] <= PHONE, f"past the screen's edge: {where}"
        inside = box["left"] >= box["stripLeft"] - 1 and box["right"] <= box["stripRight"] + 1
        inside = inside and box["top"] >= box["stripTop"] - 1 and box["bottom"] <= box["stripBottom"] + 1
        assert inside, f"outside its strip: {where}"
    for name in names:
        expect(strip.get_by_role("link", name=name, exact=True)).to_be_in_viewport()
    assert_fits(page, PHONE)


def tab_through(page: Page, strip_label: str, names: list[str]) -> None:
    """From the first tab, Tab reaches every other in order, each on screen when focused."""
    strip = page.get_by_role("navigation", name=strip_label)
    strip.get_by_role("link", name=names[0], exact=True).focus()
    for name in names[1:]:
        page.keyboard.press("Tab")
        focused = strip.get_by_role("link", name=name, exact=True)
        expect(focused).to_be_focused()
        expect(focused).to_be_in_viewport()


def shoot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")  # the strip as read, not as tabbed
    for width in (1280, PHONE):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(300)
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


def test_the_quota_tabs_all_show_and_work_at_390_px(
    live_server: LiveServer,
    pai_world: dict[str, AbstractUser],
    browser_page: Page,
    sign_in: Callable[[Page, str], None],
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    names = ["Overview", "Jobs", "Nodes", "Monitoring", "Audit"]
    page.set_viewport_size({"width": PHONE, "height": 800})
    page.goto(f"{live_server.url}/quotas/{quota_id('Quota1.1')}/")
    assert_every_tab_shows(page, "Quota sections", names)
    tab_through(page, "Quota sections", names)
    check_accessibility(page)
    shoot(page, "quota-tabs")

    # The last tab, the one that was cut off, opens from a tap, and the strip says it is current.
    page.set_viewport_size({"width": PHONE, "height": 800})
    strip = page.get_by_role("navigation", name="Quota sections")
    strip.get_by_role("link", name="Audit", exact=True).click()
    expect(page.get_by_role("heading", name="Audit")).to_be_visible()
    expect(strip.get_by_role("link", name="Audit", exact=True)).to_have_attribute("aria-current", "page")
    expect(strip.get_by_role("link", name="Overview", exact=True)).not_to_have_attribute("aria-current", "page")
    assert_every_tab_shows(page, "Quota sections", names)
    check_accessibility(page)
    shoot(page, "quota-audit-tab")


def test_the_workspace_tabs_and_the_quota_list_switch_all_show_at_390_px(
    live_server: LiveServer,
    pai_world: dict[str, AbstractUser],
    browser_page: Page,
    sign_in: Callable[[Page, str], None],
) -> None:
    page = browser_page
    sign_in(page, "wanda")
    workspace = Workspace.objects.get(name="workspace-b")
    names = ["Members", "Quotas", "Scheduling Configurations", "Usage"]
    for path, current, shot in (
        (f"/workspaces/{workspace.pk}/", "Members", "workspace-members"),
        (f"/workspaces/{workspace.pk}/usage/", "Usage", "workspace-usage"),
    ):
        page.set_viewport_size({"width": PHONE, "height": 800})
        page.goto(f"{live_server.url}{path}")
        assert_every_tab_shows(page, "Workspace", names)
        expect(page.get_by_role("navigation", name="Workspace").get_by_role("link", name=current)).to_have_attribute(
            "aria-current", "page"
        )
        tab_through(page, "Workspace", names)
        check_accessibility(page)
        shoot(page, shot)

    page.set_viewport_size({"width": PHONE, "height": 800})
    page.goto(f"{live_server.url}/quotas/")
    assert_every_tab_shows(page, "Resource Quotas views", ["List", "Overview"])
    check_accessibility(page)


# Each member row's height, and its role control's right edge against its cell's.
MEMBER_ROWS = """table => [...table.querySelectorAll("tbody tr")].map(row => {
  const control = row.querySelector("form.inline"), cell = control.closest("td");
  return {member: row.dataset.member, height: row.getBoundingClientRect().height,
          controlRight: control.getBoundingClientRect().right, cellRight: cell.getBoundingClientRect().right,
          controlTop: control.querySelector("select").getBoundingClientRect().top,
          buttonTop: control.querySelector("button").getBoundingClientRect().top};
})"""


def test_the_members_table_keeps_its_rows_readable_at_390_px(
    live_server: LiveServer,
    pai_world: dict[str, AbstractUser],
    browser_page: Page,
    sign_in: Callable[[Page, str], None],
) -> None:
    """A role's select and its Change role button share a line inside their cell, and the last
    admin's refusal beside Remove does not stand a word a line: squeezed into 390 px, wanda's row
    stood about 200 px tall and her select ran past its cell."""
    page = browser_page
    sign_in(page, "wanda")
    workspace = Workspace.objects.get(name="workspace-b")
    page.set_viewport_size({"width": PHONE, "height": 800})
    page.goto(f"{live_server.url}/workspaces/{workspace.pk}/")
    expect(page.get_by_test_id("member-refusal")).to_be_visible()
    rows = page.get_by_role("region", name="Members table").locator("table").evaluate(MEMBER_ROWS)
    assert {row["member"] for row in rows} >= {"dave", "wanda"}
    for row in rows:
        assert row["controlRight"] <= row["cellRight"] + 1, f"the role control runs past its cell: {row}"
        assert abs(row["controlTop"] - row["buttonTop"]) < 12, f"select and button on two lines: {row}"
        assert row["height"] < 160, f"a member row too tall at {PHONE} px: {row}"
    assert_fits(page, PHONE)
    check_accessibility(page)
    shoot(page, "workspace-members-table")
