"""The simulated executor writes in batches: one tick finishes every due job in one transaction,
with one event and one audit record each and one cycle request; a job that moved on between
the read and the write is skipped; a commit's admissions get their `started` events at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.models import AuditRecord
from scheduling import services, triggers
from scheduling.clock import SimulatedClock, use_clock
from scheduling.executors import SimulatedExecutor, get_executor
from scheduling.executors.base import Executor
from scheduling.models import Job, JobEvent, JobState, ReplicaPlacementRecord
from tests.scheduling.conftest import Cluster, build_cluster

pytestmark = pytest.mark.django_db

N = 6


def _running_cluster(clock: SimulatedClock, *, duration: float = 60, **fields: Any) -> Cluster:
    cluster = build_cluster()
    for number in range(N):
        cluster.submit(f"job-{number}", "team-a" if number % 2 else "team-b", gpus=2, duration=duration, **fields)
    services.converge()
    assert Job.objects.filter(state=JobState.RUNNING).count() == N
    return cluster


def test_the_simulated_executor_is_an_executor_with_a_batch_admission() -> None:
    executor = get_executor()
    assert isinstance(executor, Executor)
    assert hasattr(executor, "on_admitted_many")


def test_due_jobs_finish_in_one_tick_with_one_event_one_audit_record_and_one_cycle_request(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))
    with use_clock(clock):
        cluster = _running_cluster(clock)
        settings.SCHEDULER_TRIGGER = "none"
        asked: list[str] = []
        monkeypatch.setattr(triggers, "request_cycle_on_commit", lambda trigger: asked.append(trigger))
        audits_before = AuditRecord.objects.filter(action="job.finish").count()
        clock.advance(59)
        assert get_executor().tick(clock.now()) == 0
        clock.advance(1)
        with CaptureQueriesContext(connection) as queries:
            assert get_executor().tick(clock.now()) == N
        # Reads, one locked read and one UPDATE per revision group, one DELETE of placements,
        # one INSERT of events, one of audit records: not one transaction per job.
        assert len(queries) < 15, [q["sql"][:80] for q in queries.captured_queries]
        assert asked == ["finish"]
        for name in cluster.jobs:
            job = cluster.job(name)
            assert (job.state, job.allocated_gpus, job.running_replicas) == (JobState.SUCCEEDED, 0, 0)
            assert job.finished_at == clock.now()
            assert job.reason_message == "ran for its duration of 60 s"
            finished = list(JobEvent.objects.filter(job=job, kind="finished"))
            assert [(e.at, e.message) for e in finished] == [(clock.now(), "ran for its duration of 60 s")]
            record = AuditRecord.objects.get(action="job.finish", object_id=str(job.pk))
            assert record.actor is None and record.object_type == "job" and record.object_repr == name
            assert record.before is not None and record.after is not None
            assert (record.before["state"], record.after["state"]) == (JobState.RUNNING, JobState.SUCCEEDED)
            assert {k: v for k, v in record.before.items() if k != "state"} == {
                k: v for k, v in record.after.items() if k != "state"
            }
            assert record.before["name"] == name and record.before["gpus"] == 2
        assert AuditRecord.objects.filter(action="job.finish").count() == audits_before + N
        assert not ReplicaPlacementRecord.objects.exists()
        assert get_executor().tick(clock.now()) == 0  # nothing twice


def test_a_job_cancelled_or_changed_between_read_and_write_is_skipped(settings: Any) -> None:
    clock = SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))
    with use_clock(clock):
        cluster = _running_cluster(clock)
        settings.SCHEDULER_TRIGGER = "none"
        clock.advance(60)
        executor = SimulatedExecutor()
        read = list(Job.objects.filter(state=JobState.RUNNING).order_by("id"))
        services.cancel_job(actor=None, job=cluster.jobs["job-0"])
        Job.objects.filter(pk=cluster.jobs["job-1"].pk).update(revision=read[1].revision + 1)  # moved on
        assert executor.finish_jobs(read) == N - 2
        assert cluster.state("job-0") == JobState.CANCELLED
        assert not JobEvent.objects.filter(job=cluster.jobs["job-0"], kind="finished").exists()
        assert not AuditRecord.objects.filter(action="job.finish", object_id=str(cluster.jobs["job-0"].pk)).exists()
        assert cluster.state("job-1") == JobState.RUNNING  # finished by the next tick, as it is seen now
        assert [cluster.state(f"job-{n}") for n in range(2, N)] == [JobState.SUCCEEDED] * (N - 2)
        assert executor.tick(clock.now()) == 1
        assert cluster.state("job-1") == JobState.SUCCEEDED
        assert JobEvent.objects.filter(kind="finished").count() == N - 1


def test_grace_periods_over_release_in_one_tick_and_a_moved_on_job_is_skipped(settings: Any) -> None:
    clock = SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))
    with use_clock(clock):
        cluster = _running_cluster(clock, duration=3600, grace_seconds=30)
        settings.SCHEDULER_TRIGGER = "none"
        now = clock.now()
        Job.objects.filter(name__in=["job-0", "job-1", "job-2"]).update(
            state=JobState.RELEASING, evicted_at=now, release_at=now
        )
        Job.objects.filter(name="job-2").update(requeue=False)
        executor = SimulatedExecutor()
        rows = list(Job.objects.filter(state=JobState.RELEASING).values("id", "revision", "requeue", "grace_seconds"))
        services.cancel_job(actor=None, job=cluster.jobs["job-0"])
        assert executor.release_rows(rows, now) == 2
        assert cluster.state("job-0") == JobState.CANCELLED
        one = cluster.job("job-1")
        assert (one.state, one.preemptions, one.allocated_gpus) == (JobState.PENDING, 1, 0)
        assert JobEvent.objects.filter(job=one, kind="requeued").values_list("message", flat=True).get() == (
            "grace period of 30 s over"
        )
        two = cluster.job("job-2")
        assert (two.state, two.reason_code) == (JobState.FAILED, "preempted")
        assert two.reason_message == "preempted and not requeued (requeue is false): grace period of 30 s over"
        assert not ReplicaPlacementRecord.objects.filter(job_id__in=[one.pk, two.pk]).exists()
        assert executor.tick(now) == 0


def test_a_commits_admissions_get_their_started_events_in_one_insert(settings: Any) -> None:
    clock = SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))
    with use_clock(clock):
        cluster = build_cluster()
        settings.SCHEDULER_TRIGGER = "none"
        for number in range(N):
            cluster.submit(f"job-{number}", gpus=1)
        jobs = list(Job.objects.order_by("id"))
        Job.objects.filter(pk__in=[j.pk for j in jobs[1:]]).update(state=JobState.RUNNING, running_replicas=1)
        jobs = list(Job.objects.order_by("id"))
        with CaptureQueriesContext(connection) as queries:
            SimulatedExecutor().on_admitted_many(jobs)
        assert len(queries) == 1
        started = JobEvent.objects.filter(kind="started")
        assert sorted(started.values_list("job_id", flat=True)) == [j.pk for j in jobs[1:]]  # the pending one: none
        assert set(started.values_list("message", flat=True)) == {"1 replica(s) started (simulated)"}
        SimulatedExecutor().on_admitted(jobs[1])
        assert JobEvent.objects.filter(kind="started", job=jobs[1]).count() == 2


def test_the_jobs_one_commit_evicts_are_routed_to_their_executors_in_one_read_however_many() -> None:
    clock = SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))
    with use_clock(clock):
        _running_cluster(clock)
        running = list(Job.objects.filter(state=JobState.RUNNING))
        executor = get_executor()

        def queries_to_evict(jobs: list[Job]) -> int:
            with CaptureQueriesContext(connection) as queries:
                executor.on_evicted_many(jobs)
            return len(queries)

        assert queries_to_evict(running[:1]) == queries_to_evict(running) == 1


def test_a_commits_admissions_on_agent_nodes_read_only_the_job_ids(settings: Any) -> None:
    """The agent executor uses nothing of an admitted job but its id: the commit's read of the
    jobs for it asks for that column alone, not the whole rows (the drain through agents)."""
    from quotas.models import Node, NodeExecutor

    clock = SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))
    with use_clock(clock):
        cluster = build_cluster()
        Node.objects.update(executor=NodeExecutor.AGENT)
        settings.SCHEDULER_TRIGGER = "none"
        for number in range(N):
            cluster.submit(f"job-{number}", gpus=1)
        services.converge()  # placed on the agent nodes: what the commit hands the executor
        admitted = list(Job.objects.filter(state=JobState.RUNNING).values_list("id", flat=True))
        assert len(admitted) == N
        with CaptureQueriesContext(connection) as queries:
            get_executor().on_committed(admitted, [])
        reads = [query["sql"] for query in queries if 'FROM "scheduling_job"' in query["sql"]]
        assert len(reads) == 1
        assert reads[0].startswith('SELECT "scheduling_job"."id" FROM "scheduling_job"')
