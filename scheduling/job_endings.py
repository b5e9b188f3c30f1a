"""How a job ends before or after it ran: cancelled by a person, finished or failed as its executor
reports, released when its node goes down.

Each runs in one transaction with an audit record (a node going down leaves the job's events), and
asks for a cycle after commit: the freed GPUs go to the queue.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from quotas import audit
from quotas import hooks as quota_hooks
from scheduling import bulk, lifecycle, triggers
from scheduling.clock import get_clock
from scheduling.job_writes import Actor, _publish_on_commit
from scheduling.mentions import preview_as_seen
from scheduling.models import (
    ACTIVE_STATES,
    FINAL_STATES,
    Job,
    JobEvent,
    JobEventKind,
    JobState,
    ReplicaPlacementRecord,
)
from workspaces.permissions import can, denial_reason


@dataclass(frozen=True, slots=True)
class DryRun:
    """The answer to a dry-run action: API.md's `{valid, errors, preview}`."""

    valid: bool
    errors: dict[str, list[str]]
    preview: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "errors": self.errors, "preview": self.preview}


def preview_cancel_job(*, actor: Actor, job: Job) -> DryRun:
    """`cancel_job` in a rolled-back transaction: what the next cycle would then admit.

    A job that is no longer live is refused with ValidationError, as `cancel_job` refuses it. The
    jobs it names are named as the actor may learn of them (scheduling.mentions): the freed GPUs
    may go to another workspace's job, which is then only its quota, workspace and GPUs.
    """
    cancel = _cancel_job_change(actor=actor, job=job)
    with transaction.atomic():
        cancel()
        preview = DryRun(valid=True, errors={}, preview=preview_as_seen(actor, quota_hooks.preview()))
        # The audit record and the after-commit cycle and events go with the rollback.
        transaction.set_rollback(True)
    return preview


def cancel_job(*, actor: Actor, job: Job) -> Job:
    """The owner, the workspace's operators and admins, and platform admins may cancel; GPUs are freed at once."""
    return _cancel_job_change(actor=actor, job=job)()


def _cancel_job_change(*, actor: Actor, job: Job) -> Callable[[], Job]:
    if actor is not None and not can(actor, "manage", job):
        raise PermissionDenied(denial_reason(actor, "manage", job))

    def apply() -> Job:
        now = get_clock().now()
        with transaction.atomic():
            locked = Job.objects.select_for_update().get(pk=job.pk)
            before = lifecycle.job_summary(locked)
            if not lifecycle.end_job(
                job=locked,
                final_state=JobState.CANCELLED,
                event_kind=JobEventKind.CANCELLED,
                now=now,
                allowed_from=ACTIVE_STATES,
                message=f"cancelled by {actor.get_username() if actor is not None else 'the scheduler'}",
            ):
                raise ValidationError(
                    {"state": f"job {locked.name} is already {locked.state}; only live jobs can be cancelled"}
                )
            audit.record(
                actor=actor,
                action="job.cancel",
                object_type="job",
                object_id=locked.pk,
                object_repr=locked.name,
                before=before,
                after=lifecycle.job_summary(locked),
            )
            triggers.request_cycle_on_commit("cancel")
            _publish_on_commit(locked)
        return locked

    return apply


def finish_job(*, job: Job, succeeded: bool = True, message: str = "") -> Job:
    """An executor reports that a running (or releasing) job ended by itself."""
    now = get_clock().now()
    with transaction.atomic():
        ended = _end_by_themselves([Ending(job.pk, succeeded, message)], now)
        if not ended:
            state = Job.objects.values_list("state", flat=True).get(pk=job.pk)
            raise ValidationError(
                {"state": f"job {job.name} is {state}; only a running job can {'finish' if succeeded else 'fail'}"}
            )
        triggers.request_cycle_on_commit("finish" if succeeded else "fail")
        _publish_on_commit(*ended)
    return ended[0]


@dataclass(frozen=True, slots=True)
class Ending:
    """One job's end as its executor reports it (`finish_jobs`)."""

    job_id: int
    succeeded: bool
    message: str


def finish_jobs(endings: Sequence[Ending]) -> list[Job]:
    """`finish_job` for many jobs at once, as an executor that learns of many ends in one read
    (the Slurm executor's squeue, an agent's beat) reports them: one transaction, one cycle
    request and one live publish for them all, and a few statements whatever their number. A job
    that moved on meanwhile (cancelled) is left as it is and not in the answer, which holds the
    jobs ended, in `endings`' order.

    Inside a caller's transaction (an agent's beat) it takes no savepoint of its own (two round
    trips a beat): none of its callers goes on after an error of it, which rolls back the whole."""
    if not endings:
        return []
    now = get_clock().now()
    with transaction.atomic(savepoint=False):
        ended = _end_by_themselves(endings, now)
        if ended:
            triggers.request_cycle_on_commit("finish")
            _publish_on_commit(*ended)
    return ended


