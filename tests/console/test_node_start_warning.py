"""The Nodes page warns about a node whose agent did not take up a start (issue 27): when, and
what the console gave up on, until the agent takes up a start again. The beat that sets and clears
the warning is pinned by tests/scheduling/test_agent_starts.py; here, what the page shows."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import AbstractUser
from django.utils import timezone

from quotas.models import Node, NodeAgent
from quotas.node_agents import ReportedDevice, issue_node_token, register_agent
from quotas.services import update_node
from tests.console.test_node_pages import client_as

pytestmark = pytest.mark.django_db


def agent_node_that_missed_a_start(seconds_ago: float = 600) -> Node:
    """An idle node handed to an agent that registered, then did not start job 77 in time."""
    node = Node.objects.filter(placements__isnull=True).order_by("name").first()
    assert node is not None
    node = update_node(actor=None, node=node, executor="agent")
    issue_node_token(actor=None, node=node)
    devices = [ReportedDevice(index=i, uuid=f"GPU-{i}", model="", memory_mib=81_559) for i in range(node.gpus)]
    register_agent(agent=NodeAgent.objects.get(node=node), devices=devices, version="0.1.0")
    NodeAgent.objects.filter(node=node).update(
        start_missed_at=timezone.now() - timedelta(seconds=seconds_ago), start_missed="did not start job 77 within 6 s"
    )
    return node


def test_a_node_whose_agent_missed_a_start_is_warned_about_and_the_others_are_not(
    pai_world: dict[str, AbstractUser],
) -> None:
    node = agent_node_that_missed_a_start()
    page = client_as(pai_world, "platform-admin").get("/nodes/").content.decode()
    assert page.count('data-testid="node-start-missed"') == 1
    card = page[page.index(f'data-node="{node.name}"') :]
    warning = card[card.index('data-testid="node-start-missed"') : card.index("</p>", card.index("node-start-missed"))]
    assert re.sub(r"<[^>]+>", "", warning).endswith(
        "Missed a start 10 min ago: the agent did not start job 77 within 6 s (requeued). Its log on the host says why."
    )


def test_no_warning_once_the_agent_takes_up_starts_again(pai_world: dict[str, AbstractUser]) -> None:
    node = agent_node_that_missed_a_start()
    NodeAgent.objects.filter(node=node).update(start_missed_at=None, start_missed="")
    page = client_as(pai_world, "platform-admin").get("/nodes/").content.decode()
    assert "node-start-missed" not in page
