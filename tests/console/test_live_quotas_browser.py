"""Issue 28, "Live where the page contract says live", in headless Chromium on the real ASGI
application (uvicorn in a thread, /ws/live/ over the Redis channel layer, as test_live_browser.py):

- the Resource Quotas List's cells (allocated and its bar, running, pending, the "over quota"
  words) follow the quota topics: a row changes after a job starts and after a reclaim, with no
  reload; so do the Dashboard (a platform admin's and a member's), the quota page's Overview tab
  and the Jobs list;
- the Overview's stacked area stacks the children of the quota in view: a click on a treemap box
  goes one level down, the quota picker (a select and a button, used from the keyboard) and the
  trail go back up.

Screenshots at 1280 and 390 px go to $LIVE_SHOTS (default /tmp/shots-live-quotas)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Locator, Page, expect

from quotas import services as quota_services
from quotas.models import Node, Quota
from scheduling.models import Job
from tests.console.conftest import check_accessibility, quota_id
from tests.console.test_journey6_browser import submit_through_the_api, two_teams  # noqa: F401 (a fixture)
from tests.console.test_live_browser import asgi_server, cancel_through_the_api, served, sign_in_as  # noqa: F401 (fixtures)
from tests.console.test_quota_overview_in_view import deeper_pai  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(150)]

SHOTS = Path(os.environ.get("LIVE_SHOTS", "/tmp/shots-live-quotas"))
TRACE_NAMES = "(element) => element.data.map((trace) => trace.name)"


def quota_row(page: Page, name: str) -> Locator:
    return page.get_by_test_id("quota-row").filter(has=page.get_by_role("link", name=name, exact=True))


def shoot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(400)  # plotly redraws on resize (responsive)
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def watch_for_reloads(page: Page) -> list[str]:
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda message: problems.append(message.text) if "Content Security" in message.text else None)
    return problems


def not_reloaded(page: Page) -> None:
    page.evaluate("() => { window.__notReloaded = true; }")


def still_the_same_page(page: Page) -> bool:
    return bool(page.evaluate("() => window.__notReloaded === true"))


def test_the_quota_list_rows_follow_a_start_and_a_reclaim_without_a_reload(
    asgi_server: str,  # noqa: F811
    two_teams: dict[str, AbstractUser],  # noqa: F811
    browser_page: Page,
) -> None:
    page = browser_page
    problems = watch_for_reloads(page)
    sign_in_as(page, asgi_server, "platform-admin")
    page.goto(f"{asgi_server}/quotas/")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    team_a, team_d = quota_row(page, "team-a"), quota_row(page, "team-d")
    expect(team_d.get_by_test_id("allocated")).to_have_text("8")
    expect(team_d.get_by_test_id("running")).to_have_text("1")
    expect(team_d.locator(".over-text")).to_be_hidden()
    not_reloaded(page)

    # A job starts: team-d borrows the 24 idle GPUs, its row says so at once.
    submit_through_the_api(
        two_teams["dan"], name="borrow-d", workspace="workspace-d", quota="team-d", kind="training", gpus=8, replicas=3
    )
    expect(team_d.get_by_test_id("allocated")).to_have_text("32")
    expect(team_d.get_by_test_id("running")).to_have_text("2")
    expect(team_d.get_by_test_id("pending")).to_have_text("0")
    expect(team_d.locator(".over-text")).to_be_visible()
    # The bar: 8 of 32 inside the guarantee, the other 24 over it.
    bar = team_d.locator("[data-bar]")
    expect(bar).to_have_class(re.compile(r"\bhas-over\b"))
    assert bar.locator(".bar-over").evaluate("(element) => element.style.width") == "75%"
    shoot(page, "list-borrowed")

    # A reclaim: team-a submits within its guarantee and takes its 24 back from team-d's borrower.
    submit_through_the_api(
        two_teams["alice"], name="train-a", workspace="workspace-a", quota="team-a", kind="training", gpus=8, replicas=3
    )
    expect(team_a.get_by_test_id("allocated")).to_have_text("24")
    expect(team_a.get_by_test_id("running")).to_have_text("1")
    expect(team_d.get_by_test_id("allocated")).to_have_text("8")
    expect(team_d.get_by_test_id("running")).to_have_text("1")
    expect(team_d.get_by_test_id("pending")).to_have_text("1")  # borrow-d waits again
    expect(team_d.locator(".over-text")).to_be_hidden()
    assert bar.locator(".bar-over").evaluate("(element) => element.style.width") == "0%"
    assert Job.objects.get(name="borrow-d").state == "pending"
    assert still_the_same_page(page), "the page was reloaded"
    check_accessibility(page)
    shoot(page, "list-reclaimed")

    # The platform admin's Dashboard: train-d is cancelled elsewhere; its 8 GPUs fall idle.
    page.goto(f"{asgi_server}/")
    expect(page.get_by_test_id("gpus-in-use")).to_have_text("32 of 32")
    expect(page.get_by_test_id("jobs-pending")).to_have_text("1")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    not_reloaded(page)
    cancel_through_the_api(two_teams["dan"], Job.objects.get(name="train-d"))
    expect(page.get_by_test_id("gpus-in-use")).to_have_text("24 of 32")
    expect(page.get_by_test_id("gpus-idle")).to_have_text("8")
    assert still_the_same_page(page), "the Dashboard was reloaded"
    check_accessibility(page)
    shoot(page, "dashboard-admin")
    assert problems == []


def test_a_members_dashboard_quota_page_and_jobs_list_follow_a_start(
    asgi_server: str,  # noqa: F811
    two_teams: dict[str, AbstractUser],  # noqa: F811
    browser_page: Page,
) -> None:
    page = browser_page
    problems = watch_for_reloads(page)
    sign_in_as(page, asgi_server, "dan")
    page.goto(f"{asgi_server}/")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    mine = page.get_by_test_id("my-quotas").locator("tr[data-quota='team-d'] td")
    expect(mine.nth(3)).to_have_text("8")  # allocated
    expect(page.get_by_test_id("my-jobs")).to_contain_text("Running1")
    not_reloaded(page)
    submit_through_the_api(
        two_teams["dan"], name="borrow-d", workspace="workspace-d", quota="team-d", kind="training", gpus=8, replicas=3
    )
    expect(mine.nth(3)).to_have_text("32")
    expect(mine.nth(4)).to_have_text("2")  # running
    expect(page.get_by_test_id("my-jobs")).to_contain_text("Running2")
    assert still_the_same_page(page), "the Dashboard was reloaded"
    check_accessibility(page)
    shoot(page, "dashboard-member")

    # The quota page's Overview tab: the figures of team-d follow alice's reclaim.
    page.goto(f"{asgi_server}/quotas/{quota_id('team-d')}/")
    allocated = page.get_by_test_id("allocated-now")
    expect(allocated).to_contain_text("Allocated now: 32 GPUs (32 by its own jobs); 2 running, 0 pending.")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    not_reloaded(page)
    submit_through_the_api(
        two_teams["alice"], name="train-a", workspace="workspace-a", quota="team-a", kind="training", gpus=8, replicas=3
    )
    expect(allocated).to_contain_text("Allocated now: 8 GPUs (8 by its own jobs); 1 running, 1 pending.")
    assert still_the_same_page(page), "the quota page was reloaded"

    # The Jobs list, as alice: a job she submits from elsewhere (the API) shows without a reload:
    # the job listed does not change, her workspace's topic hears the new one.
    page.context.clear_cookies()
    sign_in_as(page, asgi_server, "alice")
    page.goto(f"{asgi_server}/jobs/")
    expect(page.get_by_test_id("job-row")).to_have_count(1)
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    not_reloaded(page)
    submit_through_the_api(
        two_teams["alice"], name="small-a", workspace="workspace-a", quota="team-a", kind="training", gpus=1
    )
    row = page.get_by_test_id("job-row").filter(has=page.get_by_role("link", name="small-a", exact=True))
    expect(row.get_by_test_id("job-row-state")).to_have_text("Pending")  # the cluster is full
    assert Job.objects.get(name="train-a").state == "running"  # the one listed job kept its state
    assert still_the_same_page(page), "the Jobs list was reloaded"
    check_accessibility(page)
    shoot(page, "jobs-alice")
    assert problems == []


def band_names(page: Page) -> list[str]:
    return list(page.get_by_test_id("quota-allocation").evaluate(TRACE_NAMES))


def click_treemap_box(page: Page, name: str) -> None:
    """A person's click on the box's label (a parent's label sits in its header strip, above
    its children's boxes)."""
    label = (
        page.get_by_test_id("quota-treemap")
        .locator("text.slicetext")
        .filter(has_text=re.compile(rf"^{re.escape(name)}(?![.\w])"))
    )
    box = label.first.bounding_box()
    assert box is not None, f"no treemap box named {name}"
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)


