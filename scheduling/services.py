"""Every write of the scheduling app: submit, cancel, finish and fail a job; run cycles.

Each runs in one transaction with an audit record, and asks for a cycle after commit. Bad
input raises ValidationError naming the field and the numbers; an action the user may not take
raises PermissionDenied with the reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from quotas import audit, bounds
from quotas import hooks as quota_hooks
from quotas.models import Quota
from scheduling import engine, events, lifecycle, triggers
from scheduling.clock import get_clock
from scheduling.cycle import CycleOutcome, _without_collector_pauses, converge, run_cycle
from scheduling.models import (
    ACTIVE_STATES,
    FINAL_STATES,
    KIND_DEFAULTS,
    Job,
    JobEvent,
    JobEventKind,
    JobKind,
    JobState,
)
from scheduling.selectors import estimate_snapshot, first_cycle_since, job_key, user_gpus_in_use
from workspaces.models import QuotaBinding, Workspace
from workspaces.permissions import can, check_submission, denial_reason

Actor = AbstractBaseUser | AnonymousUser | None


@dataclass(frozen=True, slots=True)
class SubmitPreview:
    """What a dry-run submission would meet at the next cycle, computed by the engine."""

    would_admit: bool
    reason: dict[str, Any] | None
    placements: list[dict[str, Any]] = field(default_factory=list)
    evict: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "would_admit": self.would_admit,
            "reason": self.reason,
            "placements": self.placements,
            "evict": self.evict,
        }


@dataclass(frozen=True, slots=True)
class DryRun:
    """The answer to a dry-run action: API.md's `{valid, errors, preview}`."""

    valid: bool
    errors: dict[str, list[str]]
    preview: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "errors": self.errors, "preview": self.preview}


def _number(amount: float) -> str:
    return bounds.readable(amount)


def validate_job_shape(
    *,
    name: str,
    kind: str,
    gpus: float,
    replicas: int,
    min_replicas: int | None,
    priority: int,
    cpu: float,
    memory_gib: float,
    duration: float | None,
    grace_seconds: float,
    command: str = "",
) -> None:
    """The per-job rules of API.md, all at once so one 400 lists every field that is wrong."""
    errors: dict[str, str] = {}
    if not name.strip():
        errors["name"] = "a job needs a name"
    elif len(name) > bounds.JOB_NAME_MAX_LENGTH:
        errors["name"] = f"at most {bounds.JOB_NAME_MAX_LENGTH} characters, got {len(name)}"
    if kind not in JobKind.values:
        errors["kind"] = f"unknown kind {kind!r}; one of {', '.join(JobKind.values)}"
    if not math.isfinite(gpus) or gpus <= 0:
        errors["gpus"] = f"gpus per replica must be above 0, got {_number(gpus)}"
    elif gpus > bounds.JOB_GPUS_MAX:
        errors["gpus"] = f"gpus per replica must be at most {_number(bounds.JOB_GPUS_MAX)}, got {_number(gpus)}"
    elif bounds.decimals(gpus) > bounds.JOB_GPU_DECIMALS:
        errors["gpus"] = (
            f"a fraction of a GPU has at most {bounds.JOB_GPU_DECIMALS} decimals (0.001 is the finest share), "
            f"got {gpus!r}"
        )
    elif gpus > 1 and not float(gpus).is_integer():
        errors["gpus"] = (
            f"a fraction of a GPU must be below 1 (one device shared); above 1 ask whole GPUs, got {_number(gpus)}"
        )
    if replicas < 1:
        errors["replicas"] = f"replicas must be at least 1, got {replicas}"
    elif replicas > bounds.JOB_REPLICAS_MAX:
        errors["replicas"] = f"replicas must be at most {_number(bounds.JOB_REPLICAS_MAX)}, got {_number(replicas)}"
    if min_replicas is not None:
        if min_replicas < 1:
            errors["min_replicas"] = f"min_replicas must be at least 1, got {min_replicas}"
        elif replicas < min_replicas:
            errors["min_replicas"] = (
                f"replicas {replicas} < min_replicas {min_replicas}: min_replicas must be ≤ replicas"
            )
    if len(command) > bounds.COMMAND_MAX_LENGTH:
        errors["command"] = (
            f"a command has at most {_number(bounds.COMMAND_MAX_LENGTH)} characters, got {len(command):,}"
        )
    if not 1 <= priority <= 9:
        errors["priority"] = f"priority must be between 1 and 9, got {priority}"
    for field_name, amount, most in (
        ("cpu", cpu, bounds.JOB_CPU_MAX),
        ("memory_gib", memory_gib, bounds.JOB_MEMORY_GIB_MAX),
        ("grace_seconds", grace_seconds, bounds.GRACE_SECONDS_MAX),
    ):
        if not math.isfinite(amount) or amount < 0:
            errors[field_name] = f"{field_name} must be 0 or more, got {_number(amount)}"
        elif amount > most:
            errors[field_name] = f"{field_name} must be at most {_number(most)}, got {_number(amount)}"
    if duration is not None and (not math.isfinite(duration) or duration < 0):
        errors["duration"] = f"duration must be 0 or more seconds (or none), got {_number(duration)}"
    elif duration is not None and duration > bounds.JOB_DURATION_MAX:
        errors["duration"] = (
            f"duration must be at most {_number(bounds.JOB_DURATION_MAX)} seconds (a year), got {_number(duration)}"
        )
    if errors:
        raise ValidationError(errors)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobShape:
    """What a job asks for, as `submit_job` takes it; None for `priority` or `preemptible`
    leaves the kind's default. A submission adds where it goes; a scenario's job names those."""

    name: str
    kind: str
    gpus: float
    replicas: int = 1
    min_replicas: int | None = None
    priority: int | None = None
    preemptible: bool | None = None
    cpu: float = 0.0
    memory_gib: float = 0.0
    command: str = ""
    duration: float | None = None
    grace_seconds: float = 0.0
    requeue: bool = True

    def shape(self) -> dict[str, Any]:
        """The fields of JobShape alone, to build another kind of job from this one."""
        return {spec.name: getattr(self, spec.name) for spec in fields(JobShape)}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSubmission(JobShape):
    """One job of `submit_jobs`: what `submit_job` takes besides the actor and `dry_run`."""

    workspace: Workspace
    quota: Quota


