"""The cycle's snapshot: the database as the engine's frozen snapshot.

`build_snapshot` turns the database into the engine's frozen snapshot in a fixed number of
queries (six, whatever the size of the cluster), and keeps an index from the engine's string
ids back to rows, with the state and revision each job had when it was read.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import FloatField, Func, QuerySet

from quotas.models import Node, NodeExecutor, NodeState, Quota, ResourcePool
from scheduling import engine
from scheduling.engine import types as engine_types
from scheduling.models import ACTIVE_STATES, HOLDING_STATES, Job, ReplicaPlacementRecord, SchedulerFence


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


# What a snapshot keeps of each job beside its engine columns, to check a decision against at commit.
SEEN_JOB_COLUMNS = ("name", "requeue", "revision", "reason_code", "reason_message", "position")


def job_seen(row: tuple[Any, ...]) -> JobSeen:
    """A job as read from a row of `ENGINE_JOB_COLUMNS` followed by `SEEN_JOB_COLUMNS`."""
    name, requeue, revision, reason_code, reason_message, position = row[len(ENGINE_JOB_COLUMNS) :]
    # Positional, in JobSeen's field order: keyword arguments cost a snapshot of S4 a tenth of a second.
    return JobSeen(
        row[0],
        name,
        row[STATE_AT],
        revision,
        row[QUOTA_ID_AT],
        row[GPUS_AT],
        row[GRACE_SECONDS_AT],
        bool(requeue),
        reason_code,
        reason_message,
        position,
    )


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


def raw_rows(queryset: QuerySet[Any]) -> list[tuple[Any, ...]]:
    """The rows of a `values_list` queryset as the database driver returns them.

    Django's per-value converters (datetime parsing and time zones on SQLite, JSON decoding)
    cost more than the query itself on a snapshot of 10,000 jobs; the snapshot needs only epoch
    seconds and plain values, which `_epoch` and `stored_devices` make at C speed.
    """
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows: list[tuple[Any, ...]] = cursor.fetchall()
    return rows


class Moment(Func):
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
    """Seconds since the epoch of a `Moment` as the driver returns it."""
    if moment is None or isinstance(moment, float):
        return moment
    if isinstance(moment, str):
        return datetime.fromisoformat(moment).replace(tzinfo=UTC).timestamp()
    return moment.timestamp()


@lru_cache(maxsize=4096)
def _parsed_devices(text: str) -> tuple[int, ...]:
    return tuple(json.loads(text))


def stored_devices(value: Any) -> tuple[int, ...]:
    """A placement's devices as the driver returns the JSON column: text (parsed once per
    distinct value: a pool has few device sets, and a snapshot reads thousands), or a list."""
    return _parsed_devices(value) if isinstance(value, str) else tuple(value)


# What an engine job is made of, in this order; `engine_job` reads the row by these positions.
ENGINE_JOB_COLUMNS = (
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
    "submitted",  # the Moment of submitted_at, and so on
    "state",
    "started",
    "grace_seconds",
    "beneficiary_id",
    "evicted",
    "duration",
)
QUOTA_ID_AT, GPUS_AT, STATE_AT, GRACE_SECONDS_AT = (
    ENGINE_JOB_COLUMNS.index(column) for column in ("quota_id", "gpus", "state", "grace_seconds")
)


class _EngineJobs:
    """The engine jobs of the last snapshot this process built, by job id, with everything each
    was built from (its engine columns, quota name and replicas as read). Most jobs are the same
    from one cycle to the next, and building 10,000 frozen dataclasses costs a cycle tens of
    milliseconds; a job whose row changed in any way is built anew. Keyed by id and compared,
    not keyed by what it was built from: hashing that 18-value key for each of S4's 150,000 jobs
    cost more than the comparison. Each snapshot replaces the whole map, so it holds only the
    active jobs."""

    built: dict[int, tuple[tuple[Any, ...], str, tuple[tuple[str, Any, float], ...], engine.Job]] = {}


_engine_jobs = _EngineJobs()


def engine_job(key: str, row: tuple[Any, ...], quota: str, replicas: tuple[tuple[str, Any, float], ...]) -> engine.Job:
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
        duration,
    ) = row[: len(ENGINE_JOB_COLUMNS)]
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
            engine.ReplicaPlacement(node=node, devices=stored_devices(devices), fraction=fraction)
            for node, devices, fraction in replicas
        ),
        grace_seconds=grace_seconds,
        workspace=workspace,
        beneficiary=None if beneficiary_id is None else str(beneficiary_id),
        evicted_at=_epoch(evicted_at),
        duration=duration,
    )


def engine_quotas() -> tuple[dict[int, str], list[engine.Quota]]:
    """The quota tree as the engine takes it, in one query; and each quota's name by id."""
    quota_rows = raw_rows(
        Quota.objects.order_by("id").values_list(
            "id",
            "name",
            "parent_id",
            "gpus",
            "cpu",
            "memory_gib",
            "limit",
            "cpu_limit",
            "memory_gib_limit",
            "weight",
            "rank",
            "child_preemption",
            "same_level_preemption",
            "queue_policy",
            "min_runtime_seconds",
            "pool__name",
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
            cpu_limit=cpu_limit,
            memory_gib_limit=memory_gib_limit,
            weight=weight,
            rank=rank,
            child_preemption=bool(child_preemption),
            same_level_preemption=bool(same_level_preemption),
            queue_policy=queue_policy,
            min_runtime_seconds=None if min_runtime is None else float(min_runtime),
            created_order=order,
            pool=pool,
        )
        for order, (
            _id,
            name,
            parent_id,
            gpus,
            cpu,
            memory_gib,
            limit,
            cpu_limit,
            memory_gib_limit,
            weight,
            rank,
            child_preemption,
            same_level_preemption,
            queue_policy,
            min_runtime,
            pool,
        ) in enumerate(quota_rows)
    ]
    return quota_names, quotas


