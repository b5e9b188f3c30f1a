"""Submitting jobs: the per-job rules of API.md, who may queue what where, and the dry run that asks
the engine what the next cycle would do.

A submission runs in one transaction with an audit record and asks for a cycle after commit. Bad
input raises ValidationError naming the field and the numbers; a submission the user may not
make raises PermissionDenied with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from operator import attrgetter
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from quotas import audit, bounds
from quotas.models import Quota
from scheduling import bulk, engine, job_environment, lifecycle, triggers
from scheduling.clock import get_clock
from scheduling.gc_pauses import without_collector_pauses
from scheduling.job_writes import Actor, NewJobs, _publish_on_commit
from scheduling.mentions import mention_jobs, reasons_read_by, unnamed
from scheduling.models import KIND_DEFAULTS, Job, JobEvent, JobEventKind, JobKind
from scheduling.selectors import estimate_snapshot, job_key, user_gpus_in_use
from utilities import inserts
from workspaces.models import QuotaBinding, Workspace
from workspaces.permissions import check_submission


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
    environment: Mapping[str, str] | None = None,
    image: str = "",
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
    if environment_wrong := job_environment.environment_errors(environment or {}):
        errors["environment"] = "; ".join(environment_wrong)
    if image_wrong := job_environment.image_error(image):
        errors["image"] = image_wrong
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
    environment: Mapping[str, str] | None = None
    image: str = ""
    duration: float | None = None
    grace_seconds: float = 0.0
    requeue: bool = True

    def shape(self) -> dict[str, Any]:
        """The fields of JobShape alone, to build another kind of job from this one."""
        return dict(zip(_SHAPE_FIELDS, _read_shape(self), strict=True))


# JobShape's fields are Job's columns of the same names, read from a submission in one C call.
_SHAPE_FIELDS: tuple[str, ...] = tuple(spec.name for spec in fields(JobShape))
_read_shape = attrgetter(*_SHAPE_FIELDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSubmission(JobShape):
    """One job of `submit_jobs`: what `submit_job` takes besides the actor."""

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
    environment: Mapping[str, str] | None = None,
    image: str = "",
    duration: float | None = None,
    grace_seconds: float = 0.0,
    requeue: bool = True,
) -> Job:
    """Queue a job; a cycle follows on commit.

    `actor=None` is the scenario runner: no role or cap check, but the quota must be bound to
    the workspace.
    """
    (job,) = _submit(actor, [_submission_of(locals())], name_jobs=False)
    return job


def preview_submit_job(
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
    environment: Mapping[str, str] | None = None,
    image: str = "",
    duration: float | None = None,
    grace_seconds: float = 0.0,
    requeue: bool = True,
) -> SubmitPreview:
    """What the next cycle would do with this job, were it submitted now: the same checks as
    `submit_job`, then the job is saved and the scheduler asked inside a rolled-back transaction."""
    submission = _submission_of(locals())
    now = get_clock().now()
    job = _new_job(actor, submission, now, NewJobs())
    with transaction.atomic():
        _Admission(actor, [submission.workspace]).check(job)
        job.save(force_insert=True)
        preview = _preview_submission(job, now, reader=actor)
        transaction.set_rollback(True)
    return preview


def _submission_of(arguments: dict[str, Any]) -> JobSubmission:
    # A single-job write's keyword arguments are JobSubmission's fields, besides the actor; the
    # preview pattern's test keeps the two signatures equal.
    return JobSubmission(**{name: value for name, value in arguments.items() if name != "actor"})


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
        new_jobs = NewJobs()
        for number, submission in enumerate(submissions, start=1):
            try:
                job = _new_job(actor, submission, now, new_jobs)
                admission.check(job)
            except (ValidationError, PermissionDenied) as error:
                if not name_jobs:
                    raise
                raise _naming_job(error, f"job {submission.name!r} ({number} of {len(submissions)})") from None
            admission.admitted(job)
            jobs.append(job)
        # As bulk_create, less its per-value preparation: a burst of 1,000 jobs spent 0.3 s in it.
        inserts.create_all(jobs)
        # One plain statement for the events (bulk.insert): a burst of 1,000 jobs spent longer
        # in bulk_create's per-field preparation than in the database.
        bulk.insert(
            JobEvent,
            ("job_id", "kind", "at", "message"),
            [
                (
                    job.pk,
                    JobEventKind.SUBMITTED.value,
                    now,
                    f"{job.replicas} × {_number(job.gpus)} GPUs to {job.quota.name} in "
                    f"{job.workspace.name}, priority {job.priority}",
                )
                for job in jobs
            ],
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


def _new_job(actor: Actor, submission: JobSubmission, now: datetime, new_jobs: NewJobs) -> Job:
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
        environment=submission.environment,
        image=submission.image,
    )
    columns = dict(zip(_SHAPE_FIELDS, _read_shape(submission), strict=True))
    columns.update(
        priority=priority,
        preemptible=preemptible,
        environment=dict(submission.environment or {}),
        submitted_at=now,
    )
    owner = actor if actor is not None and actor.is_authenticated else None
    return new_jobs.build(columns, {"workspace": submission.workspace, "quota": submission.quota, "owner": owner})


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


def _preview_submission(job: Job, now: Any, *, reader: Actor) -> SubmitPreview:
    # The Submit job page asks this on every change: the cluster read is reused while nothing
    # changed (selectors.estimate_snapshot), and the collector pauses as for a real cycle.
    with without_collector_pauses():
        snapshot, _index = estimate_snapshot(now, job_pk=job.pk)
        result = engine.schedule(snapshot)
    key = job_key(job.pk)
    admit = next((d for d in result.decisions if isinstance(d, engine.Admit) and d.job_id == key), None)
    pending = result.pending.get(key)
    return SubmitPreview(
        would_admit=admit is not None,
        reason=None
        if admit is not None or pending is None
        else {
            "code": pending.code,
            # "waits behind 42", "waiting for 1 evicted job(s) (41)": as the submitter may see them.
            "message": reasons_read_by(reader, {job.pk: pending.message})[job.pk],
            "position": pending.position,
        },
        placements=[
            {"node": p.node, "devices": list(p.devices), "fraction": p.fraction}
            for p in (admit.placements if admit is not None else ())
        ],
        evict=_victims(result, key, reader),
    )


def _victims(result: engine.CycleResult, key: str, reader: Actor) -> list[dict[str, Any]]:
    """The jobs the engine would evict or shrink for the job `key`, each as `reader` may learn of
    it (scheduling.mentions): a job of a workspace the reader cannot open by its quota,
    workspace and GPUs, never its name or id, in the entry and in the engine's reason."""
    taken = [d for d in result.decisions if isinstance(d, engine.Evict | engine.Shrink) and d.beneficiary == key]
    gpus_given_up = {
        int(d.job_id): sum(p.fraction if p.fraction < 1 else len(p.devices) for p in d.remove)
        for d in taken
        if isinstance(d, engine.Shrink)
    }
    victims = mention_jobs(reader, {int(d.job_id) for d in taken}, gpus=gpus_given_up)
    hidden = [mention for mention in victims.values() if not mention.visible]
    return [
        {**victims[int(d.job_id)].as_api(), "rule": d.rule, "reason": unnamed(d.reason, hidden)}
        for d in taken
        if int(d.job_id) in victims
    ]
