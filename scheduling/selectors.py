"""Reads the API, the pages and consumers share: job lists and pages, the last cycle, the
scheduler's status, Submit job's quota choices.

The cycle's snapshot, quota figures, metrics, GPU holders, invariants and the estimate's
snapshot live in modules of their own (scheduling/snapshot.py, quota_figures.py,
metrics_reads.py, holders.py, invariants.py, estimate_base.py); their names stay importable from
here for the callers that read them through this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import QuerySet

from quotas.models import Quota
from scheduling.estimate_base import estimate_snapshot
from scheduling.holders import GpuHolder, HeldDevice, HeldGpus, gpu_holders, held_devices_with_kind, jobs_holding_gpus
from scheduling.invariants import invariant_violations
from scheduling.metrics_reads import (
    CYCLE_BUCKETS,
    WAIT_BUCKETS,
    AllocationPoint,
    HistogramFigures,
    MetricsFigures,
    allocated_gpus_total,
    allocation_history,
    metrics_figures,
)
from scheduling.models import ACTIVE_STATES, CycleRecord, Job, JobEvent, JobState
from scheduling.pending_reasons import with_shown_reason
from scheduling.quota_figures import asked_gpus, quota_status_figures, quota_status_summary
from scheduling.snapshot import JobSeen, SnapshotIndex, build_snapshot, job_key
from scheduling.snapshot_rows import held_devices
from workspaces.permissions import usable_quotas


def job_list(*, queryset: QuerySet[Job] | None = None) -> QuerySet[Job]:
    """Jobs with what their list and detail show, in a constant number of queries."""
    base = queryset if queryset is not None else Job.objects.all()
    return base.select_related("workspace", "quota", "owner", "pending_reason").prefetch_related(
        "placements__node", *_slurm_jobs()
    )


def _slurm_jobs() -> tuple[str, ...]:
    """The slurm app's rows of a job's Slurm jobs (slurm.models.SlurmJob, reverse name
    `slurm_jobs`), when the app is installed: named, not imported, since scheduling sits below
    the app that runs jobs on Slurm."""
    return ("slurm_jobs",) if hasattr(Job, "slurm_jobs") else ()


def slurm_job_ids(job: Job) -> list[str]:
    """Slurm's ids of the job's replicas as squeue shows them (`812_3`: task 3 of job array 812),
    oldest first (an earlier run's, of a requeued job, included); empty for a job of another
    executor. Read from job_list's prefetch."""
    if not _slurm_jobs():
        return []
    return [str(row.slurm_label) for row in job.slurm_jobs.all() if row.slurm_id is not None]


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    """The job's history, oldest first. The job each event made room for is named by
    scheduling.mentions.job_history, as its reader may learn of it, so it is not read here."""
    return job.events.order_by("at", "id")


def last_cycle() -> CycleRecord | None:
    return CycleRecord.objects.order_by("-started_at", "-id").first()


def first_cycle_since(moment: datetime) -> CycleRecord | None:
    """The first committed cycle that started at or after `moment` (so saw what came before)."""
    return CycleRecord.objects.filter(started_at__gte=moment).order_by("started_at", "id").first()


def user_gpus_in_use(*, user_id: int, workspace_id: int, quota_id: int) -> float:
    """GPUs the user's live jobs of the workspace in the quota ask for (pending ones included, so
    queueing many small jobs cannot slip past a per-user cap)."""
    total = 0.0
    live = Job.objects.filter(owner_id=user_id, workspace_id=workspace_id, quota_id=quota_id, state__in=ACTIVE_STATES)
    for row in live.values("gpus", "replicas"):
        total += row["gpus"] * row["replicas"]
    return total


def live_job_rows(*, job_ids: Iterable[int]) -> list[dict[str, Any]]:
    """What a live page shows of these jobs right now (live topic changes), in one query."""
    labels = dict(JobState.choices)
    rows = with_shown_reason(Job.objects.filter(pk__in=list(job_ids))).values(
        "id", "state", "shown_reason_code", "shown_reason_message", "workspace_id", "quota_id", "allocated_gpus"
    )
    return [
        {
            **row,
            "reason_code": row.pop("shown_reason_code"),
            "reason_message": row.pop("shown_reason_message"),
            "state_display": str(labels.get(row["state"], row["state"])),
        }
        for row in rows
    ]


def scheduler_status(*, include_decisions: bool, executor: str, trigger_mode: str) -> dict[str, Any]:
    """GET scheduler/status/: the last committed cycle, and who holds the lock right now.

    The executor's name and the trigger mode come from the caller: both live above reads."""
    from scheduling.lock import get_cycle_lock, lock_backend

    record = last_cycle()
    try:
        holder = get_cycle_lock().holder()
    except Exception:  # noqa: BLE001 - a status page must answer even with Redis down
        holder = None
    decisions: list[dict[str, Any]] | None = None
    if record is not None and include_decisions:
        committed = record.decisions.get("committed", []) if isinstance(record.decisions, dict) else record.decisions
        decisions = list(committed)
    return {
        "last_cycle_at": record.started_at if record else None,
        "duration_ms": record.duration_ms if record else None,
        "trigger": record.trigger if record else None,
        "lock_token": record.lock_token if record else None,
        "admitted": record.admitted if record else None,
        "evicted": record.evicted if record else None,
        "pending": record.pending if record else None,
        "decisions": decisions,
        "lock_holder": holder,
        "lock_backend": lock_backend(),
        "executor": executor,
        "trigger_mode": trigger_mode,
    }


class QuotaChoice(NamedTuple):
    """One quota bound to a workspace, as Submit job offers it: usable by this user, or why not."""

    quota: Quota
    usable: bool
    why_not: str


def submission_quota_choices(*, user: Any, workspace: Any) -> list[QuotaChoice]:
    """The workspace's bound quotas, each with whether its usable-role rules let `user` submit
    there. The rules are `check_submission`'s own (workspaces.permissions), caps aside (nothing
    is asked yet), so the list and a real submission never disagree."""
    quotas = list(Quota.objects.filter(bindings__workspace=workspace).select_related("pool").order_by("name"))
    refusals = usable_quotas(user=user, workspace=workspace, quotas=quotas)
    return [
        QuotaChoice(quota=quota, usable=refusals[quota.pk] is None, why_not=_sentence(refusals[quota.pk] or ""))
        for quota in quotas
    ]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def job_page_list(*, queryset: QuerySet[Job]) -> QuerySet[Job]:
    """What the Jobs page shows of each job: its names and state, no placements (the job page
    has those), so a page of 50 costs the same queries as a page of 5."""
    return queryset.select_related("workspace", "quota", "owner", "pending_reason").only(
        "id",
        "name",
        "kind",
        "gpus",
        "replicas",
        "priority",
        "state",
        "allocated_gpus",
        "reason_code",
        "reason_message",
        "revision",
        "pending_reason__revision",
        "pending_reason__code",
        "pending_reason__message",
        "pending_reason__position",
        "submitted_at",
        "workspace__name",
        "quota__name",
        "owner__username",
    )


__all__ = [
    "CYCLE_BUCKETS",
    "WAIT_BUCKETS",
    "AllocationPoint",
    "GpuHolder",
    "HeldDevice",
    "HeldGpus",
    "HistogramFigures",
    "JobSeen",
    "JobState",
    "MetricsFigures",
    "QuotaChoice",
    "SnapshotIndex",
    "allocated_gpus_total",
    "allocation_history",
    "asked_gpus",
    "build_snapshot",
    "estimate_snapshot",
    "first_cycle_since",
    "gpu_holders",
    "held_devices",
    "held_devices_with_kind",
    "invariant_violations",
    "job_events",
    "job_key",
    "job_list",
    "job_page_list",
    "jobs_holding_gpus",
    "last_cycle",
    "live_job_rows",
    "metrics_figures",
    "quota_status_figures",
    "quota_status_summary",
    "scheduler_status",
    "submission_quota_choices",
    "user_gpus_in_use",
    "with_shown_reason",
]