class NodesAndQuotas(NamedTuple):
    """What a snapshot reads besides the jobs: the fence, the pools' placement policies, the nodes
    and the quota tree (a few thousand rows at most; the jobs are the bulk)."""

    fence_token: int
    fence_generation: int
    placement: str
    pool_placements: tuple[tuple[str, str], ...]
    nodes: list[engine.Node]
    node_names: dict[int, str]
    quota_names: dict[int, str]
    quotas: list[engine.Quota]


# A Slurm node's label: the devices Slurm jobs outside the console hold (slurm.inventory writes it).
GPUS_OUTSIDE_LABEL = "slurm.gpus_outside"


def held_outside(labels: Any) -> tuple[int, ...]:
    """The devices of a Slurm node that Slurm jobs outside the console hold, as the Slurm sync
    writes them in the node's labels (`slurm.gpus_outside`: "0,1"; docs/slurm.md). The labels as
    the driver returns the JSON column: text, or already a dict."""
    if isinstance(labels, str):
        if GPUS_OUTSIDE_LABEL not in labels:
            return ()
        labels = json.loads(labels)
    written = labels.get(GPUS_OUTSIDE_LABEL, "") if isinstance(labels, dict) else ""
    if not isinstance(written, str):
        return ()
    return tuple(int(part) for part in written.split(",") if part.strip().isdigit())