def test_the_overview_stacks_the_children_of_the_box_clicked_and_of_the_quota_picked(
    asgi_server: str,  # noqa: F811
    deeper_pai: dict[str, AbstractUser],  # noqa: F811
    browser_page: Page,
) -> None:
    page = browser_page
    problems = watch_for_reloads(page)
    sign_in_as(page, asgi_server, "platform-admin")
    page.goto(f"{asgi_server}/quotas/?view=overview")
    chart = page.get_by_test_id("quota-allocation")
    expect(chart).to_have_attribute("data-ready", "true")
    expect(page.get_by_test_id("quota-treemap")).to_have_attribute("data-ready", "true")
    # The single root opens at once: Quota1's children, each with its guarantee line, and its own jobs.
    assert band_names(page) == [
        "Quota1.2",
        "Quota1.1",
        "Quota1 (own jobs)",
        "Quota1.2 guarantee",
        "Quota1.1 guarantee",
        "Quota1 (own jobs) guarantee",
    ]
    picker = page.get_by_label("Stack the quotas under")
    expect(picker).to_have_value(str(quota_id("Quota1")))
    over = page.get_by_test_id("band-row").filter(has=page.get_by_role("link", name="Quota1.1", exact=True))
    expect(over.locator("td").nth(2)).to_have_text("12")  # train-b: 24 on a guarantee of 12
    not_reloaded(page)

    # Hovering first, as a person's pointer does: the hover label must not break the CSP either.
    box = page.get_by_test_id("quota-treemap").locator("text.slicetext").first.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + 5, box["y"] + 5)
    click_treemap_box(page, "Quota1.1")
    expect(page.get_by_role("navigation", name="Quota in view")).to_contain_text("Quota1.1")
    expect(chart).to_have_attribute("data-ready", "true")
    assert band_names(page) == [
        "Quota1.1.a",
        "Quota1.1.b",
        "Quota1.1 (own jobs)",
        "Quota1.1.a guarantee",
        "Quota1.1.b guarantee",
        "Quota1.1 (own jobs) guarantee",
    ]
    expect(page).to_have_url(re.compile(rf"[?&]quota={quota_id('Quota1.1')}\b"))
    expect(picker).to_have_value(str(quota_id("Quota1.1")))
    own = page.get_by_test_id("band-row").filter(has=page.get_by_role("rowheader", name="Quota1.1 (own jobs)"))
    expect(own.locator("td").nth(1)).to_have_text("24")  # train-b runs on Quota1.1 itself
    assert still_the_same_page(page), "the click reloaded the page"
    check_accessibility(page)
    shoot(page, "overview-quota1.1")

    # Back up with the keyboard: the picker, then its button.
    picker.focus()
    picker.select_option(label="Quota1")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Show")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("navigation", name="Quota in view")).not_to_contain_text("Quota1.1")
    expect(chart).to_have_attribute("data-ready", "true")
    assert band_names(page)[:3] == ["Quota1.2", "Quota1.1", "Quota1 (own jobs)"]
    # The treemap opens where the picker went.
    level = page.get_by_test_id("quota-treemap").evaluate("(element) => String(element.data[0].level || '')")
    assert level == str(quota_id("Quota1"))
    assert still_the_same_page(page), "the picker reloaded the page"
    assert problems == []


