"""State changes of one job, shared by the cycle's commit, the services and the executors.

Each runs inside the caller's transaction and changes a job only while it is in the state (and
at the revision) the caller saw: a job that moved on in the meantime is left alone, and the
caller learns so from the return value.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import F

from quotas.models import NodeExecutor
from scheduling.models import HOLDING_STATES, Job, JobEvent, JobEventKind, JobState, ReplicaPlacementRecord

# The reason a job that asked not to be requeued carries once it is preempted.
PREEMPTED: str = "preempted"


def add_event(
    *,
    job_id: int,
    kind: str,
    at: datetime,
    rule: str = "",
    beneficiary_id: int | None = None,
    message: str = "",
) -> JobEvent:
    return JobEvent.objects.create(
        job_id=job_id, kind=kind, at=at, rule=rule, beneficiary_id=beneficiary_id, message=message
    )


def released_values(*, requeue: bool, now: datetime, message: str = "") -> dict[str, object]:
    """The fields a released job ends with (besides revision and preemptions going up by one).

    `beneficiary` is kept: a requeued victim still names the job it was evicted for, and the
    engine lets that job start first (no second eviction for it). The engine ignores the link once
    the beneficiary is no longer pending.
    """
    return {
        "state": JobState.PENDING if requeue else JobState.FAILED,
        "allocated_gpus": 0,
        "running_replicas": 0,
        "started_at": None,
        "evicted_at": None,
        "release_at": None,
        "finished_at": None if requeue else now,
        "reason_code": "" if requeue else PREEMPTED,
        "reason_message": ""
        if requeue
        else f"preempted and not requeued (requeue is false){': ' + message if message else ''}",
    }


def released_event(*, requeue: bool, message: str = "") -> tuple[str, str]:
    """The kind and message of the event a released job gets."""
    if requeue:
        return JobEventKind.REQUEUED, message or "back in the queue"
    return JobEventKind.FAILED, message or "preempted; requeue is false"


def release_job(
    *,
    job_id: int,
    seen_state: str,
    seen_revision: int,
    requeue: bool,
    now: datetime,
    message: str = "",
) -> str | None:
    """An evicted job lets go of its GPUs: back to the queue, or failed if it asked not to be requeued.

    Returns the new state, or None when the job was no longer as seen (nothing changed).
    """
    values = released_values(requeue=requeue, now=now, message=message)
    changed = Job.objects.filter(pk=job_id, state=seen_state, revision=seen_revision).update(
        revision=F("revision") + 1, preemptions=F("preemptions") + 1, **values
    )
    if not changed:
        return None
    ReplicaPlacementRecord.objects.filter(job_id=job_id).delete()
    kind, event_message = released_event(requeue=requeue, message=message)
    add_event(job_id=job_id, kind=kind, at=now, message=event_message)
    return str(values["state"])


def requeue_unstarted(*, job_id: int, seen_revision: int, now: datetime, message: str) -> bool:
    """A running job one of whose replicas its agent never started goes back to the queue, with
    `message` in a `requeued` event. Not a preemption (nothing of it ran on that node), so its
    `preemptions` and `requeue` are left alone. False when the job was no longer as seen."""
    values = released_values(requeue=True, now=now)
    changed = Job.objects.filter(pk=job_id, state=JobState.RUNNING, revision=seen_revision).update(
        revision=F("revision") + 1, **values
    )
    if not changed:
        return False
    ReplicaPlacementRecord.objects.filter(job_id=job_id).delete()
    add_event(job_id=job_id, kind=JobEventKind.REQUEUED, at=now, message=message)
    return True


# A job cancelled while its processes run on agent nodes is `releasing` with this reason until
# its agents report them gone (or its node is lost); then it is cancelled (AGENT.md).
CANCELLING: str = "cancelling"


def _runs_on_agent_nodes(job_id: int) -> bool:
    # Agent and Slurm nodes alike: real processes, gone only when their host says so.
    return ReplicaPlacementRecord.objects.filter(job_id=job_id).exclude(node__executor=NodeExecutor.SIMULATED).exists()


def end_job(
    *,
    job: Job,
    final_state: str,
    event_kind: str,
    now: datetime,
    allowed_from: Iterable[str],
    message: str = "",
) -> bool:
    """Move a job (locked by the caller with select_for_update) to a final state, freeing its GPUs.

    A cancel of a job whose replicas run on agent nodes does not free them yet: the processes
    may run for their grace, and a device handed to the next job while its process still computes
    would be shared without anyone deciding so. The job becomes `releasing` (reason `cancelling`)
    and keeps its devices; its agents are answered a stop, and `finish_cancel` ends it once they
    report the processes gone (scheduling.agent_services) or its node is lost. Evictions wait the
    same way.

    Returns False when the job is not in one of `allowed_from`.
    """
    if job.state not in tuple(allowed_from):
        return False
    if final_state == JobState.CANCELLED and job.state in HOLDING_STATES and _runs_on_agent_nodes(job.pk):
        return _stop_then_cancel(job=job, now=now, message=message)
    if not _finalise(job=job, final_state=final_state, event_kind=event_kind, now=now, message=message):
        return False
    job.refresh_from_db()
    return True


def _stop_then_cancel(*, job: Job, now: datetime, message: str) -> bool:
    if job.state == JobState.RELEASING and job.reason_code == CANCELLING:
        return True  # asked again while its processes stop: nothing more to do
    changed = Job.objects.filter(pk=job.pk, state=job.state, revision=job.revision).update(
        state=JobState.RELEASING,
        revision=F("revision") + 1,
        # No clock-based release: the simulated executor skips jobs on agent nodes.
        release_at=None,
        reason_code=CANCELLING,
        reason_message=message,
    )
    if not changed:
        return False
    add_event(
        job_id=job.pk,
        kind=JobEventKind.CANCELLED,
        at=now,
        message=f"{message}; its devices are freed once its processes have stopped",
    )
    job.refresh_from_db()
    return True


def finish_cancel(*, job_id: int, seen_revision: int, now: datetime, why: str) -> bool:
    """A job cancelled on agent nodes (releasing, `cancelling`) lets go of its devices: cancelled.

    False when it was no longer as seen (nothing changed)."""
    job = Job.objects.filter(
        pk=job_id, state=JobState.RELEASING, revision=seen_revision, reason_code=CANCELLING
    ).first()
    if job is None:
        return False
    return _finalise(
        job=job,
        final_state=JobState.CANCELLED,
        event_kind=JobEventKind.CANCELLED,
        now=now,
        message=f"{job.reason_message}; {why}" if job.reason_message else why,
    )


# What a job that ends (finished, failed, cancelled) is left with, besides its state, revision
# + 1, finished_at and reason_message; `job_endings` writes the same for many jobs at once.
FINAL_VALUES: dict[str, Any] = {
    "allocated_gpus": 0,
    "running_replicas": 0,
    "release_at": None,
    "evicted_at": None,
    "beneficiary_id": None,
    "reason_code": "",
}


def _finalise(*, job: Job, final_state: str, event_kind: str, now: datetime, message: str) -> bool:
    changed = Job.objects.filter(pk=job.pk, state=job.state, revision=job.revision).update(
        state=final_state,
        revision=F("revision") + 1,
        finished_at=now,
        reason_message=message,
        **FINAL_VALUES,
    )
    if not changed:
        return False
    ReplicaPlacementRecord.objects.filter(job_id=job.pk).delete()
    add_event(job_id=job.pk, kind=event_kind, at=now, message=message)
    return True


# What an audit record keeps of a job, before and after (readers of a job load these fields).
JOB_SUMMARY_FIELDS = (
    "name",
    "workspace_id",
    "quota_id",
    "kind",
    "gpus",
    "replicas",
    "min_replicas",
    "priority",
    "preemptible",
    "state",
)


def job_summary(job: Job) -> dict[str, Any]:
    return {field_name: getattr(job, field_name) for field_name in JOB_SUMMARY_FIELDS}
