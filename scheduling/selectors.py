"""Reads the cycle, the API, the pages and `simulate` share.

`build_snapshot` turns the database into the engine's frozen snapshot in a fixed number of
queries (six, whatever the size of the cluster), and keeps an index from the engine's string
ids back to rows, with the state and revision each job had when it was read.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, NamedTuple, TypedDict

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)

from quotas.hooks import QuotaStatus as QuotaStatusFigures
from quotas.models import Node, NodeState, Quota, ResourcePool
from scheduling import engine
from scheduling.engine import fairshare
from scheduling.engine import types as engine_types
from scheduling.models import (
    ACTIVE_STATES,
    HOLDING_STATES,
    AllocationSample,
    CycleRecord,
    Job,
    JobEvent,
    JobEventKind,
    JobState,
    ReplicaPlacementRecord,
    SchedulerFence,
)
from workspaces.permissions import usable_quotas


class JobSeen(NamedTuple):
    """A job as the snapshot read it; a decision about it commits only if it is still so.
    (A named tuple: a snapshot makes ten thousand of them, at a quarter of a frozen dataclass's cost.)"""

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


def _raw_rows(queryset: QuerySet[Any]) -> list[tuple[Any, ...]]:
    """The rows of a `values_list` queryset as the database driver returns them.

    Django's per-value converters (datetime parsing and time zones on SQLite, JSON decoding)
    cost more than the query itself on a snapshot of 10,000 jobs; the snapshot needs only epoch
    seconds and plain values, which `_epoch` and `_devices` make at C speed.
    """
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


class _Moment(Func):
    """A datetime column as the snapshot reads it: seconds since the epoch where the database
    computes them (PostgreSQL; building aware datetimes cost more than the rest of the query),
    the stored text elsewhere (SQLite keeps naive UTC ISO text, which `_epoch` parses)."""

    output_field = FloatField()

    def as_sql(
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> Any:
        if connection.vendor == "postgresql":
            template = "EXTRACT(EPOCH FROM %(expressions)s)::float8"
            return super().as_sql(compiler, connection, function, template, arg_joiner, **extra_context)
        return compiler.compile(self.source_expressions[0])


def _epoch(moment: float | str | datetime | None) -> float | None:
    """Seconds since the epoch of a `_Moment` as the driver returns it."""
    if moment is None or isinstance(moment, float):
        return moment
    if isinstance(moment, str):
        return datetime.fromisoformat(moment).replace(tzinfo=UTC).timestamp()
    return moment.timestamp()


@lru_cache(maxsize=4096)
def _parsed_devices(text: str) -> tuple[int, ...]:
    return tuple(json.loads(text))


def _devices(value: Any) -> tuple[int, ...]:
    """A placement's devices as the driver returns the JSON column: text (parsed once per
    distinct value: a pool has few device sets, and a snapshot reads thousands), or a list."""
    return _parsed_devices(value) if isinstance(value, str) else tuple(value)


# What an engine job is made of, in this order; `_engine_job` reads the row by these positions.
_ENGINE_JOB_COLUMNS = (
    "id",
    "quota_id",
    "workspace__name",
    "gpus",
    "replicas",
    "min_replicas",
    "priority",
    "preemptible",
    "cpu",
    "memory_gib",
    "submitted",  # the _Moment of submitted_at, and so on
    "state",
    "started",
    "grace_seconds",
    "beneficiary_id",
    "evicted",
)
_QUOTA_ID, _GPUS, _STATE, _GRACE_SECONDS = (
    _ENGINE_JOB_COLUMNS.index(column) for column in ("quota_id", "gpus", "state", "grace_seconds")
)


class _EngineJobs:
    """The engine jobs of the last snapshot this process built, by everything they were built
    from (their row, quota name and replicas as read). Most jobs are the same from one cycle to
    the next, and building 10,000 frozen dataclasses costs a cycle tens of milliseconds; a job
    whose row changed in any way is built anew. Each snapshot replaces the whole map, so it
    holds only the active jobs."""

    built: dict[tuple[Any, ...], engine.Job] = {}


_engine_jobs = _EngineJobs()


def _engine_job(key: str, row: tuple[Any, ...], quota: str, replicas: tuple[tuple[str, Any, float], ...]) -> engine.Job:
    (
        _pk,
        _quota_id,
        workspace,
        gpus,
        replica_count,
        min_replicas,
        priority,
        preemptible,
        cpu,
        memory_gib,
        submitted_at,
        state,
        started_at,
        grace_seconds,
        beneficiary_id,
        evicted_at,
    ) = row[: len(_ENGINE_JOB_COLUMNS)]
    return engine.Job(
        id=key,
        quota=quota,
        gpus=gpus,
        replicas=replica_count,
        min_replicas=min_replicas,
        priority=priority,
        preemptible=bool(preemptible),
        cpu=cpu,
        memory_gib=memory_gib,
        submitted_at=_epoch(submitted_at) or 0.0,
        state=state,
        started_at=_epoch(started_at),
        placements=tuple(
            engine.ReplicaPlacement(node=node, devices=_devices(devices), fraction=fraction)
            for node, devices, fraction in replicas
        ),
        grace_seconds=grace_seconds,
        workspace=workspace,
        beneficiary=None if beneficiary_id is None else str(beneficiary_id),
        evicted_at=_epoch(evicted_at),
    )


def _engine_quotas() -> tuple[dict[int, str], list[engine.Quota]]:
    """The quota tree as the engine takes it, in one query; and each quota's name by id."""
    quota_rows = _raw_rows(
        Quota.objects.order_by("id").values_list(
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
    quota_names: dict[int, str] = {row[0]: row[1] for row in quota_rows}
    quotas = [
        engine.Quota(
            name=name,
            parent=quota_names.get(parent_id) if parent_id is not None else None,
            gpus=gpus,
            cpu=cpu,
            memory_gib=memory_gib,
            limit=limit,
            weight=weight,
            rank=rank,
            child_preemption=bool(child_preemption),
            same_level_preemption=bool(same_level_preemption),
            queue_policy=queue_policy,
            min_runtime_seconds=None if min_runtime is None else float(min_runtime),
            created_order=order,
        )
        for order, (
            _id,
            name,
            parent_id,
            gpus,
            cpu,
            memory_gib,
            limit,
            weight,
            rank,
            child_preemption,
            same_level_preemption,
            queue_policy,
            min_runtime,
        ) in enumerate(quota_rows)
    ]
    return quota_names, quotas


def build_snapshot(now: datetime) -> tuple[engine.Snapshot, SnapshotIndex]:
    """The cluster as the engine sees it: ready and down nodes, the quota tree, the active jobs.

    The fence is read first: a cycle that commits after this read makes the snapshot stale, and
    the commit then refuses it (see scheduling.cycle).
    """
    index = SnapshotIndex()
    fence = SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID).values_list("token", "generation").first()
    if fence is not None:
        index.fence_token, index.fence_generation = fence

    pool = ResourcePool.objects.order_by("id").values_list("placement", flat=True).first()
    placement = pool if pool is not None else engine_types.PACK

    nodes: list[engine.Node] = []
    node_names: dict[int, str] = {}
    node_rows = _raw_rows(Node.objects.order_by("id").values_list("id", "name", "gpus", "cpu", "memory_gib", "state"))
    for node_id, name, gpus, cpu, memory_gib, state in node_rows:
        nodes.append(
            engine.Node(
                name=name,
                gpus=gpus,
                cpu=cpu,
                memory_gib=memory_gib,
                # Cordoned and draining nodes are up: their jobs run on until they end or are drained.
                ready=state != NodeState.NOT_READY,
                schedulable=state == NodeState.READY,
                draining=state == NodeState.DRAINING,
            )
        )
        node_names[node_id] = name
        index.node_ids[name] = node_id

    quota_names, quotas = _engine_quotas()
    index.quota_ids = {name: quota_id for quota_id, name in quota_names.items()}

    job_rows = _raw_rows(
        Job.objects.filter(state__in=ACTIVE_STATES)
        .order_by("submitted_at", "id")
        .annotate(submitted=_Moment("submitted_at"), started=_Moment("started_at"), evicted=_Moment("evicted_at"))
        .values_list(*_ENGINE_JOB_COLUMNS, "name", "requeue", "revision", "reason_code", "reason_message", "position")
    )
    # Per holding job, its replicas as read: (node name, devices as stored, fraction).
    held: dict[int, list[tuple[str, Any, float]]] = defaultdict(list)
    if any(row[_STATE] in HOLDING_STATES for row in job_rows):
        placement_rows = _raw_rows(
            ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES)
            .order_by("job_id", "id")
            .values_list("job_id", "node_id", "devices", "fraction")
        )
        for job_id, node_id, devices, fraction in placement_rows:
            stored = devices if isinstance(devices, str) else tuple(devices)  # hashable: part of a job's identity
            held[job_id].append((node_names[node_id], stored, fraction))

    jobs: list[engine.Job] = []
    seen_jobs = index.jobs
    built = _engine_jobs.built
    kept: dict[tuple[Any, ...], engine.Job] = {}
    width = len(_ENGINE_JOB_COLUMNS)
    for row in job_rows:
        pk = row[0]
        key = str(pk)  # job_key, inlined: this loop runs once per active job
        name, requeue, revision, reason_code, reason_message, position = row[width:]
        seen_jobs[key] = JobSeen(
            pk=pk,
            name=name,
            state=row[_STATE],
            revision=revision,
            quota_id=row[_QUOTA_ID],
            gpus=row[_GPUS],
            grace_seconds=row[_GRACE_SECONDS],
            requeue=bool(requeue),
            reason_code=reason_code,
            reason_message=reason_message,
            position=position,
        )
        quota = quota_names[row[_QUOTA_ID]]
        replicas = tuple(held[pk]) if pk in held else ()
        identity = (*row[:width], quota, replicas)
        job = built.get(identity)
        if job is None:
            job = _engine_job(key, row, quota, replicas)
        kept[identity] = job
        jobs.append(job)
    _engine_jobs.built = kept

    snapshot = engine.Snapshot(
        nodes=tuple(nodes), quotas=tuple(quotas), jobs=tuple(jobs), now=now.timestamp(), placement=placement
    )
    return snapshot, index


def held_devices() -> tuple[dict[int, tuple[int, str]], list[tuple[int, int, tuple[int, ...], float]]]:
    """Every node's GPUs and state, and every held replica (job id, node id, devices,
    fraction): the devices as the caller's transaction sees them right now."""
    nodes = {
        node_id: (gpus, state) for node_id, gpus, state in _raw_rows(Node.objects.values_list("id", "gpus", "state"))
    }
    held = [
        (job_id, node_id, _devices(devices), fraction)
        for job_id, node_id, devices, fraction in _raw_rows(
            ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES).values_list(
                "job_id", "node_id", "devices", "fraction"
            )
        )
    ]
    return nodes, held


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


def _fair_share_capacity() -> int:
    """`engine.fairshare.cluster_capacity` from the database: every GPU of a node that takes new
    placements, and of a cordoned or draining node the devices its jobs hold (milli-GPUs)."""
    MILLI = fairshare.MILLI
    placeable = Node.objects.filter(state=NodeState.READY).aggregate(gpus=Sum("gpus"))["gpus"] or 0
    held: dict[tuple[int, int], int] = {}
    rows = ReplicaPlacementRecord.objects.filter(
        job__state__in=HOLDING_STATES, node__state__in=(NodeState.CORDONED, NodeState.DRAINING)
    ).values_list("node_id", "devices", "fraction")
    for node_id, devices, fraction in _raw_rows(rows):
        milli = fairshare.to_milli(fraction) if fraction < 1 else MILLI
        for device in _devices(devices):
            held[(node_id, device)] = min(MILLI, held.get((node_id, device), 0) + milli)
    return int(placeable) * MILLI + sum(held.values())


def quota_status_summary() -> dict[str, QuotaStatusFigures]:
    """What `quota_status_figures` says over a full snapshot, from aggregates instead: the pages
    need per-quota sums, not ten thousand jobs and their placements (a snapshot of a busy
    cluster costs half a second; this, a few milliseconds).

    Jobs alike in quota, state, GPUs per replica and replicas are read as one group; the engine's
    fair share sums each job's request (GPUs per replica rounded as it rounds them, × replicas)
    and marks fractional ones, so one job of the group's shape with the group's replicas asks
    exactly what the group asks. Allocated is the jobs' `allocated_gpus`, which every commit
    keeps equal to their placements."""
    quota_names, quotas = _engine_quotas()
    capacity = _fair_share_capacity()
    groups = (
        Job.objects.filter(state__in=ACTIVE_STATES)
        .values_list("quota_id", "state", "gpus", "replicas")
        .annotate(jobs=Count("id"), held=Sum("allocated_gpus"))
        .order_by()
    )
    jobs: list[engine.Job] = []
    held: dict[str, float] = defaultdict(float)
    running: dict[str, int] = defaultdict(int)
    pending: dict[str, int] = defaultdict(int)
    for quota_id, state, gpus, replicas, count, allocated in groups:
        quota = quota_names[quota_id]
        jobs.append(
            engine.Job(
                id=f"{quota_id}:{state}:{gpus}:{replicas}",
                quota=quota,
                gpus=gpus,
                replicas=replicas * count,
                state=state,
            )
        )
        held[quota] += float(allocated or 0.0)
        if state == JobState.PENDING:
            pending[quota] += count
        else:
            running[quota] += count
    # engine.fair_shares, with the capacity counted here: it would otherwise need the placements.
    tree = fairshare.QuotaTree(quotas, {job.quota for job in jobs})
    request = fairshare.subtree_requests(tree, fairshare.requests_by_leaf(tree, jobs))
    share = fairshare.divide(tree, request, capacity, fairshare.fractional_nodes(tree, jobs))
    fair_share = {tree.names[i]: share[i] / fairshare.MILLI for i in range(len(tree))}
    parent_of = {quota.name: quota.parent for quota in quotas}
    figures: dict[str, QuotaStatusFigures] = {
        quota.name: QuotaStatusFigures(
            fair_share=float(fair_share.get(quota.name, 0.0)),
            allocated=0.0,
            allocated_self=held.get(quota.name, 0.0),
            running=0,
            pending=0,
        )
        for quota in quotas
    }
    for own in quota_names.values():
        name: str | None = own
        while name is not None and name in figures:
            figures[name]["allocated"] += held.get(own, 0.0)
            figures[name]["running"] += running.get(own, 0)
            figures[name]["pending"] += pending.get(own, 0)
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
    rows = Job.objects.filter(pk__in=list(job_ids)).values(
        "id", "state", "reason_code", "reason_message", "workspace_id", "quota_id", "allocated_gpus"
    )
    return [{**row, "state_display": str(labels.get(row["state"], row["state"]))} for row in rows]


# Histogram buckets (upper bounds, seconds) of /metrics: a cycle takes milliseconds to a few
# seconds (S3-sized); an admission wait seconds to days.
CYCLE_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WAIT_BUCKETS: tuple[float, ...] = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0)