def test_the_cpu_and_memory_cells_follow_a_start_without_a_reload(
    asgi_server: str,  # noqa: F811
    two_teams: dict[str, AbstractUser],  # noqa: F811
    browser_page: Page,
) -> None:
    """The pool manages CPU and memory (its roots guarantee them): when team-d's job of 3 × 16
    cores and 64 GiB starts, team-d's CPU and memory cells say so, with no reload."""
    for node in Node.objects.all():  # 4 nodes of 64 cores and 512 GiB
        quota_services.update_node(actor=None, node=node, cpu=64, memory_gib=512)
    for name, cpu, memory in (("team-a", 192, 1536), ("team-d", 64, 512)):
        quota_services.scale_quota(actor=None, quota=Quota.objects.get(name=name), cpu=cpu, memory_gib=memory)
    page = browser_page
    problems = watch_for_reloads(page)
    sign_in_as(page, asgi_server, "platform-admin")
    page.goto(f"{asgi_server}/quotas/")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    team_d = quota_row(page, "team-d")
    expect(team_d.get_by_test_id("resource-cpu")).to_have_text(re.compile(r"^0 / 64\s*fair \S+ · limit none$"))
    not_reloaded(page)

    submit_through_the_api(
        two_teams["dan"],
        name="cpu-d",
        workspace="workspace-d",
        quota="team-d",
        kind="training",
        gpus=1,
        replicas=3,
        cpu=16,
        memory_gib=64,
    )
    expect(team_d.get_by_test_id("resource-cpu")).to_have_text(re.compile(r"^48 / 64\s*fair 48 · limit none$"))
    expect(team_d.get_by_test_id("resource-memory_gib")).to_have_text(re.compile(r"^192 / 512\s*fair \S+ · limit"))
    assert Job.objects.get(name="cpu-d").state == "running"
    assert still_the_same_page(page), "the page was reloaded"
    check_accessibility(page)
    shoot(page, "list-cpu")
    assert problems == []
