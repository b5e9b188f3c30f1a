"""A batch of samples reaches a `job:<id>` and a `node:<id>` subscriber over the real Redis
channel layer, sent after commit; with Redis unreachable the samples still stand."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from telemetry import services
from telemetry.models import GpuSample
from tests.live.test_socket import connect, next_of, run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(30)]


@pytest.fixture
def live_cluster(cluster: dict[str, Any], settings: Any) -> dict[str, Any]:
    settings.SCHEDULER_PUBLISH_EVENTS = True
    settings.SCHEDULER_TRIGGER = "none"
    settings.LIVE_RECHECK_SECONDS = 30.0
    return cluster


def test_samples_reach_the_job_and_node_subscribers(live_cluster: dict[str, Any]) -> None:
    train = live_cluster["train"]
    placement = train.placements.select_related("node").get()

    async def scenario() -> None:
        socket = await connect(live_cluster["dave"])
        await socket.send_json_to({"subscribe": [f"job:{train.pk}", f"node:{placement.node_id}"]})
        reply = await next_of(socket, "subscription")
        assert sorted(reply["subscribed"]) == sorted([f"job:{train.pk}", f"node:{placement.node_id}"])
        await sync_to_async(services.record_simulated_samples)()
        seen: dict[str, dict[str, Any]] = {}
        while len(seen) < 2:
            message = await next_of(socket, "change")
            seen[message["topic"]] = message["change"]
        gpus = seen[f"job:{train.pk}"]["telemetry"]
        assert sorted(gpus) == sorted(f"{placement.node_id}:{gpu}" for gpu in placement.devices)
        for gpu in placement.devices:
            figures = gpus[f"{placement.node_id}:{gpu}"]
            assert figures["label"] == f"{placement.node.name} GPU {gpu}"
            assert 85 <= figures["util"] <= 95
            assert figures["memory_total_mib"] == 81920 and figures["memory_used_mib"] > 0.8 * 81920
            node = seen[f"node:{placement.node_id}"]
            assert node[f"gpu_{gpu}_util"] == figures["util"]
            assert node[f"gpu_{gpu}_util_display"] == f"{figures['util']:.0f} %"
        assert all(f"gpu_{index}_util" in seen[f"node:{placement.node_id}"] for index in range(8))
        await socket.disconnect()

    run(scenario)


def test_samples_stand_when_the_channel_layer_is_unreachable(
    live_cluster: dict[str, Any], settings: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another test of the same worker may have reconfigured logging; the warning is what is asserted.
    caplog.set_level(logging.WARNING, logger="telemetry.live")
    monkeypatch.setattr(logging.getLogger("telemetry.live"), "disabled", False)
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]}}
    }
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    try:
        assert services.record_simulated_samples() == 16
    finally:
        channel_layers.backends.clear()
    assert GpuSample.objects.count() == 16
    assert [r.message for r in caplog.records if "could not publish GPU samples" in r.message]
    assert not [record for record in caplog.records if record.exc_info]