class HistogramFigures(TypedDict):
    buckets: list[tuple[float, int]]  # (upper bound in seconds, count at or below it), cumulative
    count: int
    sum: float


class MetricsFigures(TypedDict):
    jobs_by_quota_state: list[tuple[str, str, int]]
    quotas: list[tuple[str, float, QuotaStatusFigures]]
    preemptions: list[tuple[str, str, int]]
    cycle_duration: HistogramFigures
    admission_wait: HistogramFigures


def metrics_figures(*, now: datetime) -> MetricsFigures:
    """Everything /metrics shows, in a number of queries that does not grow with jobs, quotas or
    cycles: counts are grouped and histograms are conditional counts in the database."""
    jobs = [
        (quota, state, count)
        for quota, state, count in Job.objects.values_list("quota__name", "state")
        .order_by("quota__name", "state")
        .annotate(count=Count("id"))
    ]
    snapshot, _index = build_snapshot(now)
    figures = quota_status_figures(snapshot)
    quotas = [
        (quota.name, float(quota.gpus), figures[quota.name])
        for quota in Quota.objects.order_by("name").only("name", "gpus")
        if quota.name in figures
    ]
    preemptions = list(
        JobEvent.objects.filter(kind=JobEventKind.EVICTED)
        .values_list("job__quota__name", "rule")
        .order_by("job__quota__name", "rule")
        .annotate(count=Count("id"))
    )
    cycle = _histogram(CycleRecord.objects.all(), F("duration_ms") / 1000.0, CYCLE_BUCKETS, seconds=False)
    wait = ExpressionWrapper(F("at") - F("job__submitted_at"), output_field=DurationField())
    admission = _histogram(JobEvent.objects.filter(kind=JobEventKind.ADMITTED), wait, WAIT_BUCKETS, seconds=True)
    return MetricsFigures(
        jobs_by_quota_state=jobs,
        quotas=quotas,
        preemptions=[(quota, rule or "unknown", count) for quota, rule, count in preemptions],
        cycle_duration=cycle,
        admission_wait=admission,
    )


