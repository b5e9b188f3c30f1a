"""Reads the cycle, the API, the pages and `simulate` share.

`build_snapshot` turns the database into the engine's frozen snapshot in a fixed number of
queries (six, whatever the size of the cluster), and keeps an index from the engine's string
ids back to rows, with the state and revision each job had when it was read.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import QuerySet, Sum

from quotas.hooks import QuotaStatus as QuotaStatusFigures
from quotas.models import Node, Quota, ResourcePool
from scheduling import engine
from scheduling.engine import types as engine_types
from scheduling.models import (
    ACTIVE_STATES,
    HOLDING_STATES,
    CycleRecord,
    Job,
    JobEvent,
    JobState,
    ReplicaPlacementRecord,
    SchedulerFence,
)


@dataclass(frozen=True, slots=True)
class JobSeen:
    """A job as the snapshot read it; a decision about it commits only if it is still so."""

    pk: int
    name: str
    state: str
    revision: int
    quota_id: int
    gpus: float
    grace_seconds: float
    requeue: bool
    reason_code: str
    reason_message: str
    position: int | None


@dataclass(slots=True)
class SnapshotIndex:
    jobs: dict[str, JobSeen] = field(default_factory=dict)
    node_ids: dict[str, int] = field(default_factory=dict)
    quota_ids: dict[str, int] = field(default_factory=dict)
    fence_token: int = 0
    fence_generation: int = 0


def job_key(pk: int) -> str:
    """The engine's id of a job: its primary key as a string."""
    return str(pk)


def _epoch(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def build_snapshot(now: datetime) -> tuple[engine.Snapshot, SnapshotIndex]:
    """The cluster as the engine sees it: ready and down nodes, the quota tree, the active jobs.

    The fence is read first: a cycle that commits after this read makes the snapshot stale, and
    the commit then refuses it (see scheduling.cycle).
    """
    index = SnapshotIndex()
    fence = SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID).values("token", "generation").first()
    if fence is not None:
        index.fence_token = fence["token"]
        index.fence_generation = fence["generation"]

    pool = ResourcePool.objects.order_by("id").values("placement").first()
    placement = pool["placement"] if pool is not None else engine_types.PACK

    nodes: list[engine.Node] = []
    node_names: dict[int, str] = {}
    for node_row in Node.objects.order_by("id").values("id", "name", "gpus", "cpu", "memory_gib", "state"):
        nodes.append(
            engine.Node(
                name=node_row["name"],
                gpus=node_row["gpus"],
                cpu=node_row["cpu"],
                memory_gib=node_row["memory_gib"],
                ready=node_row["state"] == "ready",
            )
        )
        node_names[node_row["id"]] = node_row["name"]
        index.node_ids[node_row["name"]] = node_row["id"]

    quotas: list[engine.Quota] = []
    quota_names: dict[int, str] = {}
    quota_rows = list(
        Quota.objects.order_by("id").values(
            "id",
            "name",
            "parent_id",
            "gpus",
            "cpu",
            "memory_gib",
            "limit",
            "weight",
            "rank",
            "child_preemption",
            "same_level_preemption",
            "queue_policy",
            "min_runtime_seconds",
        )
    )
    for quota_row in quota_rows:
        quota_names[quota_row["id"]] = quota_row["name"]
        index.quota_ids[quota_row["name"]] = quota_row["id"]
    for order, quota_row in enumerate(quota_rows):
        quotas.append(
            engine.Quota(
                name=quota_row["name"],
                parent=quota_names.get(quota_row["parent_id"]) if quota_row["parent_id"] is not None else None,
                gpus=quota_row["gpus"],
                cpu=quota_row["cpu"],
                memory_gib=quota_row["memory_gib"],
                limit=quota_row["limit"],
                weight=quota_row["weight"],
                rank=quota_row["rank"],
                child_preemption=quota_row["child_preemption"],
                same_level_preemption=quota_row["same_level_preemption"],
                queue_policy=quota_row["queue_policy"],
                min_runtime_seconds=None
                if quota_row["min_runtime_seconds"] is None
                else float(quota_row["min_runtime_seconds"]),
                created_order=order,
            )
        )

    job_rows = list(
        Job.objects.filter(state__in=ACTIVE_STATES)
        .order_by("submitted_at", "id")
        .values(
            "id",
            "name",
            "quota_id",
            "workspace__name",
            "gpus",
            "replicas",
            "min_replicas",
            "priority",
            "preemptible",
            "cpu",
            "memory_gib",
            "submitted_at",
            "state",
            "started_at",
            "grace_seconds",
            "beneficiary_id",
            "evicted_at",
            "requeue",
            "revision",
            "reason_code",
            "reason_message",
            "position",
        )
    )
    placements: dict[int, list[engine.ReplicaPlacement]] = defaultdict(list)
    holding = [row["id"] for row in job_rows if row["state"] in HOLDING_STATES]
    if holding:
        for placement_row in (
            ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES)
            .order_by("job_id", "id")
            .values("job_id", "node_id", "devices", "fraction")
        ):
            placements[placement_row["job_id"]].append(
                engine.ReplicaPlacement(
                    node=node_names[placement_row["node_id"]],
                    devices=tuple(placement_row["devices"]),
                    fraction=placement_row["fraction"],
                )
            )

    jobs: list[engine.Job] = []
    for row in job_rows:
        key = job_key(row["id"])
        index.jobs[key] = JobSeen(
            pk=row["id"],
            name=row["name"],
            state=row["state"],
            revision=row["revision"],
            quota_id=row["quota_id"],
            gpus=row["gpus"],
            grace_seconds=row["grace_seconds"],
            requeue=row["requeue"],
            reason_code=row["reason_code"],
            reason_message=row["reason_message"],
            position=row["position"],
        )
        jobs.append(
            engine.Job(
                id=key,
                quota=quota_names[row["quota_id"]],
                gpus=row["gpus"],
                replicas=row["replicas"],
                min_replicas=row["min_replicas"],
                priority=row["priority"],
                preemptible=row["preemptible"],
                cpu=row["cpu"],
                memory_gib=row["memory_gib"],
                submitted_at=row["submitted_at"].timestamp(),
                state=row["state"],
                started_at=_epoch(row["started_at"]),
                placements=tuple(placements.get(row["id"], ())),
                grace_seconds=row["grace_seconds"],
                workspace=row["workspace__name"],
                beneficiary=job_key(row["beneficiary_id"]) if row["beneficiary_id"] is not None else None,
                evicted_at=_epoch(row["evicted_at"]),
            )
        )

    snapshot = engine.Snapshot(
        nodes=tuple(nodes), quotas=tuple(quotas), jobs=tuple(jobs), now=now.timestamp(), placement=placement
    )
    return snapshot, index


