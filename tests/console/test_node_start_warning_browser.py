"""The Nodes page's warning for a node whose agent missed a start (issue 27), in headless Chromium:
read by a platform admin, axe on it, screenshots at 1280 and 390 px, light and dark, in
/tmp/shots-nodes/ (node-start-missed-*.png)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from tests.console.conftest import check_accessibility
from tests.console.test_node_start_warning import agent_node_that_missed_a_start

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("NODE_SHOTS", "/tmp/shots-nodes"))
SignIn = Callable[[Page, str], None]


def test_the_nodes_page_warns_about_a_missed_start(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    name = agent_node_that_missed_a_start().name
    sign_in(page, "platform-admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Nodes").click()
    card = page.locator(f"section[data-node='{name}']")
    expect(card.get_by_test_id("node-start-missed")).to_have_text(
        "Missed a start 10 min ago: the agent did not start job 77 within 6 s (requeued). Its log on the host says why."
    )
    expect(page.get_by_test_id("node-start-missed")).to_have_count(1)
    SHOTS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(f"{live_server.url}/nodes/")
            expect(card.get_by_test_id("node-start-missed")).to_be_visible()
            check_accessibility(page)
            card.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / f"node-start-missed-{width}-{scheme}.png"))
            scroll_width = page.evaluate("document.documentElement.scrollWidth")
            assert scroll_width <= width, f"the page scrolls sideways at {width} px ({scroll_width} px wide)"