def _histogram(queryset: QuerySet[Any], value: Any, bounds: Iterable[float], *, seconds: bool) -> HistogramFigures:
    """Cumulative bucket counts and the sum of `value` over `queryset`, in one query. `seconds`:
    `value` is a duration (compared with timedeltas, summed in microseconds by the database)."""

    def limit(bound: float) -> Any:
        return timedelta(seconds=bound) if seconds else bound

    bounds = list(bounds)
    annotated = queryset.annotate(observed=value)
    figures = annotated.aggregate(
        count=Count("pk"),
        total=Sum("observed"),
        **{f"le_{index}": Count("pk", filter=Q(observed__lte=limit(bound))) for index, bound in enumerate(bounds)},
    )
    total = figures["total"]
    if isinstance(total, timedelta):
        total = total.total_seconds()
    return HistogramFigures(
        buckets=[(bound, int(figures[f"le_{index}"])) for index, bound in enumerate(bounds)],
        count=int(figures["count"]),
        sum=float(total or 0.0),
    )


def allocated_gpus_total() -> float:
    return float(Job.objects.filter(state__in=HOLDING_STATES).aggregate(total=Sum("allocated_gpus"))["total"] or 0.0)


class AllocationPoint(NamedTuple):
    at: datetime
    allocated: float
    guaranteed: float
    fair_share: float


