"""After a beat that freed devices, the agent is asked back soon (AGENT_FOLLOW_UP_SECONDS), and
again at each beat while the cycle that release asked for is still queued or running: a follow-up
that came before a busy worker's cycle committed would otherwise wait a whole heartbeat for what
that cycle placed on the node (docs/agent.md, "Sooner after a release")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings

from quotas.models import Node, NodeExecutor, NodeState
from scheduling import triggers
from scheduling.agent_beat import has_free_device
from scheduling.lock import redis_client
from scheduling.models import Job, JobState
from tests.scheduling.conftest import Cluster
from tests.scheduling.test_agent_api import _agent_of, _beat, _submit, agent_cluster

__all__ = ["agent_cluster"]  # the fixture, shared with test_agent_api

pytestmark = pytest.mark.skipif(not django_settings.REDIS_URL, reason="the marks live in Redis")


@pytest.fixture
def marks() -> Iterator[Any]:
    client = redis_client()
    yield client
    client.delete(triggers.requested_key(), triggers.running_key())


def test_the_follow_up_repeats_while_the_cycle_the_release_asked_for_is_on_its_way(
    agent_cluster: Cluster,
    settings: Any,
    marks: Any,
) -> None:
    settings.AGENT_HEARTBEAT_SECONDS = 5.0
    settings.AGENT_FOLLOW_UP_SECONDS = 1.0
    job = _submit(agent_cluster, "train", gpus=1, command="true")
    client, name = _agent_of(job)
    node = Node.objects.get(name=name)
    (start,) = _beat(client, name)["starts"]
    # The exit ends the job (the test's inline trigger runs its cycle at once) and asks back soon.
    assert (
        _beat(client, name, [{"replica": start["replica"], "state": "exited", "exit_code": 0}])["heartbeat_seconds"]
        == 1.0
    )
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    # From here as under Celery: the release marked the node, a worker has the cycle queued.
    settings.SCHEDULER_TRIGGER = "celery"
    triggers.mark_freed(node.pk)
    marks.set(triggers.requested_key(), "finish")
    assert _beat(client, name)["heartbeat_seconds"] == 1.0  # queued: again soon
    marks.delete(triggers.requested_key())
    with triggers.cycle_running():
        assert _beat(client, name)["heartbeat_seconds"] == 1.0  # running: again soon
    assert _beat(client, name)["heartbeat_seconds"] == 5.0  # committed: back to the heartbeat
    # A node that freed nothing lately waits its heartbeat whatever the cycles do.
    marks.set(triggers.requested_key(), "submit")
    marks.delete(triggers.freed_key(node.pk))
    assert _beat(client, name)["heartbeat_seconds"] == 5.0


def test_without_celery_nothing_is_marked_or_read(agent_cluster: Cluster, marks: Any) -> None:
    """Inline, the cycle has run before the answer; with no trigger, nobody runs one."""
    node = Node.objects.get(name="gpu-1")
    marks.delete(triggers.freed_key(node.pk))
    triggers.mark_freed(node.pk)
    assert marks.get(triggers.freed_key(node.pk)) is None
    marks.set(triggers.requested_key(), "x")
    assert not triggers.cycle_on_its_way(node.pk)


def test_a_free_device_is_one_no_placement_holds() -> None:
    node = Node(name="n", gpus=2, executor=NodeExecutor.AGENT, state=NodeState.READY)
    half = {"job_id": 1, "devices": [0], "fraction": 0.5}
    whole = {"job_id": 2, "devices": [1], "fraction": 1.0}
    assert has_free_device(node, {1: half}, ended=set())
    assert not has_free_device(node, {1: half, 2: whole}, ended=set())
    assert has_free_device(node, {1: half, 2: whole}, ended={2})  # its job ended in this beat
    node.state = NodeState.CORDONED
    assert not has_free_device(node, {1: half}, ended=set())
    node.state, node.executor = NodeState.READY, NodeExecutor.SIMULATED
    assert not has_free_device(node, {1: half}, ended=set())
