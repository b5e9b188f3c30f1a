"""How a job ends before or after it ran: cancelled by a person, finished or failed as its executor
reports, released when its node goes down.

Each runs in one transaction with an audit record (a node going down leaves the job's events), and
asks for a cycle after commit: the freed GPUs go to the queue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from quotas import audit
from quotas import hooks as quota_hooks
from scheduling import lifecycle, triggers
from scheduling.clock import get_clock
from scheduling.job_writes import Actor, _publish_on_commit
from scheduling.mentions import preview_as_seen
from scheduling.models import ACTIVE_STATES, FINAL_STATES, Job, JobEventKind, JobState
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
        locked = _end_by_itself(job.pk, succeeded, message, now)
        if locked is None:
            state = Job.objects.values_list("state", flat=True).get(pk=job.pk)
            raise ValidationError(
                {"state": f"job {job.name} is {state}; only a running job can {'finish' if succeeded else 'fail'}"}
            )
        triggers.request_cycle_on_commit("finish" if succeeded else "fail")
        _publish_on_commit(locked)
    return locked


@dataclass(frozen=True, slots=True)
class Ending:
    """One job's end as its executor reports it (`finish_jobs`)."""

    job_id: int
    succeeded: bool
    message: str


def finish_jobs(endings: Sequence[Ending]) -> list[Job]:
    """`finish_job` for many jobs at once, as an executor that learns of many ends in one read
    (the Slurm executor's squeue) reports them: one transaction, one cycle request and one live
    publish for them all, where one each cost about 0.3 s a job on the loaded test machine
    (benchmarks/slurm_drain.py). A job that moved on meanwhile (cancelled) is left as it is and
    not in the answer, which holds the jobs ended, in `endings`' order."""
    if not endings:
        return []
    now = get_clock().now()
    ended: list[Job] = []
    with transaction.atomic():
        for ending in endings:
            locked = _end_by_itself(ending.job_id, ending.succeeded, ending.message, now)
            if locked is not None:
                ended.append(locked)
        if ended:
            triggers.request_cycle_on_commit("finish")
            _publish_on_commit(*ended)
    return ended


def _end_by_itself(job_id: int, succeeded: bool, message: str, now: datetime) -> Job | None:
    """The job ended (audited), or None when it is no longer one that can: inside the caller's transaction."""
    locked = Job.objects.select_for_update().get(pk=job_id)
    before = lifecycle.job_summary(locked)
    if not lifecycle.end_job(
        job=locked,
        final_state=JobState.SUCCEEDED if succeeded else JobState.FAILED,
        event_kind=JobEventKind.FINISHED if succeeded else JobEventKind.FAILED,
        now=now,
        allowed_from=(JobState.RUNNING, JobState.RELEASING) if succeeded else ACTIVE_STATES,
        message=message or ("finished" if succeeded else "failed"),
    ):
        return None
    audit.record(
        actor=None,
        action="job.finish" if succeeded else "job.fail",
        object_type="job",
        object_id=locked.pk,
        object_repr=locked.name,
        before=before,
        after=lifecycle.job_summary(locked),
    )
    return locked


def fail_job(*, job: Job, message: str = "") -> Job:
    return finish_job(job=job, succeeded=False, message=message)


def release_jobs_on_down_node(*, node_id: int, node_name: str) -> int:
    """A node that went down takes its replicas with it: each job with one there lets go of all
    its GPUs and goes back to the queue (or fails, when it asked not to be requeued), so the
    next cycle can place it on the ready nodes. Returns how many jobs were released."""
    now = get_clock().now()
    released = 0
    with transaction.atomic():
        on_node = (
            Job.objects.filter(state__in=(JobState.RUNNING, JobState.RELEASING), placements__node_id=node_id)
            .values("id", "state", "revision", "requeue")
            .distinct()
            .order_by("id")
        )
        for row in on_node:
            if lifecycle.release_job(
                job_id=row["id"],
                seen_state=row["state"],
                seen_revision=row["revision"],
                requeue=row["requeue"],
                now=now,
                message=f"node {node_name} went down",
            ):
                released += 1
        if released:
            triggers.request_cycle_on_commit("node-down")
    return released


def is_final(job: Job) -> bool:
    return job.state in FINAL_STATES