def allocation_history(*, quota_ids: Iterable[int], since: datetime) -> dict[int, list[AllocationPoint]]:
    """Per quota, its samples since `since`, led by the last one before it (moved to `since`):
    the figures hold from a sample to the next, so that one says where the window starts.

    Two queries whatever the number of quotas; a quota with no sample at all is left out."""
    ids = list(quota_ids)
    history: dict[int, list[AllocationPoint]] = {quota_id: [] for quota_id in ids}
    # One index seek on (quota, at) per quota, not a scan of the older samples.
    before = (
        AllocationSample.objects.filter(quota_id=OuterRef("pk"), at__lt=since).order_by("-at", "-id").values("pk")[:1]
    )
    leading = AllocationSample.objects.filter(
        pk__in=Quota.objects.filter(pk__in=ids).annotate(last=Subquery(before)).values("last")
    ).values_list("quota_id", "allocated", "guaranteed", "fair_share")
    for quota_id, allocated, guaranteed, fair_share in leading:
        history[quota_id].append(AllocationPoint(since, allocated, guaranteed, fair_share))
    within = (
        AllocationSample.objects.filter(quota_id__in=ids, at__gte=since)
        .order_by("at", "id")
        .values_list("quota_id", "at", "allocated", "guaranteed", "fair_share")
    )
    for quota_id, at, allocated, guaranteed, fair_share in within:
        history[quota_id].append(AllocationPoint(at, allocated, guaranteed, fair_share))
    return {quota_id: points for quota_id, points in history.items() if points}