def submit_job(
    *,
    actor: Actor,
    workspace: Workspace,
    quota: Quota,
    name: str,
    kind: str,
    gpus: float,
    replicas: int = 1,
    min_replicas: int | None = None,
    priority: int | None = None,
    preemptible: bool | None = None,
    cpu: float = 0.0,
    memory_gib: float = 0.0,
    command: str = "",
    duration: float | None = None,
    grace_seconds: float = 0.0,
    requeue: bool = True,
    dry_run: bool = False,
) -> Job | SubmitPreview:
    """Queue a job (a cycle follows on commit), or with `dry_run` say what the next cycle would do.

    `actor=None` is the scenario runner: no role or cap check, but the quota must be bound to
    the workspace.
    """
    submission = JobSubmission(
        workspace=workspace,
        quota=quota,
        name=name,
        kind=kind,
        gpus=gpus,
        replicas=replicas,
        min_replicas=min_replicas,
        priority=priority,
        preemptible=preemptible,
        cpu=cpu,
        memory_gib=memory_gib,
        command=command,
        duration=duration,
        grace_seconds=grace_seconds,
        requeue=requeue,
    )
    if not dry_run:
        (job,) = _submit(actor, [submission], name_jobs=False)
        return job
    now = get_clock().now()
    job = _new_job(actor, submission, now)
    with transaction.atomic():
        _Admission(actor, [workspace]).check(job)
        job.save(force_insert=True)
        preview = _preview_submission(job, now)
        transaction.set_rollback(True)
    return preview


def submit_jobs(*, actor: Actor, submissions: Sequence[JobSubmission]) -> list[Job]:
    """Queue many jobs at once, all or nothing, with one cycle request on commit.

    Each job meets exactly `submit_job`'s checks, in order, so a per-user cap counts the jobs
    listed before it; the first one refused stops the batch with its error (each message
    prefixed with the job's name and position) and nothing is written. A burst of a thousand
    jobs then costs three inserts instead of four thousand.
    """
    return _submit(actor, submissions, name_jobs=True)


def _submit(actor: Actor, submissions: Sequence[JobSubmission], *, name_jobs: bool) -> list[Job]:
    if not submissions:
        return []
    now = get_clock().now()
    with transaction.atomic():
        admission = _Admission(actor, (submission.workspace for submission in submissions))
        jobs: list[Job] = []
        for number, submission in enumerate(submissions, start=1):
            try:
                job = _new_job(actor, submission, now)
                admission.check(job)
            except (ValidationError, PermissionDenied) as error:
                if not name_jobs:
                    raise
                raise _naming_job(error, f"job {submission.name!r} ({number} of {len(submissions)})") from None
            admission.admitted(job)
            jobs.append(job)
        Job.objects.bulk_create(jobs)
        JobEvent.objects.bulk_create(
            [
                JobEvent(
                    job_id=job.pk,
                    kind=JobEventKind.SUBMITTED,
                    at=now,
                    message=f"{job.replicas} × {_number(job.gpus)} GPUs to {job.quota.name} in "
                    f"{job.workspace.name}, priority {job.priority}",
                )
                for job in jobs
            ]
        )
        audit.record_all(
            [
                audit.build(
                    actor=actor,
                    action="job.submit",
                    object_type="job",
                    object_id=job.pk,
                    object_repr=job.name,
                    after=lifecycle.job_summary(job),
                )
                for job in jobs
            ]
        )
        triggers.request_cycle_on_commit("submit")
        _publish_on_commit(*jobs)
    return jobs


