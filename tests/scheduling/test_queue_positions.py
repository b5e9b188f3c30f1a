"""A pending job's queue position alone is written at most every SCHEDULER_POSITION_REFRESH_SECONDS
(scheduling.pending_reasons.positions_held_until); a new reason is written by the cycle that makes it.
Held-back positions wake the beat when they fall due, so a queue that went quiet is not left
showing old places."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduling import services, tasks
from scheduling.clock import SimulatedClock, use_clock
from scheduling.models import JobState, SchedulerFence
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db

REFRESH_SECONDS = 2.0


@pytest.fixture
def clock(settings: Any) -> Iterator[SimulatedClock]:
    settings.SCHEDULER_POSITION_REFRESH_SECONDS = REFRESH_SECONDS
    with use_clock(SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))) as simulated:
        assert isinstance(simulated, SimulatedClock)
        yield simulated


@pytest.fixture
def queue(cluster: Cluster, clock: SimulatedClock) -> Cluster:
    """Both nodes full; three 8-GPU jobs waiting in team-a's queue, at places 1, 2 and 3."""
    cluster.submit("filler-a", "team-a", gpus=8)
    cluster.submit("filler-b", "team-b", gpus=8)
    for name in ("first", "second", "third"):
        cluster.submit(name, "team-a", gpus=8)
    services.converge()
    assert places(cluster) == {"first": 1, "second": 2, "third": 3}
    return cluster


def places(cluster: Cluster) -> dict[str, int | None]:
    names = [name for name in ("first", "second", "third") if cluster.state(name) == JobState.PENDING]
    return {name: cluster.job(name).shown_reason[2] for name in names}


def test_a_move_in_the_queue_alone_is_written_once_the_refresh_is_due(queue: Cluster, clock: SimulatedClock) -> None:
    clock.advance(REFRESH_SECONDS / 4)
    services.cancel_job(actor=None, job=queue.job("first"))
    services.converge()
    assert places(queue) == {"second": 2, "third": 3}  # moved up, not written yet
    fence = SchedulerFence.objects.get()
    assert fence.positions_at is not None and fence.wake_at == fence.positions_at + timedelta(seconds=REFRESH_SECONDS)

    clock.advance(REFRESH_SECONDS)
    services.converge()
    assert places(queue) == {"second": 1, "third": 2}


def test_the_beat_writes_held_positions_when_they_fall_due(
    queue: Cluster, clock: SimulatedClock, settings: Any
) -> None:
    clock.advance(REFRESH_SECONDS / 4)
    services.cancel_job(actor=None, job=queue.job("first"))
    services.converge()
    settings.SCHEDULER_TRIGGER = "none"  # nothing else happens: only the beat can write them
    outcome = tasks.run_scheduling_cycle(trigger="beat")
    assert (outcome["ran"], places(queue)) == (False, {"second": 2, "third": 3})
    clock.advance(REFRESH_SECONDS)
    outcome = tasks.run_scheduling_cycle(trigger="beat")
    assert outcome["committed"] and places(queue) == {"second": 1, "third": 2}


def test_a_new_reason_is_written_at_once_with_its_position(queue: Cluster, clock: SimulatedClock) -> None:
    clock.advance(REFRESH_SECONDS / 4)
    queue.submit("small", "team-a", gpus=1)
    services.converge()
    code, message, place = queue.job("small").shown_reason
    assert code and message and place == 4


def test_with_no_refresh_interval_every_move_is_written(
    queue: Cluster, clock: SimulatedClock, settings: Any
) -> None:
    settings.SCHEDULER_POSITION_REFRESH_SECONDS = 0
    services.cancel_job(actor=None, job=queue.job("first"))
    services.converge()
    assert places(queue) == {"second": 1, "third": 2}
