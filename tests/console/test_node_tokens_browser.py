"""Rotating a node's agent token from the Nodes page in headless Chromium: the platform admin
previews, confirms, reads the token once in the dialog, and the agent register endpoint then
accepts the new token and refuses the old one; a reload no longer shows it. axe on each step,
screenshots at 1280 and 390 px in /tmp/shots-node-token/."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer
from rest_framework.test import APIClient

from quotas import services as quota_services
from quotas.models import AuditRecord, Node
from quotas.node_agents import issue_node_token
from tests.console.conftest import check_accessibility

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("NODE_TOKEN_SHOTS", "/tmp/shots-node-token"))
SignIn = Callable[[Page, str], None]


def _register(token: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    gpus = [{"index": index, "uuid": f"GPU-{index}", "model": "", "memory_mib": 81920} for index in range(8)]
    return int(client.post("/api/v1/agent/register/", {"node": "gpu-1", "gpus": gpus}, format="json").status_code)


def _shoot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
        scroll_width = page.evaluate("document.documentElement.scrollWidth")
        assert scroll_width <= width, f"the page scrolls sideways at {width} px ({scroll_width} px wide)"
    page.set_viewport_size({"width": 1280, "height": 900})


def test_the_platform_admin_rotates_a_token_and_reads_it_once(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    node = Node.objects.get(name="gpu-1")
    quota_services.update_node(actor=None, node=node, executor="agent")
    old = issue_node_token(actor=None, node=node)
    assert _register(old) == 200

    page = browser_page
    sign_in(page, "platform-admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Nodes").click()
    card = page.locator("section[data-node='gpu-1']")
    expect(card.get_by_test_id("node-agent")).to_contain_text("Executor: Node agent")
    expect(card.get_by_test_id("node-agent")).to_contain_text(f"Token: {old[:12]}…")
    expect(card.get_by_test_id("node-agent")).to_contain_text(re.compile(r"Last heartbeat: \d+ s ago"))
    check_accessibility(page)
    _shoot(page, "nodes")

    card.get_by_role("link", name="Rotate token of gpu-1").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("heading", name="Rotate token of gpu-1")).to_be_visible()
    expect(dialog).to_contain_text("stops working at once")
    expect(dialog).to_contain_text("restarted with the new token")
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_text("No job is evicted.")).to_be_visible()
    check_accessibility(page)
    _shoot(page, "token-preview")
    assert _register(old) == 200  # the preview changed nothing

    dialog.get_by_role("button", name="Confirm: rotate token").click()
    field = dialog.get_by_label("Node token")
    expect(field).to_have_value(re.compile(r"^gqn_"))
    new = field.input_value()
    expect(dialog.get_by_test_id("token-once")).to_contain_text("it is shown this once")
    expect(dialog.get_by_label("Command line")).to_have_value(
        f"python manage.py agent --server {live_server.url} --node gpu-1 --token-file /etc/gqc/node.token"
    )
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    dialog.get_by_role("button", name="Copy token").click()
    expect(dialog.locator("[data-copy='node-token']")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == new
    check_accessibility(page)
    _shoot(page, "token-shown")

    assert _register(new) == 200
    assert _register(old) == 401
    assert AuditRecord.objects.filter(action="node.token", object_id=node.pk, actor__isnull=False).count() == 1

    # Once: back on the page (or on a reload) the token is nowhere, only its first characters.
    dialog.get_by_role("link", name="Done: back to the nodes").click()
    expect(page.get_by_text("gpu-1 has a new agent token; the previous one no longer works.")).to_be_visible()
    page.reload()
    assert new not in page.content()
    expect(card.get_by_test_id("node-agent")).to_contain_text(f"Token: {new[:12]}…")
    check_accessibility(page)
