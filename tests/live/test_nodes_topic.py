"""`nodes`: every node's GPU cells in one topic (the Nodes page's), for platform admins only, over
the real ASGI application and the real Redis channel layer; a page of more nodes than a socket
may have topics (LIVE_MAX_SUBSCRIPTIONS) still hears every node."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import AbstractUser

from console import services as console_services
from quotas import services as quota_services
from quotas.models import Node
from telemetry import services as telemetry_services
from telemetry.services import GpuReading
from tests.live.test_socket import connect, next_of, run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(30)]


@pytest.fixture
def nodes_world(make_user: Callable[..., AbstractUser], settings: Any) -> dict[str, Any]:
    settings.SCHEDULER_PUBLISH_EVENTS = True
    settings.SCHEDULER_TRIGGER = "none"
    settings.LIVE_RECHECK_SECONDS = 30.0
    admin = make_user("root", platform_admin=True)
    dave = make_user("dave")
    nodes = [quota_services.create_node(actor=None, name=f"dgx-{index}", gpus=8) for index in range(3)]
    return {"admin": admin, "dave": dave, "nodes": nodes}


def readings(utilisation: float) -> list[GpuReading]:
    return [GpuReading(gpu, utilisation + gpu, 1024, 81920) for gpu in range(8)]


def test_a_platform_admin_hears_every_node_and_others_are_refused(nodes_world: dict[str, Any]) -> None:
    first, _, last = nodes_world["nodes"]

    async def scenario() -> None:
        refused = await connect(nodes_world["dave"])
        await refused.send_json_to({"subscribe": ["nodes"]})
        answer = await next_of(refused, "subscription")
        assert answer["subscribed"] == []
        assert answer["refused"] == [{"topic": "nodes", "reason": "no such topic, or not yours to see"}]

        socket = await connect(nodes_world["admin"])
        await socket.send_json_to({"subscribe": ["nodes"]})
        assert (await next_of(socket, "subscription"))["subscribed"] == ["nodes"]
        before = time.time()
        await sync_to_async(telemetry_services.record_gpu_samples)(last, readings(40.0))
        change = await next_of(socket, "change")
        assert change["topic"] == "nodes"
        assert change["change"]["util"] == {str(last.pk): {str(gpu): 40.0 + gpu for gpu in range(8)}}
        assert change["committed_at"] >= before - 0.001
        # Two more batches within the coalescing second (agents report node by node): one
        # message after the window, with both nodes, the latest figures of each.
        await sync_to_async(telemetry_services.record_gpu_samples)(first, readings(10.0))
        await sync_to_async(telemetry_services.record_gpu_samples)(last, readings(70.5))
        merged = await next_of(socket, "change", timeout=3)
        assert merged["change"]["util"][str(first.pk)]["0"] == 10.0
        assert merged["change"]["util"][str(last.pk)]["7"] == 77.5
        assert await refused.receive_nothing(timeout=0.3)
        await socket.disconnect()
        await refused.disconnect()

    run(scenario)


def test_a_demoted_admin_loses_the_nodes_topic_within_5_seconds(nodes_world: dict[str, Any], settings: Any) -> None:
    # No service announces a demotion: the socket's periodic re-check (LIVE_RECHECK_SECONDS) finds it.
    settings.LIVE_RECHECK_SECONDS = 1.0
    admin = nodes_world["admin"]

    async def scenario() -> None:
        socket = await connect(admin)
        await socket.send_json_to({"subscribe": ["nodes", "cluster"]})
        await next_of(socket, "subscription")
        started = time.monotonic()
        await sync_to_async(console_services.update_user)(actor=None, user=admin, is_platform_admin=False)
        dropped = await next_of(socket, "dropped", timeout=5)
        assert dropped["topics"] == ["nodes"]
        assert time.monotonic() - started < 5
        await sync_to_async(telemetry_services.record_gpu_samples)(nodes_world["nodes"][0], readings(50.0))
        assert await socket.receive_nothing(timeout=1.5)
        await socket.disconnect()

    run(scenario)


def test_a_page_of_more_nodes_than_a_socket_has_topics_needs_one(
    nodes_world: dict[str, Any], settings: Any, client: Any
) -> None:
    """The Nodes page's cells name the one `nodes` topic, whatever the number of nodes."""
    settings.LIVE_MAX_SUBSCRIPTIONS = 5
    pool = nodes_world["nodes"][0].pool
    Node.objects.bulk_create(Node(pool=pool, name=f"extra-{index:02d}", gpus=1) for index in range(10))
    client.force_login(nodes_world["admin"])
    html = client.get("/nodes/").content.decode()
    far = Node.objects.order_by("-pk").first()
    assert far is not None
    assert f'data-live="nodes:util.{far.pk}.0"' in html
    assert 'data-live="node:' not in html
