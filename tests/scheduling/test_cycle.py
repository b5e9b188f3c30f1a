"""The cycle's promises under races and crashes: fenced, conditional, all or nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling import commit, cycle, engine, services, tasks
from scheduling.clock import get_clock
from scheduling.cycle import decide_and_commit
from scheduling.lock import CycleLease, RedisCycleLock, issue_token
from scheduling.models import CycleRecord, Job, JobEvent, JobState, ReplicaPlacementRecord, SchedulerFence
from scheduling.selectors import build_snapshot
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db


def lease() -> CycleLease:
    return CycleLease(token=issue_token(), holder="test", backend="test")


def engine_then(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], object]) -> None:
    """The real engine decides; then, before the commit, something else changes the database."""
    real = engine.schedule

    def schedule_and_race(snapshot: engine.Snapshot) -> engine.CycleResult:
        result = real(snapshot)
        meanwhile()
        return result

    monkeypatch.setattr("scheduling.cycle.engine.schedule", schedule_and_race)


def test_a_decision_about_a_job_that_moved_on_is_skipped(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster.submit("gone", gpus=4)
    cluster.submit("stays", "team-b", gpus=4)
    engine_then(monkeypatch, lambda: services.cancel_job(actor=None, job=cluster.jobs["gone"]))
    outcome = decide_and_commit(lease=lease(), trigger="test", now=get_clock().now())
    assert outcome.committed and outcome.skipped == 1
    assert [d["job"] for d in outcome.decisions] == ["stays"]
    assert cluster.state("gone") == JobState.CANCELLED
    assert not ReplicaPlacementRecord.objects.filter(job=cluster.jobs["gone"]).exists()
    # Another process (the manual cycle in the web) reads the same cycle back from its record.
    assert outcome.record_id is not None
    record = CycleRecord.objects.get(pk=outcome.record_id)
    assert cycle.CycleOutcome.from_record(record).as_dict() | {"duration_ms": 0} == outcome.as_dict() | {
        "duration_ms": 0
    }


def test_a_holder_with_a_stale_token_is_refused_and_writes_nothing(cluster: Cluster) -> None:
    cluster.submit("job", gpus=4)
    stale = lease()
    fresh = lease()
    assert decide_and_commit(lease=fresh, trigger="fresh", now=get_clock().now()).committed
    services.cancel_job(actor=None, job=cluster.jobs["job"])
    cluster.submit("later", gpus=4)
    refused = decide_and_commit(lease=stale, trigger="stale", now=get_clock().now())
    assert (refused.committed, refused.refused.split(":")[0]) == (False, "stale_token")
    assert cluster.state("later") == JobState.PENDING
    assert CycleRecord.objects.filter(lock_token=stale.token).count() == 0
    assert SchedulerFence.objects.get().token == fresh.token


def test_a_cycle_whose_snapshot_predates_another_commit_is_refused(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two cycles forced to overlap: the one that commits second saw a world that is gone."""
    cluster.submit("a", gpus=8)
    first, second = lease(), lease()

    def other_cycle_commits() -> None:
        monkeypatch.undo()
        assert decide_and_commit(lease=second, trigger="other", now=get_clock().now()).committed

    engine_then(monkeypatch, other_cycle_commits)
    outcome = decide_and_commit(lease=first, trigger="overlapping", now=get_clock().now())
    assert (outcome.committed, outcome.refused.split(":")[0]) == (False, "stale_token")
    # The same with the newer token reading first: its snapshot is stale, not its token.
    cluster.submit("b", "team-b", gpus=8)
    third, fourth = lease(), lease()

    def older_token_commits() -> None:
        monkeypatch.undo()
        assert decide_and_commit(lease=third, trigger="other", now=get_clock().now()).committed

    engine_then(monkeypatch, older_token_commits)
    outcome = decide_and_commit(lease=fourth, trigger="overlapping", now=get_clock().now())
    assert (outcome.committed, outcome.refused.split(":")[0]) == (False, "stale_snapshot")
    assert Job.objects.filter(state=JobState.RUNNING).count() == 2
    assert ReplicaPlacementRecord.objects.count() == 2


def test_a_worker_killed_mid_commit_leaves_nothing_half_applied(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.submit("a", gpus=4)
    cluster.submit("b", "team-b", gpus=4)
    real_flush = commit._Commit._flush_admissions

    def dies_after_the_admissions(self: commit._Commit) -> None:
        # The admissions (jobs, placements, events) are written; the reasons and the record are not.
        real_flush(self)
        assert Job.objects.filter(state=JobState.RUNNING).count() == 2
        raise SystemExit("worker killed")

    monkeypatch.setattr(commit._Commit, "_flush_admissions", dies_after_the_admissions)
    with pytest.raises(SystemExit):
        services.run_cycle(trigger="doomed")
    assert Job.objects.filter(state=JobState.RUNNING).count() == 0
    assert not ReplicaPlacementRecord.objects.exists()
    assert not CycleRecord.objects.exists()
    monkeypatch.undo()
    services.converge()
    assert {cluster.state("a"), cluster.state("b")} == {JobState.RUNNING}


def test_a_cycle_task_delivered_twice_does_no_harm(cluster: Cluster) -> None:
    cluster.submit("a", gpus=4, replicas=2)
    first = tasks.run_scheduling_cycle(trigger="delivery")
    second = tasks.run_scheduling_cycle(trigger="delivery")
    assert [d["kind"] for d in first["decisions"]] == ["admit"]
    assert second["committed"] and second["decisions"] == []
    assert ReplicaPlacementRecord.objects.count() == 2
    assert JobEvent.objects.filter(kind="admitted").count() == 1


def test_only_one_cycle_holds_the_lock(cluster: Cluster, settings: Any) -> None:
    settings.SCHEDULER_LOCK = "redis"
    held = RedisCycleLock()
    lease_held = held.acquire()
    assert lease_held is not None
    try:
        outcome = services.run_cycle(trigger="second", wait_seconds=0)
        assert (outcome.ran, outcome.refused) == (False, "lock_busy")
        assert held.holder() == lease_held.holder
    finally:
        held.release(lease_held)
    assert held.holder() is None
    assert services.run_cycle(trigger="after", wait_seconds=0).ran


def test_a_lock_is_only_released_by_its_holder() -> None:
    lock = RedisCycleLock(ttl_seconds=0.05)
    first = lock.acquire()
    assert first is not None
    import time

    time.sleep(0.1)  # the lease expires; another holder takes over
    second = lock.acquire()
    assert second is not None and second.token > first.token
    lock.release(first)
    assert lock.holder() == second.holder
    lock.release(second)


def test_the_snapshot_takes_the_same_number_of_queries_for_any_number_of_jobs(cluster: Cluster) -> None:
    def queries_for_snapshot() -> int:
        with CaptureQueriesContext(connection) as captured:
            build_snapshot(get_clock().now())
        return len(captured)

    for number in range(3):
        cluster.submit(f"small-{number}", gpus=1)
    services.converge()
    few = queries_for_snapshot()
    for number in range(40):
        cluster.submit(f"more-{number}", "team-b", gpus=0.5)
    services.converge()
    assert queries_for_snapshot() == few <= 6