def _new_job(actor: Actor, submission: JobSubmission, now: datetime) -> Job:
    """The job as submitted, the kind's defaults filled in and its shape checked; not saved."""
    default_priority, default_preemptible = KIND_DEFAULTS.get(submission.kind, (5, True))
    priority = default_priority if submission.priority is None else submission.priority
    preemptible = default_preemptible if submission.preemptible is None else submission.preemptible
    validate_job_shape(
        name=submission.name,
        kind=submission.kind,
        gpus=submission.gpus,
        replicas=submission.replicas,
        min_replicas=submission.min_replicas,
        priority=priority,
        cpu=submission.cpu,
        memory_gib=submission.memory_gib,
        duration=submission.duration,
        grace_seconds=submission.grace_seconds,
        command=submission.command,
    )
    return Job(  # type: ignore[misc]  # a signed-in actor is a User
        **{**submission.shape(), "priority": priority, "preemptible": preemptible},
        workspace=submission.workspace,
        quota=submission.quota,
        owner=actor if actor is not None and actor.is_authenticated else None,
        submitted_at=now,
    )


class _Admission:
    """Whether the actor may queue each job of one batch: the quota bound to the workspace (the
    scenario runner, `actor=None`), or the workspace's roles and caps. The bindings of the
    batch's workspaces are read in one query, and the GPUs the user holds once per workspace and
    quota, plus the batch's earlier jobs."""

    def __init__(self, actor: Actor, workspaces: Iterable[Workspace]) -> None:
        self.actor = actor
        self.in_use: dict[tuple[int, int], float] = {}
        self.bound: set[tuple[int, int]] = set()
        if actor is None:
            self.bound = set(
                QuotaBinding.objects.filter(workspace_id__in={workspace.pk for workspace in workspaces}).values_list(
                    "workspace_id", "quota_id"
                )
            )

    def check(self, job: Job) -> None:
        actor, workspace, quota = self.actor, job.workspace, job.quota
        key = (workspace.pk, quota.pk)
        if actor is None:
            if key not in self.bound:
                bound = ", ".join(workspace.quotas.order_by("name").values_list("name", flat=True)) or "none"
                raise ValidationError(
                    {"quota": f"{quota.name} is not bound to workspace {workspace.name} (bound quotas: {bound})."}
                )
            return
        if key not in self.in_use:
            self.in_use[key] = (
                user_gpus_in_use(user_id=actor.pk, workspace_id=workspace.pk, quota_id=quota.pk) if actor.pk else 0.0
            )
        check_submission(
            user=actor,
            workspace=workspace,
            quota=quota,
            priority=job.priority,
            gpus_per_job=job.gpus * job.replicas,
            user_gpus_in_use=self.in_use[key],
        )

    def admitted(self, job: Job) -> None:
        """The job is queued: later jobs of the batch count it against the owner's cap."""
        key = (job.workspace.pk, job.quota.pk)
        if job.owner_id is not None and key in self.in_use:
            self.in_use[key] += job.gpus * job.replicas


def _naming_job(error: ValidationError | PermissionDenied, label: str) -> ValidationError | PermissionDenied:
    """The refusal of one job of a batch, each message prefixed with which job it was."""
    if isinstance(error, PermissionDenied):
        return PermissionDenied(f"{label}: {error}")
    if hasattr(error, "error_dict"):
        return ValidationError(
            {field: [f"{label}: {message}" for message in messages] for field, messages in error.message_dict.items()}
        )
    return ValidationError([f"{label}: {message}" for message in error.messages])


def _preview_submission(job: Job, now: Any) -> SubmitPreview:
    # The Submit job page asks this on every change: the cluster read is reused while nothing
    # changed (selectors.estimate_snapshot), and the collector pauses as for a real cycle.
    with _without_collector_pauses():
        snapshot, index = estimate_snapshot(now, job_pk=job.pk)
        result = engine.schedule(snapshot)
    key = job_key(job.pk)
    names = {k: seen.name for k, seen in index.jobs.items()}
    admit = next((d for d in result.decisions if isinstance(d, engine.Admit) and d.job_id == key), None)
    evict = [
        {"job": names.get(d.job_id, d.job_id), "id": int(d.job_id), "rule": d.rule, "reason": d.reason}
        for d in result.decisions
        if isinstance(d, engine.Evict | engine.Shrink) and d.beneficiary == key
    ]
    pending = result.pending.get(key)
    return SubmitPreview(
        would_admit=admit is not None,
        reason=None
        if admit is not None or pending is None
        else {"code": pending.code, "message": pending.message, "position": pending.position},
        placements=[
            {"node": p.node, "devices": list(p.devices), "fraction": p.fraction}
            for p in (admit.placements if admit is not None else ())
        ],
        evict=evict,
    )


