"""The default executor: jobs "run" for their duration, on the real clock or on a simulated one.

An admitted job starts at once; a job with a duration finishes by itself once the clock passes
started_at + duration; an evicted job keeps its GPUs for grace_seconds, then goes back to the
queue (or fails, when it asked not to be requeued). Nothing here sleeps: `tick` looks at the
clock, so `simulate` can jump hours ahead and the console's beat can tick every second.

Everything is written in batches: one tick finishes every due job in one transaction (one
conditional UPDATE per group of jobs seen at the same revision with the same message, events
and audit records with `bulk_create`, one cycle request), and the `started` events of a
commit's admissions are one insert (`scheduling.bulk`). A job that moved on since it was read (cancelled,
evicted, moved: its state or revision differs) is left alone, as `finish_job` and
`lifecycle.release_job` would leave it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import F

from quotas import audit
from quotas.models import NodeExecutor
from scheduling import bulk, events, lifecycle, triggers
from scheduling.clock import get_clock
from scheduling.models import Job, JobEvent, JobEventKind, JobState, ReplicaPlacementRecord

logger = logging.getLogger(__name__)

# Rows per statement (ids in one IN list, objects in one INSERT).
_BATCH = 1000
# Jobs with a replica on a real node (agent, Slurm) belong to its executor (`executors.PerNodeExecutor`).
_ON_AGENT_NODES = ReplicaPlacementRecord.objects.exclude(node__executor=NodeExecutor.SIMULATED).values("job_id")


class _Raced(Exception):
    """A row locked for the batch was not updated: roll the batch back, the next tick retries."""


def _chunks(ids: Sequence[int]) -> Iterable[list[int]]:
    for start in range(0, len(ids), _BATCH):
        yield list(ids[start : start + _BATCH])


def _update_as_seen(
    groups: dict[tuple[Any, ...], list[int]],
    *,
    seen_state: str,
    values_for: Callable[[tuple[Any, ...]], dict[str, Any]],
) -> list[int]:
    """For each group (its key starts with the revision seen), lock the jobs still in `seen_state`
    at that revision and update them with `values_for(key)`; returns the ids changed."""
    changed: list[int] = []
    for key, ids in groups.items():
        revision = key[0]
        for chunk in _chunks(sorted(ids)):
            still = list(
                Job.objects.select_for_update()
                .filter(pk__in=chunk, state=seen_state, revision=revision)
                .order_by("id")
                .values_list("id", flat=True)
            )
            if not still:
                continue
            count = Job.objects.filter(pk__in=still, state=seen_state, revision=revision).update(**values_for(key))
            if count != len(still):
                raise _Raced(f"{len(still)} job(s) locked, {count} updated")
            changed.extend(still)
    return changed


def _delete_placements(job_ids: Sequence[int]) -> None:
    for chunk in _chunks(job_ids):
        ReplicaPlacementRecord.objects.filter(job_id__in=chunk).delete()


class SimulatedExecutor:
    name = "simulated"
    # All that on_admitted_many and on_evicted read of a job (`PerNodeExecutor.on_committed`).
    job_fields = ("id", "state", "running_replicas")

    def on_admitted(self, job: Job) -> None:
        self.on_admitted_many([job])

    def on_admitted_many(self, jobs: Sequence[Job]) -> None:
        at = get_clock().now()
        bulk.insert(
            JobEvent,
            ("job_id", "kind", "at", "message"),
            [
                (job.pk, JobEventKind.STARTED.value, at, f"{job.running_replicas} replica(s) started (simulated)")
                for job in jobs
                if job.state == JobState.RUNNING
            ],
        )

    def on_evicted(self, job: Job) -> None:
        # A real host would send SIGTERM now; here the grace period is only a time on the clock.
        return None

    def tick(self, now: datetime) -> int:
        return self.release_due(now) + self.finish_due(now)

    def release_due(self, now: datetime) -> int:
        """Evicted jobs whose grace period is over let go of their GPUs (all in one transaction)."""
        due = list(
            Job.objects.filter(state=JobState.RELEASING, release_at__lte=now)
            .exclude(pk__in=_ON_AGENT_NODES)  # their agents report when the processes are gone
            .values("id", "revision", "requeue", "grace_seconds")
        )
        return self.release_rows(due, now)

    def release_rows(self, rows: Sequence[Mapping[str, Any]], now: datetime) -> int:
        """Release the jobs of `rows` (id, revision, requeue, grace_seconds as read) that are
        still releasing at that revision; the others are skipped. Returns how many were released."""
        if not rows:
            return 0
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for row in rows:
            groups[(row["revision"], bool(row["requeue"]), float(row["grace_seconds"]))].append(row["id"])

        def message(key: tuple[Any, ...]) -> str:
            return f"grace period of {key[2]:g} s over"

        def values_for(key: tuple[Any, ...]) -> dict[str, Any]:
            values = lifecycle.released_values(requeue=key[1], now=now, message=message(key))
            return {"revision": F("revision") + 1, "preemptions": F("preemptions") + 1, **values}

        key_of = {job_id: key for key, ids in groups.items() for job_id in ids}
        try:
            with transaction.atomic():
                released = _update_as_seen(groups, seen_state=JobState.RELEASING, values_for=values_for)
                if not released:
                    return 0
                _delete_placements(released)
                new_events = []
                for job_id in released:
                    kind, event_message = lifecycle.released_event(
                        requeue=key_of[job_id][1], message=message(key_of[job_id])
                    )
                    new_events.append(JobEvent(job_id=job_id, kind=kind, at=now, message=event_message))
                JobEvent.objects.bulk_create(new_events, batch_size=_BATCH)
                triggers.request_cycle_on_commit("released")
        except _Raced:
            logger.warning(
                "release of %d job(s) rolled back: a job changed under the lock; next tick retries", len(rows)
            )
            return 0
        return len(released)

    def finish_due(self, now: datetime) -> int:
        """Jobs with a duration end by themselves once it has passed (all in one transaction)."""

        # The condition (revision), the message (duration) and what the audit record keeps.
        candidates = (
            Job.objects.filter(state=JobState.RUNNING, duration__isnull=False, started_at__isnull=False)
            .exclude(pk__in=_ON_AGENT_NODES)  # AGENT.md: a duration applies to simulated nodes only
            .only("id", "revision", "started_at", "duration", *lifecycle.JOB_SUMMARY_FIELDS)
        )
        due = [
            job
            for job in candidates
            if job.started_at is not None
            and job.duration is not None
            and job.started_at + timedelta(seconds=job.duration) <= now
        ]
        return self.finish_jobs(due)

    def finish_jobs(self, jobs: Sequence[Job]) -> int:
        """Finish (succeeded) the jobs as read, each only while still running at the revision read:
        what `finish_job` writes, for all of them at once. Returns how many finished."""

        if not jobs:
            return 0
        now = get_clock().now()
        by_id = {job.pk: job for job in jobs}
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        for job in jobs:
            groups[(job.revision, f"ran for its duration of {job.duration:g} s")].append(job.pk)

        def values_for(key: tuple[Any, ...]) -> dict[str, Any]:
            return {
                "state": JobState.SUCCEEDED,
                "revision": F("revision") + 1,
                "allocated_gpus": 0,
                "running_replicas": 0,
                "finished_at": now,
                "release_at": None,
                "evicted_at": None,
                "beneficiary": None,
                "reason_code": "",
                "reason_message": key[1],
            }

        message_of = {job_id: key[1] for key, ids in groups.items() for job_id in ids}
        try:
            with transaction.atomic():
                finished = _update_as_seen(groups, seen_state=JobState.RUNNING, values_for=values_for)
                if not finished:
                    return 0
                _delete_placements(finished)
                JobEvent.objects.bulk_create(
                    [
                        JobEvent(job_id=job_id, kind=JobEventKind.FINISHED, at=now, message=message_of[job_id])
                        for job_id in finished
                    ],
                    batch_size=_BATCH,
                )
                records = []
                published = []
                for job_id in finished:
                    job = by_id[job_id]
                    before = lifecycle.job_summary(job)
                    before["state"] = JobState.RUNNING
                    after = {**before, "state": JobState.SUCCEEDED}
                    records.append(
                        audit.build(
                            actor=None,
                            action="job.finish",
                            object_type="job",
                            object_id=job_id,
                            object_repr=job.name,
                            before=before,
                            after=after,
                        )
                    )
                    published.append(events.job_event(job, JobState.SUCCEEDED))
                audit.record_all(records)
                triggers.request_cycle_on_commit("finish")
                transaction.on_commit(lambda: events.publish_many(published))
        except _Raced:
            logger.warning(
                "finish of %d job(s) rolled back: a job changed under the lock; next tick retries", len(jobs)
            )
            return 0
        return len(finished)


__all__ = ["SimulatedExecutor"]
