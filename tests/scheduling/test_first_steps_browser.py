"""Issue 28 in Chromium, a new user's first steps. A platform admin of a console with no quota
opens Resource Quotas and is told to start with New quota, which opens its dialog; a member with
no quota reads why there is none. dave, a developer of workspace-b, submits from his Dashboard.
axe on each page, screenshots at 1280 and 390 px in /tmp/shots-first-steps/."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from tests.console.conftest import check_accessibility
from tests.scheduling.test_pages import build_pai, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("FIRST_STEPS_SHOTS", "/tmp/shots-first-steps"))


def _shoot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        assert scroll_width <= width, f"the page scrolls sideways at {width} px ({scroll_width} px wide)"
        check_accessibility(page)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_a_platform_admin_with_no_quota_is_told_to_start_with_new_quota(
    live_server: LiveServer, make_user: Callable[..., AbstractUser], browser_page: Page
) -> None:
    make_user("root", platform_admin=True)
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(page, live_server.url, "root")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Resource Quotas").click()
    empty = page.get_by_test_id("no-quota")
    expect(empty).to_contain_text("No quota yet. Start with New quota: a quota guarantees a team GPUs")
    expect(empty).to_contain_text("Then bind it to a workspace")
    expect(page.get_by_text("No quota is visible to you")).to_have_count(0)
    _shoot(page, "admin-empty")

    empty.get_by_role("link", name="New quota").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("Name")).to_be_visible()
    _shoot(page, "admin-new-quota")


def test_a_member_with_no_quota_reads_why_there_is_none(
    live_server: LiveServer, make_user: Callable[..., AbstractUser], browser_page: Page
) -> None:
    make_user("mia")
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(page, live_server.url, "mia")
    page.goto(f"{live_server.url}/quotas/")
    expect(page.get_by_test_id("no-quota")).to_have_text(
        "No quota is visible to you: quotas appear here once a workspace you belong to is bound to one."
    )
    expect(page.get_by_role("link", name="New quota")).to_have_count(0)
    _shoot(page, "member-empty")


def test_a_member_submits_from_the_dashboard(
    live_server: LiveServer, make_user: Callable[..., AbstractUser], browser_page: Page, settings: Any
) -> None:
    settings.SCHEDULER_TRIGGER = "inline"
    settings.SCHEDULER_PUBLISH_EVENTS = False
    build_pai(make_user)
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(page, live_server.url, "dave")
    expect(page.get_by_role("heading", name="Welcome, dave")).to_be_visible()
    _shoot(page, "dashboard")
    page.get_by_role("link", name="Submit job").click()
    expect(page.get_by_role("heading", name="Submit job")).to_be_visible()
    expect(page.get_by_label("Workspace").locator("option:checked")).to_have_text("workspace-b")