def _publish_on_commit(*jobs: Job) -> None:
    # One batch: the live topics of a bulk submission are read back in one go (scheduling.live).
    batch = [events.job_event(job) for job in jobs]
    transaction.on_commit(lambda: events.publish_many(batch))


def preview_cancel_job(*, actor: Actor, job: Job) -> DryRun:
    """`cancel_job` in a rolled-back transaction: what the next cycle would then admit.

    A job that is no longer live is refused with ValidationError, as `cancel_job` refuses it.
    """
    cancel = _cancel_job_change(actor=actor, job=job)
    with transaction.atomic():
        cancel()
        preview = DryRun(valid=True, errors={}, preview=dict(quota_hooks.preview()))
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
    final_state = JobState.SUCCEEDED if succeeded else JobState.FAILED
    now = get_clock().now()
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        before = lifecycle.job_summary(locked)
        allowed = (JobState.RUNNING, JobState.RELEASING) if succeeded else ACTIVE_STATES
        if not lifecycle.end_job(
            job=locked,
            final_state=final_state,
            event_kind=JobEventKind.FINISHED if succeeded else JobEventKind.FAILED,
            now=now,
            allowed_from=allowed,
            message=message or ("finished" if succeeded else "failed"),
        ):
            raise ValidationError(
                {
                    "state": f"job {locked.name} is {locked.state}; only a running job can "
                    f"{'finish' if succeeded else 'fail'}"
                }
            )
        audit.record(
            actor=None,
            action="job.finish" if succeeded else "job.fail",
            object_type="job",
            object_id=locked.pk,
            object_repr=locked.name,
            before=before,
            after=lifecycle.job_summary(locked),
        )
        triggers.request_cycle_on_commit("finish" if succeeded else "fail")
        _publish_on_commit(locked)
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


@dataclass(frozen=True, slots=True)
class ManualCycle:
    """The answer to "run a cycle now": the cycle's outcome, or, when none finished within the
    wait, `queued` (the worker runs it; /scheduler/status/ shows it when done)."""

    outcome: CycleOutcome
    queued: bool

    def as_dict(self) -> dict[str, Any]:
        return {**self.outcome.as_dict(), "queued": self.queued}


# How often a person's "run a cycle now" looks for the worker's cycle record.
MANUAL_CYCLE_POLL_SECONDS = 0.05


def run_cycle_now(*, trigger: str) -> ManualCycle:
    """A cycle for a person waiting on an answer, who gets one within
    SCHEDULER_API_LOCK_WAIT_SECONDS (a second by default), never a hang.

    With a worker (celery triggers) the cycle is handed to it, and the answer is the first cycle
    that starts after the request if it commits in time, else `queued`: the web process never
    waits on the cycle lock or on a long commit behind other writers. Without a worker the cycle
    runs here, waiting for the lock at most that long.
    """
    wait = float(getattr(settings, "SCHEDULER_API_LOCK_WAIT_SECONDS", 1.0))
    if triggers.trigger_mode() != "celery":
        return ManualCycle(outcome=run_cycle(trigger=trigger, wait_seconds=wait), queued=False)
    asked_at = get_clock().now()
    # False when a cycle is queued already: it has not started, so it sees everything until now.
    triggers.request_cycle(trigger)
    deadline = time.monotonic() + wait
    while True:
        record = first_cycle_since(asked_at)
        if record is not None:
            return ManualCycle(outcome=CycleOutcome.from_record(record), queued=False)
        if time.monotonic() >= deadline:
            return ManualCycle(outcome=CycleOutcome(ran=False, committed=False, trigger=trigger), queued=True)
        time.sleep(MANUAL_CYCLE_POLL_SECONDS)


__all__ = [
    "CycleOutcome",
    "DryRun",
    "JobSubmission",
    "ManualCycle",
    "SubmitPreview",
    "cancel_job",
    "converge",
    "fail_job",
    "finish_job",
    "preview_cancel_job",
    "release_jobs_on_down_node",
    "run_cycle",
    "run_cycle_now",
    "submit_job",
    "submit_jobs",
    "validate_job_shape",
]
