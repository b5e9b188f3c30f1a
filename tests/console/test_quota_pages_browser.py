"""The Resource Quotas page in headless Chromium, as each person uses it: fold, filter, the
actions through Preview and Confirm in a dialog, refusals in words, the keyboard, and axe."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas.models import Quota
from scheduling import services as job_services
from scheduling.models import Job
from tests.console.conftest import check_accessibility, quota_id

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("KIT_SHOTS", "/tmp/kit-shots"))
SignIn = Callable[[Page, str], None]


def row(page: Page, name: str):  # type: ignore[no-untyped-def]
    return page.locator(f"tr[data-quota='{name}']")


def open_action(page: Page, quota: str, action: str) -> None:
    row(page, quota).get_by_text("Actions").click()
    row(page, quota).get_by_role("link", name=action, exact=True).click()
    expect(page.get_by_role("dialog")).to_be_visible()


def test_fold_is_remembered_and_the_filter_narrows(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")
    check_accessibility(page)
    page.get_by_role("button", name="Fold Quota1").click()
    expect(row(page, "Quota1.1")).to_be_hidden()
    page.reload()
    expect(row(page, "Quota1.1")).to_be_hidden()
    page.get_by_role("button", name="Unfold Quota1").click()
    expect(row(page, "Quota1.1")).to_be_visible()

    page.get_by_label("Filter by name").fill("1.2")
    expect(row(page, "Quota1.2")).to_be_visible()
    expect(row(page, "Quota1.1")).to_be_hidden()
    expect(row(page, "Quota1")).to_be_visible()  # the ancestor keeps the match in its place


def test_scale_previews_the_reclaimable_job_then_confirms(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")
    open_action(page, "Quota1.1", "Scale")
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("New guaranteed GPUs").fill("8")
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_test_id("preview-reclaimable")).to_contain_text(
        "Quota1.1 holds 24 GPUs against a guarantee of 8: 4 more GPUs become reclaimable, from train-b"
    )
    expect(dialog.get_by_test_id("preview-move").first).to_contain_text("12 → 8 GPUs")
    check_accessibility(page)
    assert Quota.objects.get(name="Quota1.1").gpus == 12
    dialog.get_by_role("button", name="Confirm: scale").click()
    expect(page.get_by_text("Scaled Quota1.1 to 8 GPUs.")).to_be_visible()
    expect(row(page, "Quota1.1").locator("td").first).to_have_text("8")
    assert Quota.objects.get(name="Quota1.1").gpus == 8


def test_transfer_moves_guarantee_between_siblings(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")
    open_action(page, "Quota1.2", "Transfer")
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("To sibling").select_option(label="Quota1.1")
    dialog.get_by_label("GPUs to move").fill("8")
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_text("20 → 12 GPUs")).to_be_visible()
    dialog.get_by_role("button", name="Confirm: transfer").click()
    expect(page.get_by_text("Moved 8 GPUs from Quota1.2 to Quota1.1.")).to_be_visible()
    assert {q.name: q.gpus for q in Quota.objects.all()} == {"Quota1": 32, "Quota1.1": 20, "Quota1.2": 12}


def test_new_child_quota_beyond_the_parent_shows_the_numbers_beside_the_field(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")
    open_action(page, "Quota1", "New child quota")
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name").fill("Quota1.3")
    dialog.get_by_label("Guaranteed GPUs").fill("8")
    dialog.get_by_role("button", name="Preview").click()
    error = dialog.locator("#id_gpus_error")
    expect(error).to_have_text("Quota1.3 would need 8 GPUs but Quota1 has 32 − 32 = 0 left for its children.")
    expect(dialog.get_by_label("Guaranteed GPUs")).to_be_focused()
    check_accessibility(page)
    assert not Quota.objects.filter(name="Quota1.3").exists()


def test_delete_is_refused_with_the_reason(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")
    open_action(page, "Quota1.1", "Delete")
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_role("alert")).to_contain_text("Quota1.1 is bound to workspaces workspace-b; unbind it first.")
    expect(dialog.get_by_role("button", name="Confirm: delete")).to_have_count(0)


def test_keyboard_opens_the_dialog_focuses_inside_and_escape_returns_focus(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")
    row(page, "Quota1.2").get_by_text("Actions").focus()
    page.keyboard.press("Enter")
    scale = row(page, "Quota1.2").get_by_role("link", name="Scale", exact=True)
    scale.focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("New guaranteed GPUs")).to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(scale).to_be_focused()


@pytest.mark.parametrize("role", ["workspace-admin", "developer"])
def test_others_see_their_quotas_read_only(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn, role: str
) -> None:
    page = browser_page
    sign_in(page, pai_world[role].username)
    page.goto(f"{live_server.url}/quotas/")
    expect(page.get_by_test_id("quota-row")).to_have_count(1)
    expect(page.get_by_text("Actions")).to_have_count(0)
    expect(page.get_by_role("link", name="New quota")).to_have_count(0)
    check_accessibility(page)


def test_quota_page_tabs_and_screenshots(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    """Overview and Audit, checked by axe; screenshots at 1280 and 390 px, light and dark."""
    page = browser_page
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/{quota_id('Quota1.1')}/")
    expect(page.get_by_test_id("fair-share-sum")).to_contain_text("Guaranteed 12 + share of idle GPUs")
    check_accessibility(page)
    tabs = page.get_by_role("navigation", name="Quota sections")
    tabs.get_by_role("link", name="Jobs").click()
    expect(page.get_by_test_id("quota-job")).to_contain_text(["train-b"])
    expect(tabs.get_by_role("link", name="Jobs")).to_have_attribute("aria-current", "page")
    check_accessibility(page)
    tabs.get_by_role("link", name="Audit").click()
    expect(page.get_by_test_id("audit-row").first).to_contain_text("quota.create")
    check_accessibility(page)

    SHOTS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(f"{live_server.url}/quotas/")
            check_accessibility(page)
            page.screenshot(path=str(SHOTS / f"quotas-{width}-{scheme}.png"), full_page=True)
            scroll_width = page.evaluate("document.documentElement.scrollWidth")
            assert scroll_width <= width, f"the page scrolls sideways at {width} px ({scroll_width} px wide)"
            open_action(page, "Quota1.1", "Scale")
            page.get_by_role("dialog").get_by_label("New guaranteed GPUs").fill("8")
            page.get_by_role("dialog").get_by_role("button", name="Preview").click()
            expect(page.get_by_test_id("preview-reclaimable")).to_be_visible()
            page.screenshot(path=str(SHOTS / f"scale-preview-{width}-{scheme}.png"))
            page.goto(f"{live_server.url}/quotas/{quota_id('Quota1.1')}/")
            page.screenshot(path=str(SHOTS / f"quota-{width}-{scheme}.png"), full_page=True)


def test_quota_jobs_tab_keeps_job_names_on_one_line_and_scrolls_inside_its_box(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    """At 1280 px the long "Why it waits" sentences squeezed the Job column until short names
    broke at their hyphen ("sweep-" over "b"); at 390 px the table scrolls inside its own box,
    not the page. Screenshots in /tmp/uinits-shots/ (QUOTA_JOBS_SHOTS)."""
    shots = Path(os.environ.get("QUOTA_JOBS_SHOTS", "/tmp/uinits-shots"))
    developer = pai_world["developer"]
    running = Job.objects.get(name="train-b")
    for name in ("sweep-a", "sweep-b", "sweep-lr-0.001"):
        job_services.submit_job(
            actor=developer,
            workspace=running.workspace,
            quota=running.quota,
            name=name,
            kind="training",
            gpus=8,
            replicas=2,
        )
    job_services.converge()
    assert set(Job.objects.filter(state="pending").values_list("name", flat=True)) == {
        "sweep-a",
        "sweep-b",
        "sweep-lr-0.001",
    }
    page = browser_page
    sign_in(page, "dave")
    shots.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/quotas/{quota_id('Quota1.1')}/?tab=jobs")
        table = page.get_by_role("table", name="Live jobs of Quota1.1")
        expect(table.get_by_role("link", name="sweep-b", exact=True)).to_be_visible()
        for name in ("train-b", "sweep-a", "sweep-b", "sweep-lr-0.001"):
            link = table.get_by_role("link", name=name, exact=True)
            lines = link.evaluate("e => e.getClientRects().length")
            assert lines == 1, f"{name} wraps onto {lines} lines at {width} px"
        reason = table.get_by_role("row", name="sweep-b").get_by_role("cell").last
        expect(reason).to_contain_text("#2 in Quota1.1")
        page_width = page.evaluate("document.documentElement.scrollWidth")
        assert page_width <= width, f"the page scrolls sideways at {width} px ({page_width} px wide)"
        box = page.get_by_role("region", name="Jobs table")
        scrolls = box.evaluate("e => e.scrollWidth > e.clientWidth")
        assert scrolls == (width == 390), f"the table's box scrolls: {scrolls} at {width} px"
        check_accessibility(page)
        page.screenshot(path=str(shots / f"quota-jobs-{width}.png"), full_page=True)
    box.focus()  # a box that scrolls is reachable from the keyboard, and scrolls with it
    page.keyboard.press("ArrowRight")
    page.wait_for_function("e => e.scrollLeft > 0", arg=box.element_handle())
