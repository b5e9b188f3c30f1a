"""The live changes of the jobs agents' beats end go out together (scheduling.events.published_later):
kept by the web process for AGENT_PUBLISH_FLUSH_SECONDS and sent by its publisher thread as one
batch, the jobs' events and their topics' changes, stamped with the newest commit's time."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from channels.layers import get_channel_layer

from scheduling import events, live
from scheduling.models import Job
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db(transaction=True)


def test_batches_published_later_go_out_together_after_the_flush(cluster: Cluster, settings: Any) -> None:
    settings.AGENT_PUBLISH_FLUSH_SECONDS = 0.3
    settings.SCHEDULER_PUBLISH_EVENTS = True  # the tests of scheduling turn publishing off
    first, second = (cluster.submit(name, "team-a", gpus=1) for name in ("first", "second"))
    batches = [[events.job_event(Job.objects.get(pk=job.pk))] for job in (first, second)]

    def publish_both() -> list[float]:
        # As a beat's thread does (console.agent_route): two commits' batches, kept.
        with events.published_later():
            stamps = [live.commit_stamp()]
            assert all(events.publish_many(batch) for batch in batches)
            stamps.append(live.commit_stamp())
        return stamps

    async def scenario() -> tuple[list[dict[str, Any]], float, list[float]]:
        layer = get_channel_layer()
        listener = await layer.new_channel()
        await layer.group_add(events.GROUP, listener)
        topic = await layer.new_channel()
        await layer.group_add(live.topic_group(f"job:{second.pk}"), topic)
        began = time.monotonic()
        stamps = await asyncio.to_thread(publish_both)
        received = [await asyncio.wait_for(layer.receive(listener), 5) for _ in range(2)]
        waited = time.monotonic() - began
        change = await asyncio.wait_for(layer.receive(topic), 5)
        await layer.group_discard(events.GROUP, listener)
        return [*received, change], waited, stamps

    messages, waited, (before, after) = asyncio.run(scenario())
    assert [message["event"]["id"] for message in messages[:2]] == [first.pk, second.pk]
    assert waited >= 0.3  # kept for the flush, not sent from the beat's thread
    # The job's topic change carries the newest commit's time of the batch.
    assert before <= messages[2]["committed_at"] <= after + 0.01


def test_outside_the_block_or_at_zero_a_batch_goes_at_once(cluster: Cluster, settings: Any) -> None:
    settings.AGENT_PUBLISH_FLUSH_SECONDS = 0.0
    settings.SCHEDULER_PUBLISH_EVENTS = True
    job = cluster.submit("now", "team-a", gpus=1)
    batch = [events.job_event(Job.objects.get(pk=job.pk))]

    def publish() -> None:
        with events.published_later():
            events.publish_many(batch)

    async def scenario() -> float:
        layer = get_channel_layer()
        listener = await layer.new_channel()
        await layer.group_add(events.GROUP, listener)
        began = time.monotonic()
        await asyncio.to_thread(publish)
        await asyncio.wait_for(layer.receive(listener), 5)
        await layer.group_discard(events.GROUP, listener)
        return time.monotonic() - began

    # At once: no flush interval to wait (a full run beside drains took 0.57 s for the round trip).
    assert asyncio.run(scenario()) < 1.0