__all__ = [
    "AllocationPoint",
    "JobSeen",
    "JobState",
    "SnapshotIndex",
    "allocated_gpus_total",
    "allocation_history",
    "build_snapshot",
    "gpu_holders",
    "held_devices",
    "job_events",
    "job_key",
    "job_list",
    "last_cycle",
    "live_job_rows",
    "metrics_figures",
    "quota_status_figures",
    "quota_status_summary",
    "scheduler_status",
    "user_gpus_in_use",
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


class HeldGpus(TypedDict):
    job: str
    quota: str
    gpus: float


def jobs_holding_gpus(*, quota_ids: Iterable[int]) -> list[HeldGpus]:
    """Running (and releasing) jobs of these quotas with the GPUs they hold, newest first: the order
    in which reclaim takes them back, so a preview can name the jobs a smaller guarantee exposes."""
    rows = (
        Job.objects.filter(quota_id__in=list(quota_ids), state__in=HOLDING_STATES)
        .order_by("-submitted_at", "-id")
        .values_list("name", "quota__name", "allocated_gpus")
    )
    return [HeldGpus(job=name, quota=quota, gpus=float(gpus)) for name, quota, gpus in rows]


class GpuHolder(TypedDict):
    """One job's share of one GPU device: a whole device, or a fraction of it."""

    node_id: int
    node: str
    device: int
    job_id: int
    job: str
    job_state: str
    quota_id: int
    quota: str
    fraction: float


def gpu_holders(*, quota_ids: Iterable[int] | None = None, node_ids: Iterable[int] | None = None) -> list[GpuHolder]:
    """Who holds which GPU, one entry per (job, device), by node, device and job: every running
    or releasing job's placements (of these quotas' jobs, on these nodes, when given) in one query.

    The Nodes page draws its GPU grid from it, the Quota page's Nodes tab the GPUs of a subtree.
    A fractional replica names its one device with its fraction; a whole replica each device at 1.
    """
    placements = ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES)
    if quota_ids is not None:
        placements = placements.filter(job__quota_id__in=list(quota_ids))
    if node_ids is not None:
        placements = placements.filter(node_id__in=list(node_ids))
    rows = placements.values_list(
        "node_id", "node__name", "devices", "fraction", "job_id", "job__name", "job__state", "job__quota_id",
        "job__quota__name",
    )  # fmt: skip
    holders = [
        GpuHolder(
            node_id=node_id,
            node=node,
            device=device,
            job_id=job_id,
            job=job,
            job_state=job_state,
            quota_id=quota_id,
            quota=quota,
            fraction=fraction if fraction < 1 else 1.0,
        )
        for node_id, node, devices, fraction, job_id, job, job_state, quota_id, quota in rows
        for device in _devices(devices)
    ]
    holders.sort(key=lambda holder: (holder["node_id"], holder["device"], holder["job"], holder["job_id"]))
    return holders