# Rows per statement (the locking read, the placements' delete): a few thousand parameters each.
_BATCH = 1000
_EVENT_COLUMNS = ("job_id", "kind", "at", "rule", "beneficiary_id", "message")
_FINAL_COLUMNS = ("state", "finished_at", "reason_message")


def _end_by_themselves(endings: Sequence[Ending], now: datetime) -> list[Job]:
    """The jobs that ended (audited, in `endings`' order), inside the caller's transaction; a job
    no longer one that can end so is left out. What `lifecycle.end_job` and an audit record per
    job write, in a few statements for them all: a drain of short jobs ended them one at a time
    with a locked read, an update, a delete, an event, a re-read and an audit record each, about
    40 ms a job on the loaded test machine (benchmarks/slurm_drain.py)."""
    ids = {ending.job_id for ending in endings}
    locked = _locked(ids)
    missing = ids - set(locked)
    if missing:
        # As the per-job read did: an executor never reports a job that does not exist.
        raise Job.DoesNotExist(f"no job with id {min(missing)}")

    ended: list[Job] = []
    # The update's rows grouped by the state each job was seen in (one statement per state).
    rows_by_state: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    events: list[tuple[int, str, datetime, str, int | None, str]] = []
    records = []
    for ending in endings:
        job = locked.pop(ending.job_id, None)  # a job reported twice ends once, as it did one by one
        if job is None:
            continue
        allowed_from = (JobState.RUNNING, JobState.RELEASING) if ending.succeeded else ACTIVE_STATES
        if job.state not in allowed_from:
            continue
        final_state = JobState.SUCCEEDED if ending.succeeded else JobState.FAILED
        message = ending.message or ("finished" if ending.succeeded else "failed")
        before = lifecycle.job_summary(job)
        rows_by_state[job.state].append((job.pk, job.revision, final_state, now, message))
        kind = JobEventKind.FINISHED if ending.succeeded else JobEventKind.FAILED
        events.append((job.pk, kind, now, "", None, message))
        _written(job, final_state=final_state, now=now, message=message)
        records.append(
            audit.build(
                actor=None,
                action="job.finish" if ending.succeeded else "job.fail",
                object_type="job",
                object_id=job.pk,
                object_repr=job.name,
                before=before,
                after=lifecycle.job_summary(job),
            )
        )
        ended.append(job)
    if not ended:
        return ended
    _write_ends(rows_by_state, _FINAL_COLUMNS, _fixed(lifecycle.FINAL_VALUES), events)
    audit.record_all(records)
    return ended


def _written(job: Job, *, final_state: str, now: datetime, message: str) -> None:
    """The job in hand as its row now reads (what a refresh from the database would give)."""
    job.state = final_state
    job.revision += 1
    job.finished_at = now
    job.reason_message = message
    for attname, value in lifecycle.FINAL_VALUES.items():
        setattr(job, attname, value)
    job.beneficiary = None  # the cached relation too, not only its id


def fail_job(*, job: Job, message: str = "") -> Job:
    return finish_job(job=job, succeeded=False, message=message)


def release_jobs_on_down_node(*, node_id: int, node_name: str) -> int:
    """A node that went down takes its replicas with it: each job with one there lets go of all
    its GPUs and goes back to the queue (or fails, when it asked not to be requeued), so the
    next cycle can place it on the ready nodes. Returns how many jobs were released."""
    now = get_clock().now()
    with transaction.atomic():
        on_node = (
            Job.objects.filter(state__in=(JobState.RUNNING, JobState.RELEASING), placements__node_id=node_id)
            .values_list("id", "state", "revision", "requeue")
            .distinct()
            .order_by("id")
        )
        released = release_jobs(
            [
                Release(pk, state, revision, requeue, f"node {node_name} went down")
                for pk, state, revision, requeue in on_node
            ],
            now,
        )
        if released:
            triggers.request_cycle_on_commit("node-down")
    return len(released)


@dataclass(frozen=True, slots=True)
class Release:
    """One job to let go of its GPUs (`release_jobs`), as its caller saw it."""

    job_id: int
    seen_state: str
    seen_revision: int
    requeue: bool
    message: str


_RELEASED_COLUMNS = ("state", "finished_at", "reason_code", "reason_message")