def quota_status_figures(snapshot: engine.Snapshot) -> dict[str, QuotaStatusFigures]:
    """Per quota name: fair share (from the engine) and what its subtree holds and waits for.

    Releasing jobs still hold their GPUs, so they count as allocated and as running.
    """
    fair_share = engine.fair_shares(snapshot)
    parent_of = {quota.name: quota.parent for quota in snapshot.quotas}
    figures: dict[str, QuotaStatusFigures] = {
        quota.name: QuotaStatusFigures(
            fair_share=float(fair_share.get(quota.name, 0.0)), allocated=0.0, allocated_self=0.0, running=0, pending=0
        )
        for quota in snapshot.quotas
    }
    for job in snapshot.jobs:
        held = sum(p.fraction if p.fraction < 1 else float(len(p.devices)) for p in job.placements)
        if job.quota in figures:
            figures[job.quota]["allocated_self"] += held
        name: str | None = job.quota
        while name is not None and name in figures:
            figures[name]["allocated"] += held
            if job.state == engine_types.PENDING:
                figures[name]["pending"] += 1
            else:
                figures[name]["running"] += 1
            name = parent_of.get(name)
    return figures


def job_list(*, queryset: QuerySet[Job] | None = None) -> QuerySet[Job]:
    """Jobs with what their list and detail show, in a constant number of queries."""
    base = queryset if queryset is not None else Job.objects.all()
    return base.select_related("workspace", "quota", "owner").prefetch_related("placements__node")


def job_events(*, job: Job) -> QuerySet[JobEvent]:
    return job.events.select_related("beneficiary").order_by("at", "id")


def last_cycle() -> CycleRecord | None:
    return CycleRecord.objects.order_by("-started_at", "-id").first()


def user_gpus_in_use(*, user_id: int, workspace_id: int, quota_id: int) -> float:
    """GPUs the user's live jobs of the workspace in the quota ask for (pending ones included, so
    queueing many small jobs cannot slip past a per-user cap)."""
    total = 0.0
    live = Job.objects.filter(owner_id=user_id, workspace_id=workspace_id, quota_id=quota_id, state__in=ACTIVE_STATES)
    for row in live.values("gpus", "replicas"):
        total += row["gpus"] * row["replicas"]
    return total


def allocated_gpus_total() -> float:
    return float(Job.objects.filter(state__in=HOLDING_STATES).aggregate(total=Sum("allocated_gpus"))["total"] or 0.0)


__all__ = [
    "JobSeen",
    "JobState",
    "SnapshotIndex",
    "allocated_gpus_total",
    "build_snapshot",
    "job_events",
    "job_key",
    "job_list",
    "last_cycle",
    "quota_status_figures",
    "scheduler_status",
    "user_gpus_in_use",
]


def scheduler_status(*, include_decisions: bool) -> dict[str, Any]:
    """GET scheduler/status/: the last committed cycle, and who holds the lock right now."""
    from scheduling.executors import get_executor
    from scheduling.lock import get_cycle_lock, lock_backend
    from scheduling.triggers import trigger_mode

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
        "executor": get_executor().name,
        "trigger_mode": trigger_mode(),
    }