class HeldDevice(NamedTuple):
    """One running (or releasing) replica's devices on a node, with the job's kind (telemetry's
    synthetic curves follow the kind)."""

    job_id: int
    kind: str
    node_id: int
    devices: tuple[int, ...]
    fraction: float


def held_devices_with_kind(*, node_ids: Iterable[int]) -> list[HeldDevice]:
    """Every replica holding GPUs on these nodes, in one query."""
    wanted = list(node_ids)
    if not wanted:
        return []
    rows = ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES, node_id__in=wanted)
    return [
        HeldDevice(job_id, kind, node_id, _devices(devices), fraction)
        for job_id, kind, node_id, devices, fraction in _raw_rows(
            rows.values_list("job_id", "job__kind", "node_id", "devices", "fraction")
        )
    ]


def invariant_violations() -> list[str]:
    """What must hold after any load or fault, as sentences (empty when all hold).

    No device holds more than one whole GPU's worth of replicas; no quota's subtree holds more
    than its limit; every job is in a state of the model, with one `submitted` event, placements
    matching what it says it holds, and the event its final state needs.
    """
    # One snapshot for every query: read one by one, a cycle committing in between would show
    # a job running without the placements it committed with.
    if connection.in_atomic_block:
        return _invariant_violations()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return _invariant_violations()


def _invariant_violations() -> list[str]:
    violations: list[str] = []
    device_use: dict[tuple[int, int], float] = defaultdict(float)
    held_by_job: dict[int, float] = defaultdict(float)
    replicas_by_job: dict[int, int] = defaultdict(int)
    holding = ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES)
    for job_id, node_id, devices, fraction in holding.values_list("job_id", "node_id", "devices", "fraction"):
        for device in devices:
            device_use[(node_id, device)] += fraction if fraction < 1 else 1.0
        held_by_job[job_id] += fraction if fraction < 1 else float(len(devices))
        replicas_by_job[job_id] += 1
    violations += [
        f"node {node} GPU {device} is held {use:g} times over"
        for (node, device), use in sorted(device_use.items())
        if use > 1 + 1e-9
    ]
    jobs = Job.objects.values_list("id", "name", "state", "quota_id", "running_replicas", "allocated_gpus")
    states = set(JobState.values)
    quota_held: dict[int, float] = defaultdict(float)
    for job_id, name, state, quota_id, running, allocated in jobs:
        if state not in states:
            violations.append(f"job {name} ({job_id}) is in no known state: {state!r}")
        if state in HOLDING_STATES:
            quota_held[quota_id] += allocated
            if replicas_by_job[job_id] != running or abs(held_by_job[job_id] - allocated) > 1e-6:
                violations.append(
                    f"job {name} ({job_id}) says {running} replicas and {allocated:g} GPUs, "
                    f"its placements hold {replicas_by_job[job_id]} and {held_by_job[job_id]:g}"
                )
        elif replicas_by_job[job_id] or allocated:
            violations.append(f"job {name} ({job_id}) is {state} but holds {allocated:g} GPUs")
    submitted = defaultdict(int, _event_counts(JobEventKind.SUBMITTED))
    for job_id, name, *_ in jobs:
        if submitted[job_id] != 1:
            violations.append(f"job {name} ({job_id}) has {submitted[job_id]} submitted events")
    for state, kind in ((JobState.CANCELLED, JobEventKind.CANCELLED), (JobState.SUCCEEDED, JobEventKind.FINISHED)):
        with_event = dict(_event_counts(kind))
        violations += [
            f"job {name} ({job_id}) is {state} without a {kind} event"
            for job_id, name in Job.objects.filter(state=state).values_list("id", "name")
            if not with_event.get(job_id)
        ]
    parents = dict(Quota.objects.values_list("id", "parent_id"))
    subtree_held: dict[int, float] = defaultdict(float)
    for quota_id, held in quota_held.items():
        ancestor: int | None = quota_id
        while ancestor is not None:
            subtree_held[ancestor] += held
            ancestor = parents.get(ancestor)
    for quota_id, name, limit in Quota.objects.exclude(limit=None).values_list("id", "name", "limit"):
        if limit is not None and subtree_held[quota_id] > limit + 1e-6:
            violations.append(f"quota {name} holds {subtree_held[quota_id]:g} GPUs, above its limit of {limit:g}")
    return violations


