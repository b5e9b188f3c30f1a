"""A beat that freed devices is held by the heartbeat's route until the cycle it asked for has
placed on its node (console.agent_holds; docs/agent.md, "Held for the cycle"), and answered then
with the starts, instead of asking the agent back a follow-up later."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings

from console.agent_holds import CycleHolds
from console.agent_route import AgentBeatRoute
from console.asgi import django_asgi_app
from quotas.models import Node, NodeState
from quotas.node_agents import issue_node_token
from scheduling import triggers
from scheduling.api import agent_quick
from scheduling.api.agent import accept_beat
from scheduling.api.agent_quick import quick_beat
from scheduling.lock import redis_client
from scheduling.models import Job, JobLog, JobState
from scheduling.tasks import run_scheduling_cycle
from tests.scheduling.conftest import Cluster
from tests.scheduling.test_agent_api import _submit, agent_cluster
from tests.scheduling.test_agent_route import _ask

__all__ = ["agent_cluster"]  # the fixture, shared with test_agent_api

pytestmark = pytest.mark.skipif(not django_settings.REDIS_URL, reason="the marks live in Redis")
NODE = 90_001  # a node id no test database reaches: only its Redis mark matters here


@pytest.fixture
def celery_marks(settings: Any) -> Iterator[Any]:
    settings.SCHEDULER_TRIGGER = "celery"
    client = redis_client()
    yield client
    client.delete(triggers.requested_key(), triggers.running_key(), triggers.freed_key(NODE))


def _held_for(holds: CycleHolds, limit: float, *, place_after: float | None = None) -> tuple[bool, float]:
    """Whether a beat of NODE saw a cycle place there, and how long it was held; the node is placed
    on `place_after` seconds in (None: never)."""

    async def scenario() -> tuple[bool, float]:
        began = time.monotonic()
        held = asyncio.create_task(holds.until_placed(NODE, limit))
        if place_after is not None:
            await asyncio.sleep(place_after)
            assert not held.done()  # a cycle is on its way and has placed nothing here yet
            triggers.placed_on([NODE])
        placed = await held
        return placed, time.monotonic() - began

    return asyncio.run(scenario())


def test_a_held_beat_goes_once_a_cycle_places_on_its_node(celery_marks: Any) -> None:
    triggers.mark_freed(NODE)
    celery_marks.set(triggers.requested_key(), "finish")
    placed, held = _held_for(CycleHolds(poll_seconds=0.01), limit=5.0, place_after=0.2)
    assert placed and 0.2 <= held < 1.5
    assert celery_marks.get(triggers.freed_key(NODE)) is None


def test_a_held_beat_goes_at_once_when_no_cycle_is_on_its_way(celery_marks: Any) -> None:
    triggers.mark_freed(NODE)  # freed, but nothing is requested or running: nothing will come
    placed, held = _held_for(CycleHolds(poll_seconds=0.01), limit=5.0)
    assert not placed and held < 1.0


def test_a_held_beat_goes_at_the_limit_when_the_cycle_never_places(celery_marks: Any) -> None:
    triggers.mark_freed(NODE)
    celery_marks.set(triggers.running_key(), "1")
    placed, held = _held_for(CycleHolds(poll_seconds=0.01), limit=0.3)
    assert not placed and 0.3 <= held < 1.5


def test_a_held_beat_is_looked_for_off_the_event_loop_which_sleeps_until_it_goes(
    celery_marks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poller's looks run on its own thread and wake the event loop only to answer a beat:
    held for 0.4 s, looked for every 0.02 s, the loop was woken from another thread not once."""
    triggers.mark_freed(NODE)
    celery_marks.set(triggers.running_key(), "1")  # a cycle runs, and never places here
    looks: list[str] = []
    look = triggers.freed_and_coming

    def counted(nodes: Any) -> tuple[set[int], bool]:
        looks.append(threading.current_thread().name)
        return look(nodes)

    monkeypatch.setattr(triggers, "freed_and_coming", counted)

    async def scenario() -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        woken = [0]
        wake = loop.call_soon_threadsafe

        def counting(*args: Any, **kwargs: Any) -> Any:
            woken[0] += 1
            return wake(*args, **kwargs)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign,assignment]
        placed = await CycleHolds(poll_seconds=0.02).until_placed(NODE, 0.4)
        return placed, woken[0]

    placed, woken = asyncio.run(scenario())
    assert not placed and woken == 0
    assert len(looks) >= 5 and set(looks) == {"agent-hold"}


