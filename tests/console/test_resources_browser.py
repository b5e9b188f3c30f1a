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
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas import services as quota_services
from quotas.models import Node, Quota
from tests.console.conftest import check_accessibility

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
