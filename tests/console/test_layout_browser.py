"""Every page at 390 px and 1280 px, light and dark: no sideways scroll (tables scroll in their
own box), the dark top bar spans the width, and axe (colour contrast included) finds nothing
serious, as each role sees the pages."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import pytest
from django.conf import settings
from django.contrib.auth.models import AbstractUser, User
from django.test import Client
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from scheduling.models import Job
from tests.console.conftest import check_accessibility, quota_id
from workspaces.models import Workspace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("FIXES_SHOTS", "/tmp/shots-fixes"))
COLOR_SCHEMES: tuple[Literal["light", "dark"], ...] = ("light", "dark")  # emulate_media's names


def force_sign_in(page: Page, live_server: LiveServer, user: AbstractUser) -> None:
    """A session cookie from force_login: the sign-in form is tested elsewhere, and axes counts
    form sign-ins."""
    client = Client()
    assert isinstance(user, User)  # auth.User is the user model: what force_login is typed for
    client.force_login(user)
    page.context.clear_cookies()
    cookie = client.cookies[settings.SESSION_COOKIE_NAME]
    page.context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": cookie.value, "url": live_server.url}])


def console_pages() -> list[str]:
    workspace = Workspace.objects.get(name="workspace-b")
    job = Job.objects.get(name="train-b")
    return [
        "/",
        "/quotas/",
        f"/quotas/{quota_id('Quota1.1')}/",
        "/jobs/",
        f"/jobs/{job.pk}/",
        "/workspaces/",
        f"/workspaces/{workspace.pk}/",
        f"/workspaces/{workspace.pk}/scheduling/",
    ]


WIDE_ELEMENTS = """width => [...document.querySelectorAll("body *")]
  .filter(e => e.getBoundingClientRect().right > width + 1)
  .filter(e => !e.parentElement || e.parentElement.getBoundingClientRect().right <= width + 1)
  .slice(0, 5)
  .map(e => `${e.tagName.toLowerCase()}.${e.className} ${Math.round(e.getBoundingClientRect().right)}`)"""


def assert_fits(page: Page, width: int) -> None:
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    if scroll_width > width:
        # Name the outermost elements that stick out, so the failure says what to fix.
        culprits = page.evaluate(WIDE_ELEMENTS, width)
        pytest.fail(f"{page.url} scrolls sideways at {width} px ({scroll_width} px wide): {culprits}")
    bar = page.locator("header.topbar").bounding_box()
    assert bar is not None and bar["width"] >= width - 1, f"the top bar of {page.url} ends at {bar}"


@pytest.mark.parametrize("role", ["platform-admin", "developer"])
def test_every_page_fits_390_px_and_passes_axe_in_light_and_dark(
    role: str, live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page
) -> None:
    page = browser_page
    force_sign_in(page, live_server, pai_world[role])
    pages = console_pages()
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (390, 1280):
            page.set_viewport_size({"width": width, "height": 900})
            for path in pages:
                page.goto(f"{live_server.url}{path}")
                expect(page.get_by_test_id("signed-in-user")).to_be_visible()
                assert_fits(page, width)
                check_accessibility(page)
            if width == 390:
                # Every navigation item stays reachable on the narrow bar.
                for link in page.get_by_role("navigation", name="Main").get_by_role("link").all():
                    expect(link).to_be_visible()
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in (("dashboard", "/"), ("quotas", "/quotas/")):
            for scheme in COLOR_SCHEMES:
                page.emulate_media(color_scheme=scheme)
                page.goto(f"{live_server.url}{path}")
                page.screenshot(path=str(SHOTS / f"{name}-{role}-{width}-{scheme}.png"), full_page=True)


def test_sign_in_page_fits_390_px_and_passes_axe(live_server: LiveServer, browser_page: Page) -> None:
    page = browser_page
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.set_viewport_size({"width": 390, "height": 900})
        page.goto(f"{live_server.url}/login/")
        assert_fits(page, 390)
        check_accessibility(page)


CONTRAST = """selector => [...document.querySelectorAll(selector)].slice(0, 3).map(element => {
  const rgb = text => (text.match(/[\\d.]+/g) || []).map(Number);
  const luminance = ([r, g, b]) => {
    const linear = c => (c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    return 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);
  };
  let box = element, background = null;
  while (box && !background) {  // the first ancestor that paints a background
    const colour = rgb(getComputedStyle(box).backgroundColor);
    if (colour.length === 3 || colour[3] > 0) background = colour;
    box = box.parentElement;
  }
  const [light, dark] = [luminance(rgb(getComputedStyle(element).color)), luminance(background || [255, 255, 255])]
    .sort((a, b) => b - a);
  return Math.round((light + 0.05) / (dark + 0.05) * 100) / 100;
})"""


def test_badges_messages_and_links_reach_4_5_to_1_in_light_and_dark(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page
) -> None:
    from scheduling import services as job_services
    from workspaces.models import Workspace

    workspace = Workspace.objects.get(name="workspace-b")
    # Non-preemptible and beyond Quota1.1's guarantee of 12: it waits, so a Pending badge shows.
    job_services.submit_job(
        actor=pai_world["developer"], workspace=workspace, quota=workspace.quotas.get(name="Quota1.1"),
        name="serve-b", kind="inference", gpus=8, replicas=2,
    )  # fmt: skip
    page = browser_page
    force_sign_in(page, live_server, pai_world["platform-admin"])
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.goto(f"{live_server.url}/jobs/")
        jobs = page.get_by_test_id("job-table")
        expect(jobs.locator(".badge.pending")).to_have_text("Pending")
        expect(jobs.locator(".badge.running")).to_have_text("Running")
        for selector in (".badge.pending", ".badge.running", ".content a"):
            ratios = page.evaluate(CONTRAST, selector)
            assert ratios and min(ratios) >= 4.5, f"{selector} in {scheme}: {ratios}"
        check_accessibility(page)
        page.goto(f"{live_server.url}/workspaces/{workspace.pk}/scheduling/")
        page.get_by_role("button", name="Save", exact=True).click()
        expect(page.locator(".message.success")).to_contain_text("Saved")
        ratios = page.evaluate(CONTRAST, ".message.success")
        assert min(ratios) >= 4.5, f"the success message in {scheme}: {ratios}"
        check_accessibility(page)
