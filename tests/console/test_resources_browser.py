"""CPU and memory as managed resources in headless Chromium (issue 24): a platform admin gives a
new root quota a CPU guarantee and limit with New quota, sees them in the Resource Quotas columns
and on the quota page, then raises both with Scale. axe on each page; screenshots at 1280 and
390 px in /tmp/shots-resources/."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Locator, Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas import services as quota_services
from quotas.models import Node, Quota
from scheduling import services as job_services
from tests.console.conftest import check_accessibility
from workspaces import services as workspace_services
from workspaces.models import Workspace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("RESOURCE_SHOTS", "/tmp/shots-resources"))
SignIn = Callable[[Page, str], None]


def test_a_platform_admin_sets_a_cpu_guarantee_and_limit_and_sees_them(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    for node in Node.objects.all():  # 4 nodes of 64 cores and 512 GiB: 256 cores in the pool
        quota_services.update_node(actor=None, node=node, cpu=64, memory_gib=512)
    page = browser_page
    sign_in(page, "platform-admin")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Resource Quotas").click()
    page.get_by_role("link", name="New quota").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Name").fill("cpu-batch")
    dialog.get_by_label("Guaranteed GPUs").fill("0")
    dialog.get_by_label("Guaranteed CPU cores").fill("300")
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_text("cpu-batch would need 300 CPU cores but the pool default has 256")).to_be_visible()
    dialog.get_by_label("Guaranteed CPU cores").fill("64")
    dialog.get_by_label("CPU limit (cores)").fill("96")
    dialog.get_by_label("Guaranteed memory (GiB)").fill("256")
    check_accessibility(page)
    dialog.get_by_role("button", name="Preview").click()
    dialog.get_by_role("button", name="Confirm: create").click()
    expect(page.get_by_text("Created cpu-batch with 0 GPUs.")).to_be_visible()
    quota = Quota.objects.get(name="cpu-batch")
    assert (quota.cpu, quota.cpu_limit, quota.memory_gib, quota.memory_gib_limit) == (64, 96, 256, None)

    page.goto(f"{live_server.url}/quotas/")
    tree = page.get_by_test_id("quota-tree")
    expect(tree.get_by_role("columnheader", name="CPU cores")).to_be_visible()
    expect(tree.get_by_role("columnheader", name="Memory (GiB)")).to_be_visible()
    row = tree.locator("[data-quota=cpu-batch]")
    expect(row.get_by_test_id("resource-cpu")).to_have_text(re.compile(r"0 / 64\s*fair 0 · limit 96"))
    expect(row.get_by_test_id("resource-memory_gib")).to_have_text(re.compile(r"0 / 256\s*fair 0 · limit none"))
    # Quota1 guarantees no CPU but its pool manages it: 0 guaranteed, no limit.
    expect(tree.locator("[data-quota=Quota1]").get_by_test_id("resource-cpu")).to_have_text(
        re.compile(r"0 / 0\s*fair 0 · limit none")
    )

    # Scale raises the guarantee and the limit in one step (64 → 128 would pass the old limit of 96).
    row.get_by_text("Actions").click()
    row.get_by_role("link", name="Scale").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_label("Guaranteed CPU cores")).to_have_value("64.0")
    dialog.get_by_label("Guaranteed CPU cores").fill("128")
    dialog.get_by_label("CPU limit (cores)").fill("160")
    check_accessibility(page)
    dialog.get_by_role("button", name="Preview").click()
    dialog.get_by_role("button", name="Confirm: scale").click()
    expect(page.get_by_text("Scaled cpu-batch to 0 GPUs.")).to_be_visible()
    quota.refresh_from_db()
    assert (quota.cpu, quota.cpu_limit) == (128, 160)

    page.goto(f"{live_server.url}/quotas/{quota.pk}/")
    expect(page.get_by_test_id("resource-cpu")).to_contain_text("guaranteed 128 cores, limit 160 cores")
    expect(page.get_by_test_id("resource-memory_gib")).to_contain_text("guaranteed 256 GiB, limit none")

    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in (("quotas", "/quotas/"), ("quota", f"/quotas/{quota.pk}/")):
            page.goto(f"{live_server.url}{path}")
            check_accessibility(page)
            page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)


# The quota table's scroll box: how wide its content is, and how wide it shows.
BOX_SCROLL = """() => { const box = document.querySelector('[data-quota-tree]').closest('.scroll-box');
  return [box.scrollWidth, box.clientWidth]; }"""


def right_edge(element: Locator) -> float:
    box = element.bounding_box()
    assert box is not None
    return box["x"] + box["width"]


def height(element: Locator) -> float:
    box = element.bounding_box()
    assert box is not None
    return box["height"]


def a100_pool_like_the_demo(developer: AbstractUser) -> None:
    """The demo's a100 pool (console/management/commands/load_demo.py): 4 nodes of 8 GPUs, 64 cores
    and 512 GiB; Batch guarantees 256 cores and 2,048 GiB, its children 192/1,536 and 64/512; a
    sweep on Batch.sweeps holds cores and memory."""
    pool = quota_services.create_pool(actor=None, name="a100")
    for index in range(1, 5):
        quota_services.create_node(actor=None, name=f"a100-{index}", gpus=8, cpu=64, memory_gib=512, pool=pool)
    batch = quota_services.create_quota(
        actor=None, name="Batch", gpus=32, cpu=256, cpu_limit=256, memory_gib=2048, pool=pool
    )
    sweeps = quota_services.create_quota(
        actor=None, name="Batch.sweeps", parent=batch, gpus=24, cpu=192, memory_gib=1536
    )
    quota_services.create_quota(actor=None, name="Batch.eval", parent=batch, gpus=8, cpu=64, memory_gib=512)
    workspace = Workspace.objects.get(name="workspace-b")
    workspace_services.bind_quota(actor=None, workspace=workspace, quota=sweeps)
    job_services.submit_job(
        actor=developer, workspace=workspace, quota=sweeps, name="sweep-a100", kind="training",
        gpus=4, replicas=2, cpu=32, memory_gib=256,
    )  # fmt: skip
    job_services.converge()


def test_every_column_of_a_pool_with_cpu_and_memory_fits_1280_px_with_no_sideways_scroll(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    """The CPU and memory columns come on top of the GPU ones: at 1280 px the table still fits its
    box, Actions included (docs/console.md), and each Actions menu opens inside it."""
    a100_pool_like_the_demo(pai_world["developer"])
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 900})
    sign_in(page, "platform-admin")
    page.goto(f"{live_server.url}/quotas/")
    page.get_by_role("navigation", name="Pools").get_by_role("link", name="Pool a100").click()
    tree = page.get_by_test_id("quota-tree")
    expect(tree.locator("[data-quota='Batch.sweeps']").get_by_test_id("resource-cpu")).to_contain_text("64 / 192")
    for header in ("CPU cores", "Memory (GiB)", "Actions"):
        expect(tree.get_by_role("columnheader", name=header)).to_be_in_viewport(ratio=1)  # the box clips the rest
    box_scroll, box_width = page.evaluate(BOX_SCROLL)
    assert box_scroll <= box_width, f"the quota table scrolls sideways in its box ({box_scroll} > {box_width} px)"
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 1280
    table_right = right_edge(tree)
    assert table_right <= 1256, f"the quota table ends at {table_right} px, past the content's 1256 px"
    for name in ("Batch", "Batch.sweeps", "Batch.eval"):
        row = tree.locator(f"[data-quota='{name}']")
        actions = row.get_by_text("Actions")
        assert right_edge(actions) <= table_right and height(actions) < 30, f"{name}'s Actions is cut or wraps"
        actions.click()
        for action in ("New child quota", "Delete"):
            link = row.get_by_role("link", name=action)
            expect(link).to_be_visible()
            assert right_edge(link) <= table_right, f"{name}'s {action} sticks out of the table"
    box_scroll, box_width = page.evaluate(BOX_SCROLL)
    assert box_scroll <= box_width, f"the open Actions menus widen the table to {box_scroll} px"
    check_accessibility(page)