def _event_counts(kind: str) -> list[tuple[int, int]]:
    return list(
        JobEvent.objects.filter(kind=kind).values("job_id").annotate(count=Count("id")).values_list("job_id", "count")
    )


class QuotaChoice(NamedTuple):
    """One quota bound to a workspace, as Submit job offers it: usable by this user, or why not."""

    quota: Quota
    usable: bool
    why_not: str


def submission_quota_choices(*, user: Any, workspace: Any) -> list[QuotaChoice]:
    """The workspace's bound quotas, each with whether its usable-role rules let `user` submit
    there. The rules are `check_submission`'s own (workspaces.permissions), caps aside (nothing
    is asked yet), so the list and a real submission never disagree."""
    quotas = list(Quota.objects.filter(bindings__workspace=workspace).order_by("name"))
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
    return queryset.select_related("workspace", "quota", "owner").only(
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
        "position",
        "submitted_at",
        "workspace__name",
        "quota__name",
        "owner__username",
    )


# --- the Submit job estimate's snapshot ---------------------------------------------------------

# How long one full read of the cluster may serve the estimates after it. A person typing into
# Submit job asks for an estimate every few hundred milliseconds; reading 10,000 jobs for each
# costs more than the engine run itself (docs/benchmarks.md, issue 11). In between, the jobs
# that changed are read again (a job's `revision` goes up on every change of state or
# allocation), and any other audited change (a quota, a node) reads everything again.
ESTIMATE_SNAPSHOT_SECONDS = 10.0


@dataclass(slots=True)
class _EstimateBase:
    other_changes: Any  # the newest audit record that is not about a job: (id, at), or None
    built_at: float
    snapshot: engine.Snapshot
    index: SnapshotIndex
    revisions: dict[int, int]
    by_pk: dict[int, engine.Job]


_estimate_base: dict[str, _EstimateBase] = {}


def _other_changes() -> Any:
    """The newest audited change that is not a job's (quotas, nodes, pools, workspaces). Its time
    comes along so that a fresh database (a test's) never matches an old one's numbers."""
    from quotas.models import AuditRecord

    return AuditRecord.objects.exclude(object_type="job").order_by("-id").values_list("id", "at").first()


def _full_estimate_base(now: datetime, *, leaving_out: str, other_changes: Any) -> _EstimateBase:
    snapshot, index = build_snapshot(now)
    index.jobs.pop(leaving_out, None)
    jobs = tuple(job for job in snapshot.jobs if job.id != leaving_out)
    return _EstimateBase(
        other_changes=other_changes,
        built_at=time.monotonic(),
        snapshot=replace(snapshot, jobs=jobs),
        index=index,
        revisions={seen.pk: seen.revision for seen in index.jobs.values()},
        by_pk={int(job.id): job for job in jobs},
    )


