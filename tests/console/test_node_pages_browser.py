"""The Nodes page in headless Chromium, as a platform admin uses it: cordon a node through its
preview, drain's preview naming the job it evicts, the Quota page's Nodes tab, axe on each, and
screenshots at 1280 and 390 px (light and dark) in /tmp/shots-nodes/."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas.models import Node, NodeAgent, NodeState
from quotas.node_agents import ReportedDevice, issue_node_token, register_agent
from quotas.services import create_node, update_node
from scheduling.models import Job
from tests.console.conftest import check_accessibility, quota_id

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = Path(os.environ.get("NODE_SHOTS", "/tmp/shots-nodes"))
SignIn = Callable[[Page, str], None]


def busy_node() -> str:
    """A node that train-b (3 × 8 GPUs) runs on."""
    return str(Job.objects.get(name="train-b").placements.order_by("node__name").first().node.name)  # type: ignore[union-attr]


def test_cordon_a_node_from_the_nodes_page(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Nodes").click()
    expect(page.get_by_role("heading", name="Nodes", exact=True)).to_be_visible()
    name = busy_node()
    card = page.locator(f"section[data-node='{name}']")
    expect(card.get_by_test_id("node-state")).to_have_text("Ready")
    expect(card.get_by_test_id("gpu-holder").first).to_contain_text("train-b")
    expect(card.get_by_test_id("gpu-holder").first).to_contain_text("Quota1.1")
    check_accessibility(page)

    page.get_by_role("link", name=f"Cordon {name}", exact=True).click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("heading", name=f"Cordon {name}")).to_be_visible()
    expect(dialog).to_contain_text("Jobs on it now: train-b (Quota1.1).")
    dialog.get_by_role("button", name="Preview").click()
    expect(dialog.get_by_text("No job is evicted.")).to_be_visible()
    check_accessibility(page)
    assert Node.objects.get(name=name).state == NodeState.READY  # a preview changes nothing

    dialog.get_by_role("button", name="Confirm: cordon").click()
    expect(page.get_by_text(f"{name} is cordoned.")).to_be_visible()
    expect(card.get_by_test_id("node-state")).to_have_text("Cordoned")
    expect(card.get_by_role("link", name=f"Uncordon {name}")).to_be_visible()
    expect(card.get_by_role("link", name=f"Cordon {name}", exact=True)).to_have_count(0)
    expect(card.get_by_test_id("gpu-holder").first).to_contain_text("train-b")  # its job runs on
    check_accessibility(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "nodes-cordoned-1280-light.png"), full_page=True)
    # The API says the same.
    answer = page.request.get(f"{live_server.url}/api/v1/nodes/{Node.objects.get(name=name).pk}/")
    assert answer.ok and answer.json()["state"] == "cordoned"
    assert Job.objects.get(name="train-b").state == "running"


def registered_agent_node(busy: str) -> str:
    """An idle node handed to a node agent that registered its GPUs and its version."""
    node = Node.objects.exclude(name=busy).filter(placements__isnull=True).order_by("name").first()
    assert node is not None
    node = update_node(actor=None, node=node, executor="agent")
    issue_node_token(actor=None, node=node)
    devices = [ReportedDevice(index=i, uuid=f"GPU-{i}", model="", memory_mib=81_559) for i in range(node.gpus)]
    register_agent(agent=NodeAgent.objects.get(node=node), devices=devices, version="0.1.0")
    return node.name


def test_drain_preview_and_screenshots(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    name = busy_node()
    agent_node = registered_agent_node(name)
    SHOTS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 900})
            page.goto(f"{live_server.url}/nodes/")
            expect(page.locator(f"section[data-node='{agent_node}']").get_by_test_id("node-agent")).to_contain_text(
                "Registered 8 GPUs · Agent 0.1.0"
            )
            check_accessibility(page)
            page.screenshot(path=str(SHOTS / f"nodes-{width}-{scheme}.png"), full_page=True)
            scroll_width = page.evaluate("document.documentElement.scrollWidth")
            assert scroll_width <= width, f"the page scrolls sideways at {width} px ({scroll_width} px wide)"
            page.get_by_role("link", name=f"Drain {name}").click()
            dialog = page.get_by_role("dialog")
            dialog.get_by_role("button", name="Preview").click()
            expect(dialog.get_by_test_id("preview-eviction")).to_contain_text(
                f"train-b (Quota1.1), by the drain rule: node {name} is draining"
            )
            check_accessibility(page)
            page.screenshot(path=str(SHOTS / f"drain-preview-{width}-{scheme}.png"))
            page.goto(f"{live_server.url}/quotas/{quota_id('Quota1')}/?tab=nodes")
            expect(page.get_by_test_id("quota-node")).to_have_count(3)
            expect(page.get_by_test_id("quota-nodes")).to_contain_text(
                "train-b (Quota1.1): GPUs 0, 1, 2, 3, 4, 5, 6, 7"
            )
            check_accessibility(page)
            page.screenshot(path=str(SHOTS / f"quota-nodes-{width}-{scheme}.png"), full_page=True)
    assert Node.objects.get(name=name).state == NodeState.READY


def test_edit_node_hands_a_node_to_its_agent(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    page = browser_page
    sign_in(page, "platform-admin")
    name = busy_node()
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(f"{live_server.url}/nodes/")
        page.get_by_role("link", name=f"Edit {name}", exact=True).click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_label("Runs jobs with")).to_have_value("simulated")
        check_accessibility(page)
        page.screenshot(path=str(SHOTS / f"edit-node-{width}.png"))
        page.keyboard.press("Escape")
    page.get_by_role("link", name=f"Edit {name}", exact=True).click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_label("Runs jobs with").select_option(label="Node agent")
    dialog.get_by_role("button", name="Preview").click()
    dialog.get_by_role("button", name="Confirm: save").click()
    expect(page.get_by_text(f"Saved {name}.")).to_be_visible()
    assert Node.objects.get(name=name).executor == "agent"


def test_edit_node_will_not_take_the_gpus_a_job_holds(
    live_server: LiveServer, pai_world: dict[str, AbstractUser], browser_page: Page, sign_in: SignIn
) -> None:
    """Edit node with fewer GPUs than a running job holds: Preview names the GPUs and the job,
    and nothing changes (a fifth node covers Quota1's guarantee, so only the job refuses)."""
    create_node(actor=None, name="gpu-5", gpus=8)
    page = browser_page
    sign_in(page, "platform-admin")
    name = busy_node()
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Nodes").click()
        page.get_by_role("link", name=f"Edit {name}", exact=True).click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_label("GPUs", exact=True).fill("4")
        dialog.get_by_role("button", name="Preview").click()
        expect(dialog).to_contain_text(
            f"{name} cannot go down to 4 GPUs while jobs hold the GPUs it would lose "
            "(GPU 4 by train-b; GPU 5 by train-b; GPU 6 by train-b; GPU 7 by train-b)"
        )
        expect(dialog.get_by_role("button", name="Confirm: save")).to_have_count(0)
        check_accessibility(page)
        page.screenshot(path=str(SHOTS / f"edit-node-refused-{width}.png"))
        page.keyboard.press("Escape")
    answer = page.request.get(f"{live_server.url}/api/v1/nodes/{Node.objects.get(name=name).pk}/")
    assert answer.ok and answer.json()["gpus"] == 8
