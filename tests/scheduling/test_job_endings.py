"""finish_jobs ends many jobs in a few statements, writing what ending them one by one wrote."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import transaction
from django.db.models import F
from django.forms.models import model_to_dict

from quotas import audit
from quotas.models import AuditRecord
from scheduling import events, job_endings, lifecycle, services
from scheduling.clock import SimulatedClock, use_clock
from scheduling.models import (
    ACTIVE_STATES,
    Job,
    JobEvent,
    JobEventKind,
    JobState,
    ReplicaPlacementRecord,
    SchedulingChange,
)
from tests.scheduling.conftest import build_cluster

pytestmark = pytest.mark.django_db

START = datetime(2025, 1, 1, tzinfo=UTC)


def _one_by_one(endings: Sequence[services.Ending]) -> list[Job]:
    """How finish_jobs ended jobs before it wrote them in bulk: per job a locked read,
    `lifecycle.end_job` (an update, a delete, an event, a re-read) and an audit record."""
    ended: list[Job] = []
    now = START
    with transaction.atomic():
        for ending in endings:
            locked = Job.objects.select_for_update().get(pk=ending.job_id)
            before = lifecycle.job_summary(locked)
            if not lifecycle.end_job(
                job=locked,
                final_state=JobState.SUCCEEDED if ending.succeeded else JobState.FAILED,
                event_kind=JobEventKind.FINISHED if ending.succeeded else JobEventKind.FAILED,
                now=now,
                allowed_from=(JobState.RUNNING, JobState.RELEASING) if ending.succeeded else ACTIVE_STATES,
                message=ending.message or ("finished" if ending.succeeded else "failed"),
            ):
                continue
            audit.record(
                actor=None,
                action="job.finish" if ending.succeeded else "job.fail",
                object_type="job",
                object_id=locked.pk,
                object_repr=locked.name,
                before=before,
                after=lifecycle.job_summary(locked),
            )
            ended.append(locked)
    return ended


def _written(end: Callable[[], list[Job]], event_after: int, audit_after: int) -> dict[str, Any]:
    """What `end` leaves in the database and hands back, rolled back afterwards."""
    with transaction.atomic():
        ended = end()
        written = {
            "ended": [model_to_dict(job) for job in ended],
            "live": [events.job_event(job) for job in ended],
            "jobs": [model_to_dict(job) for job in Job.objects.order_by("pk")],
            "events": list(
                JobEvent.objects.filter(pk__gt=event_after)
                .order_by("pk")
                .values_list("job_id", "kind", "at", "rule", "beneficiary_id", "message")
            ),
            "audit": list(
                AuditRecord.objects.filter(pk__gt=audit_after)
                .order_by("pk")
                .values_list("actor_id", "action", "object_type", "object_id", "object_repr", "before", "after")
            ),
            "placements": sorted(ReplicaPlacementRecord.objects.values_list("job_id", "node_id", "devices")),
        }
        transaction.set_rollback(True)
    return written


def test_many_ends_at_once_take_a_few_statements_and_write_what_one_by_one_wrote(
    django_assert_max_num_queries: Any, django_capture_on_commit_callbacks: Any, monkeypatch: Any
) -> None:
    with use_clock(SimulatedClock(START)):
        cluster = build_cluster()
        running = [cluster.submit(f"run-{number}", "team-a" if number % 2 else "team-b") for number in range(14)]
        draining = cluster.submit("draining", gpus=1)
        waiting = cluster.submit("waiting", gpus=8, replicas=3)
        gone = cluster.submit("gone", gpus=1)
        services.converge()
        services.cancel_job(actor=None, job=gone)
        # A job whose eviction grace runs: it may still end by itself (succeeded), as a releasing job.
        Job.objects.filter(pk=draining.pk).update(
            state=JobState.RELEASING, revision=F("revision") + 1, release_at=START + timedelta(seconds=30)
        )
        assert {job.state for job in Job.objects.filter(pk__in=[job.pk for job in running])} == {JobState.RUNNING}
        assert Job.objects.get(pk=waiting.pk).state == JobState.PENDING

        endings = [
            *(
                services.Ending(job.pk, number % 3 != 0, f"replica 0 exited with {number % 3}" if number % 4 else "")
                for number, job in enumerate(running)
            ),
            services.Ending(draining.pk, True, "every replica exited with code 0"),
            services.Ending(waiting.pk, False, "image not found"),
            services.Ending(gone.pk, True, "too late"),  # cancelled meanwhile: left alone
            services.Ending(running[0].pk, True, "reported twice"),  # ends once, with its first report
        ]
        event_after = JobEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        audit_after = AuditRecord.objects.order_by("-pk").values_list("pk", flat=True).first() or 0

        one_by_one = _written(lambda: _one_by_one(endings), event_after, audit_after)

        def at_once() -> list[Job]:
            # Whatever their number: one locked read, an update per state seen, one delete, one
            # insert each for events and audit records, the cycle's note, and the savepoint.
            with django_assert_max_num_queries(10):
                return services.finish_jobs(endings)

        bulk = _written(at_once, event_after, audit_after)

    assert [row["name"] for row in bulk["ended"]] == [*(job.name for job in running), "draining", "waiting"]
    assert len(bulk["events"]) == len(bulk["audit"]) == len(running) + 2
    assert bulk == one_by_one

    # One cycle note and one live publish for the batch, after commit.
    published: list[list[dict[str, Any]]] = []

    def publish_many(batch: Sequence[dict[str, Any]]) -> bool:
        published.append(list(batch))  # what would go to Redis
        return True

    monkeypatch.setattr(events, "publish_many", publish_many)
    notes = SchedulingChange.objects.count()
    with django_capture_on_commit_callbacks() as callbacks:
        ended = services.finish_jobs(endings)
    assert SchedulingChange.objects.count() == notes + 1
    assert len(callbacks) == 2
    for callback in callbacks:
        callback()
    assert published == [[events.job_event(job) for job in ended]]
    assert {event["state"] for event in published[0]} == {JobState.SUCCEEDED, JobState.FAILED}


def _released_one_by_one(releases: Sequence[job_endings.Release]) -> list[int]:
    """How releasing jobs let go of their GPUs before release_jobs: `lifecycle.release_job` each."""
    released = []
    with transaction.atomic():
        for release in releases:
            if lifecycle.release_job(
                job_id=release.job_id,
                seen_state=release.seen_state,
                seen_revision=release.seen_revision,
                requeue=release.requeue,
                now=START,
                message=release.message,
            ):
                released.append(release.job_id)
    return sorted(set(released))


def _cancelled_one_by_one(cancels: Sequence[tuple[int, int]], why: str) -> list[int]:
    """How cancelled jobs on real hosts ended before finish_cancels: `lifecycle.finish_cancel` each."""
    with transaction.atomic():
        done = [
            job_id
            for job_id, revision in cancels
            if lifecycle.finish_cancel(job_id=job_id, seen_revision=revision, now=START, why=why)
        ]
    return sorted(set(done))


def _releasing_world() -> tuple[list[Job], list[Job], Job]:
    """Running jobs, some evicted (releasing, grace running), some cancelled on agent nodes
    (releasing, `cancelling`, the reason message kept), and a pending one."""
    cluster = build_cluster(node_gpus=(8, 8, 8))
    jobs = [cluster.submit(f"run-{number}", "team-a" if number % 2 else "team-b", gpus=2) for number in range(10)]
    waiting = cluster.submit("waiting", gpus=8, replicas=4)
    services.converge()
    running = list(Job.objects.filter(pk__in=[job.pk for job in jobs], state=JobState.RUNNING).order_by("pk"))
    evicted, cancelling = running[:5], running[5:]
    for job in evicted:
        Job.objects.filter(pk=job.pk).update(
            state=JobState.RELEASING, revision=F("revision") + 1, release_at=START + timedelta(seconds=30)
        )
    for number, job in enumerate(cancelling):
        Job.objects.filter(pk=job.pk).update(
            state=JobState.RELEASING,
            revision=F("revision") + 1,
            reason_code=lifecycle.CANCELLING,
            reason_message="cancelled by dana" if number % 2 else "",
        )
    return (
        list(Job.objects.filter(pk__in=[j.pk for j in evicted]).order_by("pk")),
        list(Job.objects.filter(pk__in=[j.pk for j in cancelling]).order_by("pk")),
        Job.objects.get(pk=waiting.pk),
    )


def test_many_releases_at_once_take_a_few_statements_and_write_what_one_by_one_wrote(
    django_assert_max_num_queries: Any,
) -> None:
    with use_clock(SimulatedClock(START)):
        evicted, cancelling, _waiting = _releasing_world()
        releases = [
            *(
                job_endings.Release(job.pk, job.state, job.revision, number % 2 == 0, f"replica gone ({number})")
                for number, job in enumerate(evicted)
            ),
            job_endings.Release(cancelling[0].pk, JobState.RUNNING, cancelling[0].revision, True, "stale state"),
            job_endings.Release(evicted[1].pk, evicted[1].state, evicted[1].revision - 1, True, "stale revision"),
            job_endings.Release(evicted[0].pk, evicted[0].state, evicted[0].revision, True, "reported twice"),
        ]
        event_after = JobEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        audit_after = AuditRecord.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        answers: dict[str, list[int]] = {}

        def one_by_one() -> list[Job]:
            answers["one"] = _released_one_by_one(releases)
            return []

        def at_once() -> list[Job]:
            # Whatever their number: the locked read, an update per state seen, the placements'
            # delete, the events' insert, and the savepoint.
            with django_assert_max_num_queries(7), transaction.atomic():
                answers["bulk"] = job_endings.release_jobs(releases, START)
            return []

        before = _written(one_by_one, event_after, audit_after)
        after = _written(at_once, event_after, audit_after)

    assert answers["bulk"] == answers["one"] == [job.pk for job in evicted]
    assert after == before


def test_many_cancels_finished_at_once_write_what_one_by_one_wrote(django_assert_max_num_queries: Any) -> None:
    with use_clock(SimulatedClock(START)):
        evicted, cancelling, _waiting = _releasing_world()
        why = "its processes stopped; devices freed"
        cancels = [
            *((job.pk, job.revision) for job in cancelling),
            (evicted[0].pk, evicted[0].revision),  # releasing for an eviction, not a cancel: left alone
            (cancelling[1].pk, cancelling[1].revision - 1),  # seen at an older revision: left alone
        ]
        event_after = JobEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        answers: dict[str, list[int]] = {}

        def one_by_one() -> list[Job]:
            answers["one"] = _cancelled_one_by_one(cancels, why)
            return []

        def at_once() -> list[Job]:
            with django_assert_max_num_queries(6), transaction.atomic():
                answers["bulk"] = job_endings.finish_cancels(cancels, START, why)
            return []

        before = _written(one_by_one, event_after, 0)
        after = _written(at_once, event_after, 0)

    assert answers["bulk"] == answers["one"] == [job.pk for job in cancelling]
    assert after == before
    assert "cancelled by dana; its processes stopped" in str(after["events"])