def _refreshed_estimate_base(base: _EstimateBase, *, leaving_out: int) -> _EstimateBase:
    """`base` with the live jobs as they are now: those whose revision moved, and new ones, read
    again; ended ones dropped; the rest kept as they were read."""
    order = _raw_rows(
        Job.objects.filter(state__in=ACTIVE_STATES)
        .exclude(pk=leaving_out)
        .order_by("submitted_at", "id")
        .values_list("id", "revision")
    )
    changed = [pk for pk, revision in order if base.revisions.get(pk) != revision]
    if not changed and len(order) == len(base.revisions):
        return base
    by_pk = dict(base.by_pk)
    seen_jobs = {key: seen for key, seen in base.index.jobs.items()}
    if changed:
        quota_names = {quota_id: name for name, quota_id in base.index.quota_ids.items()}
        node_names = {node_id: name for name, node_id in base.index.node_ids.items()}
        held: dict[int, list[tuple[str, Any, float]]] = defaultdict(list)
        for job_id, node_id, devices, fraction in _raw_rows(
            ReplicaPlacementRecord.objects.filter(job_id__in=changed, job__state__in=HOLDING_STATES)
            .order_by("job_id", "id")
            .values_list("job_id", "node_id", "devices", "fraction")
        ):
            held[job_id].append(
                (node_names[node_id], devices if isinstance(devices, str) else tuple(devices), fraction)
            )
        width = len(_ENGINE_JOB_COLUMNS)
        for row in _raw_rows(
            Job.objects.filter(pk__in=changed)
            .annotate(submitted=_Moment("submitted_at"), started=_Moment("started_at"), evicted=_Moment("evicted_at"))
            .values_list(
                *_ENGINE_JOB_COLUMNS, "name", "requeue", "revision", "reason_code", "reason_message", "position"
            )
        ):
            pk = row[0]
            name, requeue, revision, reason_code, reason_message, position = row[width:]
            key = job_key(pk)
            by_pk[pk] = _engine_job(key, row, quota_names[row[_QUOTA_ID]], tuple(held.get(pk, ())))
            seen_jobs[key] = JobSeen(
                pk=pk,
                name=name,
                state=row[_STATE],
                revision=revision,
                quota_id=row[_QUOTA_ID],
                gpus=row[_GPUS],
                grace_seconds=row[_GRACE_SECONDS],
                requeue=bool(requeue),
                reason_code=reason_code,
                reason_message=reason_message,
                position=position,
            )
    live = {pk for pk, _revision in order}
    jobs = tuple(by_pk[pk] for pk, _revision in order if pk in by_pk)
    index = SnapshotIndex(
        jobs={key: seen for key, seen in seen_jobs.items() if seen.pk in live},
        node_ids=base.index.node_ids,
        quota_ids=base.index.quota_ids,
        fence_token=base.index.fence_token,
        fence_generation=base.index.fence_generation,
    )
    return _EstimateBase(
        other_changes=base.other_changes,
        built_at=base.built_at,
        snapshot=replace(base.snapshot, jobs=jobs),
        index=index,
        revisions=dict(order),
        by_pk={pk: job for pk, job in by_pk.items() if pk in live},
    )


def estimate_snapshot(now: datetime, *, job_pk: int) -> tuple[engine.Snapshot, SnapshotIndex]:
    """`build_snapshot` for a dry-run submit of the (saved, to be rolled back) job `job_pk`.

    The cluster is read in full at most every SCHEDULER_ESTIMATE_SNAPSHOT_SECONDS (default
    ESTIMATE_SNAPSHOT_SECONDS) and whenever an audited change other than a job's happened; in
    between only the live jobs that changed are read again. The job itself is read every time
    and goes last, as the newest submission does in `build_snapshot`'s order. An estimate is a
    forecast, and the submission it precedes meets a fresh cycle.
    """
    key = job_key(job_pk)
    other_changes = _other_changes()
    base = _estimate_base.get("cluster")
    reuse_for = float(getattr(settings, "SCHEDULER_ESTIMATE_SNAPSHOT_SECONDS", ESTIMATE_SNAPSHOT_SECONDS))
    if base is None or base.other_changes != other_changes or time.monotonic() - base.built_at > reuse_for:
        base = _full_estimate_base(now, leaving_out=key, other_changes=other_changes)
    else:
        base = _refreshed_estimate_base(base, leaving_out=job_pk)
    _estimate_base["cluster"] = base
    row = _raw_rows(
        Job.objects.filter(pk=job_pk)
        .annotate(submitted=_Moment("submitted_at"), started=_Moment("started_at"), evicted=_Moment("evicted_at"))
        .values_list(*_ENGINE_JOB_COLUMNS, "name", "quota__name")
    )[0]
    width = len(_ENGINE_JOB_COLUMNS)
    name, quota_name = row[width:]
    index = SnapshotIndex(
        jobs={**base.index.jobs},
        node_ids=base.index.node_ids,
        quota_ids=base.index.quota_ids,
        fence_token=base.index.fence_token,
        fence_generation=base.index.fence_generation,
    )
    index.jobs[key] = JobSeen(
        pk=job_pk,
        name=name,
        state=row[_STATE],
        revision=0,
        quota_id=row[_QUOTA_ID],
        gpus=row[_GPUS],
        grace_seconds=row[_GRACE_SECONDS],
        requeue=True,
        reason_code="",
        reason_message="",
        position=None,
    )
    job = _engine_job(key, row[:width], quota_name, ())
    snapshot = replace(base.snapshot, jobs=(*base.snapshot.jobs, job), now=now.timestamp())
    return snapshot, index
