"""The quota charts in headless Chromium: the Overview's treemap and stacked area, the Monitoring
tab swapped in by htmx, under the Content-Security-Policy, with axe; screenshots at 1280 and 390 px.

Screenshots go to $CHART_SHOTS (default /tmp/shots-charts); regenerate them with
`python -m console.launcher test tests/console/test_quota_charts_browser.py`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import ConsoleMessage, Page, expect
from pytest_django.live_server_helper import LiveServer

from tests.console.conftest import check_accessibility, quota_id

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("CHART_SHOTS", "/tmp/shots-charts"))
SignIn = Callable[[Page, str], None]
WIDTHS = (1280, 390)


def watch_for_violations(page: Page) -> list[str]:
    """CSP refusals and uncaught script errors, as the browser reports them."""
    problems: list[str] = []

    def collect(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text:
            problems.append(f"{page.url}: {message.text}")

    page.on("console", collect)
    page.on("pageerror", lambda error: problems.append(f"{page.url}: {error}"))
    return problems


def tab(page: Page, name: str):  # type: ignore[no-untyped-def]
    return page.get_by_role("navigation", name="Quota sections").get_by_role("link", name=name, exact=True)


def shoot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(300)  # plotly redraws on resize (responsive)
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})
    # Dark: the charts take the page's text colour when drawn, so draw them again in it.
    page.emulate_media(color_scheme="dark")
    page.reload()
    expect(page.locator("[data-chart]").first).to_have_attribute("data-ready", "true")
    page.screenshot(path=str(SHOTS / f"{name}-1280-dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    page.reload()


def test_the_overview_draws_the_treemap_and_the_stacked_area(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    problems = watch_for_violations(page)
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")
    page.get_by_role("link", name="Overview", exact=True).click()
    expect(page).to_have_url(f"{live_server.url}/quotas/?view=overview")
    treemap = page.get_by_test_id("quota-treemap")
    area = page.get_by_test_id("quota-allocation")
    expect(treemap.locator("svg.main-svg").first).to_be_visible()
    expect(area.locator("svg.main-svg").first).to_be_visible()
    expect(treemap).to_have_attribute("data-ready", "true")
    # The treemap names the quotas; the area has one band per quota of the level it stacks, and
    # one guarantee line per band.
    expect(treemap.locator("g.slice").filter(has_text="Quota1.1").first).to_be_visible()
    assert area.locator("g.trace.scatter").count() == 6
    expect(page.get_by_test_id("over-quota")).to_contain_text("Quota1.1 (24 of 12 GPUs)")
    # plotly's rules came from our stylesheet, not from a <style> element it injected.
    assert page.locator("style").count() == 0
    check_accessibility(page)
    shoot(page, "quotas-overview")
    page.get_by_role("link", name="List", exact=True).click()
    expect(page.locator("tr[data-quota='Quota1.1']")).to_be_visible()
    assert problems == []


def test_the_monitoring_tab_draws_its_chart_when_swapped_in(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    problems = watch_for_violations(page)
    sign_in(page, "dave")
    page.goto(f"{live_server.url}/quotas/{quota_id('Quota1.1')}/")
    tab(page, "Monitoring").click()  # htmx swaps the tab's body in
    expect(page).to_have_url(f"{live_server.url}/quotas/{quota_id('Quota1.1')}/?tab=monitoring")
    chart = page.get_by_test_id("quota-monitoring")
    expect(chart.locator("svg.main-svg").first).to_be_visible()
    assert chart.locator("g.trace.scatter").count() == 3
    expect(chart.locator("g.legend")).to_contain_text("Fair share")
    check_accessibility(page)
    shoot(page, "quota-monitoring")
    # Away and back again: the chart is drawn afresh from the new partial.
    tab(page, "Jobs").click()
    expect(page.get_by_test_id("quota-monitoring")).to_have_count(0)
    tab(page, "Monitoring").click()
    expect(page.get_by_test_id("quota-monitoring").locator("svg.main-svg").first).to_be_visible()
    # Loaded directly (not by htmx), the tab draws too.
    page.goto(f"{live_server.url}/quotas/{quota_id('Quota1.1')}/?tab=monitoring")
    expect(page.get_by_test_id("quota-monitoring").locator("svg.main-svg").first).to_be_visible()
    assert problems == []
