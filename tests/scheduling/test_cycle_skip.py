"""The beat runs a cycle only when something changed (scheduling.changes).

Triggers are off ("none") once the cluster is idle, as if every event trigger were lost: what
runs the engine is the beat alone, so each row shows that its kind of change is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas import services as quota_services
from quotas.models import NodeExecutor, NodeState, PlacementPolicy
from scheduling import changes, services, tasks
from scheduling.clock import SimulatedClock, use_clock
from scheduling.executors import get_executor
from scheduling.executors.agent import check_lost_nodes
from scheduling.models import CycleRecord, JobState
from tests.scheduling.conftest import Cluster, build_cluster

pytestmark = pytest.mark.django_db

BEAT_SECONDS = 5.0


@pytest.fixture
def clock(settings: Any) -> Iterator[SimulatedClock]:
    settings.SCHEDULER_BEAT_SECONDS = BEAT_SECONDS
    settings.SCHEDULER_FULL_CYCLE_BEATS = 12
    with use_clock(SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))) as simulated:
        assert isinstance(simulated, SimulatedClock)
        yield simulated


def beat(clock: SimulatedClock) -> dict[str, Any]:
    """One beat, SCHEDULER_BEAT_SECONDS after the last."""
    clock.advance(BEAT_SECONDS)
    return tasks.run_scheduling_cycle(trigger="beat")


def ran(outcome: dict[str, Any]) -> bool:
    return bool(outcome["committed"])


def settle(clock: SimulatedClock, settings: Any) -> None:
    """Lose every trigger from here on, and beat until the beat has nothing to do."""
    settings.SCHEDULER_TRIGGER = "none"
    for _ in range(4):
        if not ran(beat(clock)):
            return
    raise AssertionError("the beat kept running cycles on a cluster where nothing changes")


@pytest.fixture
def idle(clock: SimulatedClock, settings: Any) -> Cluster:
    """team-a runs `steady` (4 GPUs) on the two 8-GPU nodes; nothing else happens."""
    cluster = build_cluster()
    cluster.submit("steady", "team-a", gpus=4)
    services.converge()
    assert cluster.state("steady") == JobState.RUNNING
    settle(clock, settings)
    return cluster


def test_an_idle_cluster_runs_no_cycle_beat_after_beat(idle: Cluster, clock: SimulatedClock) -> None:
    records = CycleRecord.objects.count()
    for _ in range(10):
        with CaptureQueriesContext(connection) as queries:
            outcome = beat(clock)
        assert (outcome["ran"], outcome["refused"]) == (False, "unchanged")
        # The cheap read: the fence's times and whether any change is recorded; no snapshot.
        assert len(queries) <= 2, [query["sql"][:80] for query in queries.captured_queries]
    assert CycleRecord.objects.count() == records


CHANGES: dict[str, Callable[[Cluster], object]] = {
    "a job submitted": lambda cluster: cluster.submit("new", "team-b", gpus=2),
    "a job cancelled": lambda cluster: services.cancel_job(actor=None, job=cluster.jobs["steady"]),
    "a job finished": lambda cluster: services.finish_job(job=cluster.jobs["steady"]),
    "a job failed": lambda cluster: services.fail_job(job=cluster.jobs["steady"], message="out of memory"),
    "a node registered": lambda cluster: quota_services.create_node(actor=None, name="gpu-3", gpus=8),
    "a node's GPUs changed": lambda cluster: quota_services.update_node(
        actor=None, node=cluster.nodes["gpu-2"], gpus=12
    ),
    "a node cordoned": lambda cluster: quota_services.cordon_node(actor=None, node=cluster.nodes["gpu-2"]),
    "a node drained": lambda cluster: quota_services.drain_node(actor=None, node=cluster.nodes["gpu-1"]),
    "a node gone down": lambda cluster: quota_services.set_node_state(
        actor=None, node=cluster.nodes["gpu-1"], state=NodeState.NOT_READY
    ),
    "a quota scaled": lambda cluster: quota_services.scale_quota(actor=None, quota=cluster.quotas["team-b"], gpus=4),
    "a quota edited": lambda cluster: quota_services.update_quota(
        actor=None, quota=cluster.quotas["team-a"], min_runtime_seconds=30
    ),
    "a quota created": lambda cluster: quota_services.create_quota(actor=None, name="team-c", parent="Quota1", gpus=0),
    "a pool's placement changed": lambda cluster: quota_services.update_pool(
        actor=None, pool=cluster.pool, placement=PlacementPolicy.SPREAD
    ),
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
def test_each_kind_of_change_makes_the_next_beat_run_a_cycle(
    idle: Cluster, clock: SimulatedClock, settings: Any, change: Callable[[Cluster], object]
) -> None:
    assert not ran(beat(clock))
    change(idle)
    assert ran(beat(clock))
    settle(clock, settings)  # and then the cluster is idle again


def test_a_releasing_job_whose_grace_ends_makes_the_next_beat_place_its_beneficiary(
    clock: SimulatedClock, settings: Any
) -> None:
    cluster = build_cluster()
    cluster.submit("borrower", "team-a", gpus=8, replicas=2, grace_seconds=30)
    services.converge()
    cluster.submit("owner", "team-b", gpus=8)
    services.converge()
    assert (cluster.state("borrower"), cluster.state("owner")) == (JobState.RELEASING, JobState.PENDING)
    settle(clock, settings)
    clock.advance(30)
    assert get_executor().tick(clock.now()) == 1  # the grace period is over: the GPUs are let go
    assert ran(beat(clock))
    assert cluster.state("owner") == JobState.RUNNING


def test_a_min_runtime_running_out_while_a_job_waits_makes_the_beat_run_then(
    clock: SimulatedClock, settings: Any
) -> None:
    settings.SCHEDULER_FULL_CYCLE_BEATS = 100  # no safety-net cycle in the way
    cluster = build_cluster()
    quota_services.update_quota(actor=None, quota=cluster.quotas["team-a"], min_runtime_seconds=120)
    cluster.submit("borrower", "team-a", gpus=8, replicas=2)
    services.converge()
    started = clock.now()
    cluster.submit("owner", "team-b", gpus=8)
    services.converge()
    assert (cluster.state("borrower"), cluster.state("owner")) == (JobState.RUNNING, JobState.PENDING)
    settle(clock, settings)
    while (clock.now() - started).total_seconds() + BEAT_SECONDS < 120:
        assert not ran(beat(clock))  # nothing written, and the borrower still too young
    assert ran(beat(clock))  # 120 s after it started: the borrower may be reclaimed now
    assert cluster.state("borrower") in (JobState.RELEASING, JobState.PENDING)


def test_a_node_whose_agent_stops_beating_makes_the_next_beat_run_a_cycle(
    idle: Cluster, clock: SimulatedClock, settings: Any
) -> None:
    node = quota_services.create_node(actor=None, name="agent-1", gpus=8, executor=NodeExecutor.AGENT)
    settle(clock, settings)
    # No heartbeat ever (its creation stands for the last one): two minutes later it is lost.
    assert check_lost_nodes(node.created_at + timedelta(seconds=120)) == 1
    assert ran(beat(clock))


def test_a_full_cycle_still_runs_every_few_beats_whatever_was_recorded(idle: Cluster, clock: SimulatedClock) -> None:
    """The safety net: a change nobody recorded (a hand edit in the database) is seen at the latest
    SCHEDULER_FULL_CYCLE_BEATS beats after the last commit."""
    outcomes = [ran(beat(clock)) for _ in range(24)]
    assert outcomes.count(True) == 2
    assert outcomes.index(True) < 12
    assert changes.full_cycle_seconds() == 12 * BEAT_SECONDS


def test_a_cycle_that_decided_something_is_looked_at_once_more(idle: Cluster, clock: SimulatedClock) -> None:
    idle.submit("new", "team-b", gpus=2)
    first = beat(clock)
    assert [decision["kind"] for decision in first["decisions"]] == ["admit"]
    second = beat(clock)
    assert ran(second) and second["decisions"] == []
    assert not ran(beat(clock))