@pytest.mark.django_db(transaction=True)
def test_the_beat_that_ends_a_job_carries_the_start_the_next_cycle_placed(
    agent_cluster: Cluster, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the route, with the cycle run by the Celery task as a worker would while the beat
    is held: the exit beat's one answer carries the start of the job that waited for its GPUs.
    The beat is read once: its second answer starts from the first's reading of it."""
    read: list[Any] = []

    def accept(body: Any) -> Any:
        read.append(body)
        return accept_beat(body)

    monkeypatch.setattr(agent_quick, "accept_beat", accept)
    Node.objects.exclude(name="gpu-1").update(state=NodeState.CORDONED)
    gpus = Node.objects.get(name="gpu-1").gpus
    first = _submit(agent_cluster, "first", gpus=gpus, command="true")
    waiting = _submit(agent_cluster, "waiting", gpus=gpus, command="true")
    assert Job.objects.get(pk=waiting.pk).state == JobState.PENDING
    route = AgentBeatRoute(django_asgi_app)
    token = f"Node {issue_node_token(actor=None, node=Node.objects.get(name='gpu-1'))}".encode()

    async def beat(processes: list[dict[str, Any]], *, run_cycle: bool = False) -> dict[str, Any]:
        body = json.dumps({"node": "gpu-1", "processes": processes}).encode()
        headers = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"), (b"authorization", token)]
        answering = asyncio.create_task(
            _ask(route, method="POST", path="/api/v1/agent/heartbeat/", body=body, headers=headers, query=b"")
        )
        if run_cycle:
            while not route.holds.holding() and not answering.done():
                await asyncio.sleep(0.01)
            assert not answering.done()  # held for the cycle
            await asyncio.to_thread(run_scheduling_cycle, "test")
        answer = await answering
        assert answer.status == 200, answer.body
        result: dict[str, Any] = answer.body
        return result

    (start,) = asyncio.run(beat([]))["starts"]
    assert start["job"] == first.pk
    settings.SCHEDULER_TRIGGER = "celery"
    # A cycle already asked for (by a submit, say): the exit's request joins it, no task is sent.
    redis_client().set(triggers.requested_key(), "submit")
    try:
        exited = [{"replica": start["replica"], "state": "exited", "exit_code": 0, "log": ["done"]}]
        answer = asyncio.run(beat(exited, run_cycle=True))
    finally:
        redis_client().delete(triggers.requested_key(), triggers.running_key())
    assert Job.objects.get(pk=first.pk).state == JobState.SUCCEEDED
    assert [s["job"] for s in answer["starts"]] == [waiting.pk]
    assert answer["heartbeat_seconds"] == float(settings.AGENT_HEARTBEAT_SECONDS)
    assert JobLog.objects.get(job_id=first.pk).lines == ["done"]  # the beat ran twice, its log once
    assert len(read) == 2  # the first beat's, and the exit beat's once


@pytest.mark.django_db(transaction=True)
def test_a_beat_answered_again_appends_its_log_lines_once(agent_cluster: Cluster) -> None:
    job = _submit(agent_cluster, "logs", gpus=1, command="sleep 100")
    name = Job.objects.get(pk=job.pk).placements.first().node.name  # type: ignore[union-attr]
    authorization = f"Node {issue_node_token(actor=None, node=Node.objects.get(name=name))}".encode()

    def beat(processes: list[dict[str, Any]], *, again: bool = False) -> dict[str, Any]:
        answer = quick_beat(
            authorization=authorization, body=json.dumps({"node": name, "processes": processes}).encode(), again=again
        )
        assert answer is not None
        result: dict[str, Any] = json.loads(answer.body)
        return result

    (start,) = beat([])["starts"]
    running = [{"replica": start["replica"], "state": "running", "pid": 4242, "log": ["one", "two"]}]
    beat(running)
    beat(running, again=True)
    assert JobLog.objects.get(job_id=job.pk).lines == ["one", "two"]