def release_jobs(releases: Sequence[Release], now: datetime) -> list[int]:
    """`lifecycle.release_job` for many jobs, inside the caller's transaction and in a few
    statements whatever their number: the same row, placements and event for each. A job no longer
    as seen is left alone and not in the answer (the ids released, in id order)."""
    locked = _locked_as_seen({(r.job_id, r.seen_state, r.seen_revision) for r in releases})
    rows_by_state: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    events: list[tuple[int, str, datetime, str, int | None, str]] = []
    done: set[int] = set()
    for release in sorted(releases, key=lambda r: r.job_id):
        job = locked.get(release.job_id)
        seen = (release.seen_state, release.seen_revision)
        if job is None or (job.state, job.revision) != seen or release.job_id in done:
            continue
        done.add(release.job_id)
        values = lifecycle.released_values(requeue=release.requeue, now=now, message=release.message)
        row = [values[column] for column in _RELEASED_COLUMNS]
        rows_by_state[release.seen_state].append((release.job_id, release.seen_revision, *row))
        kind, message = lifecycle.released_event(requeue=release.requeue, message=release.message)
        events.append((release.job_id, kind, now, "", None, message))
    same_for_all = {
        column: value
        for column, value in lifecycle.released_values(requeue=True, now=now).items()
        if column not in _RELEASED_COLUMNS
    }
    fixed = _fixed(same_for_all, also=(("preemptions", "preemptions + 1", ()),))
    return _write_ends(rows_by_state, _RELEASED_COLUMNS, fixed, events)


def finish_cancels(cancels: Sequence[tuple[int, int]], now: datetime, why: str) -> list[int]:
    """`lifecycle.finish_cancel` for many (job id, seen revision) at once, inside the caller's
    transaction: each job still releasing at that revision with the `cancelling` reason is
    cancelled, its devices freed, with the same row and event as one at a time. The ids cancelled."""
    locked = _locked_as_seen({(job_id, JobState.RELEASING, revision) for job_id, revision in cancels})
    rows: list[tuple[Any, ...]] = []
    events: list[tuple[int, str, datetime, str, int | None, str]] = []
    for job_id, revision in sorted(set(cancels)):
        job = locked.get(job_id)
        if job is None or job.revision != revision or job.reason_code != lifecycle.CANCELLING:
            continue
        message = f"{job.reason_message}; {why}" if job.reason_message else why
        rows.append((job_id, revision, JobState.CANCELLED, now, message))
        events.append((job_id, JobEventKind.CANCELLED, now, "", None, message))
    return _write_ends({JobState.RELEASING: rows}, _FINAL_COLUMNS, _fixed(lifecycle.FINAL_VALUES), events)


def _fixed(
    values: dict[str, Any], also: Sequence[tuple[str, str, tuple[Any, ...]]] = ()
) -> list[tuple[str, str, tuple[Any, ...]]]:
    """`bulk.update_as_seen`'s `fixed` for values the same on every row, after revision + 1 and
    `also`. NULL is written as such: an untyped NULL parameter is not always taken for the
    column's type."""
    return [("revision", "revision + 1", ()), *also] + [
        (column, "NULL", ()) if value is None else (column, "%s", (value,)) for column, value in values.items()
    ]


def _locked(ids: set[int]) -> dict[int, Job]:
    """The jobs, locked in id order, as every writer that locks several jobs does: two never wait
    on each other."""
    ordered = sorted(ids)
    locked: dict[int, Job] = {}
    for start in range(0, len(ordered), _BATCH):
        chunk = ordered[start : start + _BATCH]
        locked.update((job.pk, job) for job in Job.objects.select_for_update().filter(pk__in=chunk).order_by("pk"))
    return locked


def _locked_as_seen(seen: set[tuple[int, str, int]]) -> dict[int, Job]:
    """The jobs still in the state and at the revision their caller saw, locked (`_locked`)."""
    locked = _locked({job_id for job_id, _state, _revision in seen})
    return {
        job_id: locked[job_id]
        for job_id, state, revision in seen
        if job_id in locked and (locked[job_id].state, locked[job_id].revision) == (state, revision)
    }


def _write_ends(
    rows_by_state: dict[str, list[tuple[Any, ...]]],
    columns: Sequence[str],
    fixed: Sequence[tuple[str, str, tuple[Any, ...]]],
    events: Sequence[tuple[int, str, datetime, str, int | None, str]],
) -> list[int]:
    """The rows (locked and checked by the caller), their placements deleted and their events: the ids."""
    ids = sorted(row[0] for rows in rows_by_state.values() for row in rows)
    if not ids:
        return []
    written = sum(
        bulk.update_as_seen(Job, state=state, columns=columns, rows=rows, fixed=fixed)
        for state, rows in rows_by_state.items()
    )
    if written != len(ids):
        # The rows were read under their locks in this transaction; anything else is a bug.
        raise RuntimeError(f"wrote {written} of {len(ids)} locked jobs; rolled back")
    for start in range(0, len(ids), _BATCH):
        ReplicaPlacementRecord.objects.filter(job_id__in=ids[start : start + _BATCH]).delete()
    bulk.insert(JobEvent, _EVENT_COLUMNS, events)
    return ids


def is_final(job: Job) -> bool:
    return job.state in FINAL_STATES