def read_nodes_and_quotas() -> NodesAndQuotas:
    """The fence first (see `build_snapshot`), then the pools, the nodes and the quotas, in four
    queries. Each node and quota carries its pool's name, and the engine schedules each pool on
    its own (engine.pools)."""
    fence = SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID).values_list("token", "generation").first()
    fence_token, fence_generation = fence if fence is not None else (0, 0)

    pool_placements = tuple(ResourcePool.objects.order_by("id").values_list("name", "placement"))
    placement = pool_placements[0][1] if pool_placements else engine_types.PACK

    nodes: list[engine.Node] = []
    node_names: dict[int, str] = {}
    node_rows = raw_rows(
        Node.objects.order_by("id").values_list(
            "id", "name", "gpus", "cpu", "memory_gib", "state", "pool__name", "executor", "labels"
        )
    )
    for node_id, name, gpus, cpu, memory_gib, state, pool, executor, labels in node_rows:
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
                pool=pool,
                held_outside=held_outside(labels) if executor == NodeExecutor.SLURM else (),
            )
        )
        node_names[node_id] = name

    quota_names, quotas = engine_quotas()
    return NodesAndQuotas(
        fence_token, fence_generation, placement, pool_placements, nodes, node_names, quota_names, quotas
    )


def build_snapshot(now: datetime) -> tuple[engine.Snapshot, SnapshotIndex]:
    """The cluster as the engine sees it: ready and down nodes, the quota tree, the active jobs.

    The fence is read first: a cycle that commits after this read makes the snapshot stale, and
    the commit then refuses it (see scheduling.cycle).
    """
    frame = read_nodes_and_quotas()
    node_names, quota_names = frame.node_names, frame.quota_names
    index = SnapshotIndex(
        node_ids={name: node_id for node_id, name in node_names.items()},
        quota_ids={name: quota_id for quota_id, name in quota_names.items()},
        fence_token=frame.fence_token,
        fence_generation=frame.fence_generation,
    )

    job_rows = raw_rows(
        Job.objects.filter(state__in=ACTIVE_STATES)
        .order_by("submitted_at", "id")
        .annotate(submitted=Moment("submitted_at"), started=Moment("started_at"), evicted=Moment("evicted_at"))
        .values_list(*ENGINE_JOB_COLUMNS, *SEEN_JOB_COLUMNS)
    )
    # Per holding job, its replicas as read: (node name, devices as stored, fraction).
    held: dict[int, list[tuple[str, Any, float]]] = defaultdict(list)
    if any(row[STATE_AT] in HOLDING_STATES for row in job_rows):
        placement_rows = raw_rows(
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
    kept: dict[int, tuple[tuple[Any, ...], str, tuple[tuple[str, Any, float], ...], engine.Job]] = {}
    width = len(ENGINE_JOB_COLUMNS)
    for row in job_rows:
        pk = row[0]
        key = str(pk)  # job_key, inlined: this loop runs once per active job
        seen_jobs[key] = job_seen(row)
        quota = quota_names[row[QUOTA_ID_AT]]
        replicas = tuple(held[pk]) if pk in held else ()
        columns = row[:width]
        previous = built.get(pk)
        if previous is not None and previous[0] == columns and previous[1] == quota and previous[2] == replicas:
            job = previous[3]
        else:
            job = engine_job(key, row, quota, replicas)
        kept[pk] = (columns, quota, replicas, job)
        jobs.append(job)
    _engine_jobs.built = kept

    snapshot = engine.Snapshot(
        nodes=tuple(frame.nodes),
        quotas=tuple(frame.quotas),
        jobs=tuple(jobs),
        now=now.timestamp(),
        placement=frame.placement,
        pool_placements=frame.pool_placements,
    )
    return snapshot, index


def held_devices() -> tuple[dict[int, tuple[int, str]], list[tuple[int, int, tuple[int, ...], float]]]:
    """Every node's GPUs and state, and every held replica (job id, node id, devices,
    fraction): the devices as the caller's transaction sees them right now."""
    nodes = {
        node_id: (gpus, state) for node_id, gpus, state in raw_rows(Node.objects.values_list("id", "gpus", "state"))
    }
    held = [
        (job_id, node_id, stored_devices(devices), fraction)
        for job_id, node_id, devices, fraction in raw_rows(
            ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES).values_list(
                "job_id", "node_id", "devices", "fraction"
            )
        )
    ]
    return nodes, held
