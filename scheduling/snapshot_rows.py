"""The rows a snapshot reads, as the engine takes them (split out of `snapshot`, which reads
the jobs and keeps a worker's snapshot between cycles): `raw_rows`, the driver's rows without
Django's per-value converters; a job's engine columns and `engine_job`, which decodes them; the
columns kept beside them and `job_seen`, the `JobSeen` a decision is checked against; and
the frame, what a snapshot reads besides the jobs (the fence, the pools, the nodes and the quota
tree: a few thousand rows at most, each rebuilt only when its rows changed); and `held_devices`,
the devices held right now, that the commit reads."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import fields
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import FloatField, Func, Q, QuerySet

from quotas.models import Node, NodeExecutor, NodeState, Quota, ResourcePool
from scheduling import engine, snapshot_moves
from scheduling.engine import types as engine_types
from scheduling.models import HOLDING_STATES, ReplicaPlacementRecord, SchedulerFence


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
QUOTA_ID_AT, GPUS_AT, STATE_AT, GRACE_SECONDS_AT, SUBMITTED_AT = (
    ENGINE_JOB_COLUMNS.index(column) for column in ("quota_id", "gpus", "state", "grace_seconds", "submitted")
)


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
    # The row's version as read (`_mark`, PostgreSQL), for writes that must meet the row as read.
    version: str | None = None


# What a snapshot keeps of each job beside its engine columns, to check a decision against at commit.
# The reason is the one the job shows (scheduling.pending_reasons): annotate the query with it.
SEEN_JOB_COLUMNS = ("name", "requeue", "revision", "shown_reason_code", "shown_reason_message", "shown_reason_position")


def job_seen(row: tuple[Any, ...], version: str | None = None) -> JobSeen:
    """A job as read from a row of `ENGINE_JOB_COLUMNS` followed by `SEEN_JOB_COLUMNS`."""
    name, requeue, revision, reason_code, reason_message, position = row[_SEEN_AT:_SEEN_TO]
    # Made from its values at once (`tuple.__new__`), not through the named tuple's `__new__` and
    # its keywords: a fresh worker's first snapshot of S4 builds 150,000 of them.
    return _new_tuple(
        JobSeen,
        (
            row[0],
            name,
            row[STATE_AT],
            revision,
            row[QUOTA_ID_AT],
            row[GPUS_AT],
            row[GRACE_SECONDS_AT],
            requeue if requeue.__class__ is bool else bool(requeue),
            reason_code,
            reason_message,
            position,
            version,
        ),
    )


# Where a row's SEEN_JOB_COLUMNS begin and end, after its ENGINE_JOB_COLUMNS.
_SEEN_AT = len(ENGINE_JOB_COLUMNS)
_SEEN_TO = _SEEN_AT + len(SEEN_JOB_COLUMNS)
# A named tuple made from its values at once, without its `__new__`'s call.
_new_tuple = tuple.__new__


# engine.Job's fields in the order `engine_job` passes them positionally: a keyword call costs a
# fresh worker's first snapshot of S4 (150,000 jobs) 0.1 s more. Checked at import, so that a
# field added to or moved in the engine's Job fails here, not as a job built wrong.
_JOB_FIELDS = (
    "id",
    "quota",
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
    "placements",
    "grace_seconds",
    "workspace",
    "beneficiary",
    "evicted_at",
    "duration",
)
if tuple(field.name for field in fields(engine.Job)) != _JOB_FIELDS:  # pragma: no cover - a guard
    raise ImportError("scheduling.engine.Job's fields moved: update snapshot_rows.engine_job")

_Job = engine.Job
_ENGINE_WIDTH = len(ENGINE_JOB_COLUMNS)
_Placement = engine.ReplicaPlacement


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
    ) = row[:_ENGINE_WIDTH]
    if not replicas:
        placements: tuple[engine.ReplicaPlacement, ...] = ()
    elif len(replicas) == 1:  # most running jobs: no generator
        node, devices, fraction = replicas[0]
        placements = (_Placement(node, stored_devices(devices), fraction),)
    else:
        placements = tuple(_Placement(node, stored_devices(devices), fraction) for node, devices, fraction in replicas)
    # Positionally, in _JOB_FIELDS's order; the moments are already floats on PostgreSQL (or None:
    # a pending job's start), and parsed by `_epoch` elsewhere.
    return _Job(
        key,
        quota,
        gpus,
        replica_count,
        min_replicas,
        priority,
        preemptible if preemptible.__class__ is bool else bool(preemptible),
        cpu,
        memory_gib,
        (submitted_at if submitted_at.__class__ is float else _epoch(submitted_at)) or 0.0,
        state,
        started_at if started_at is None or started_at.__class__ is float else _epoch(started_at),
        placements,
        grace_seconds,
        workspace,
        None if beneficiary_id is None else str(beneficiary_id),
        evicted_at if evicted_at is None or evicted_at.__class__ is float else _epoch(evicted_at),
        duration,
    )


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


class _Built:
    """The nodes and quotas of the last snapshot, each with the rows they were built from: most
    cycles read the same rows, and building S4's 21,000 frozen engine objects again costs a tenth
    of a second. Each a tuple assigned at once: threads of a web process build snapshots too."""

    nodes: tuple[list[tuple[Any, ...]], list[engine.Node], dict[int, str]] = ([], [], {})
    quotas: tuple[list[tuple[Any, ...]], dict[int, str], list[engine.Quota]] = ([], {}, [])
    # The last frame and the version it was read at, where writes are logged (snapshot_moves).
    frame: tuple[tuple[int, int] | None, NodesAndQuotas | None] = (None, None)


_built = _Built()


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
    built_rows, built_names, built_quotas = _built.quotas
    if built_rows == quota_rows:  # the tree as last built: eleven thousand quotas at S4
        return dict(built_names), list(built_quotas)
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
    _built.quotas = (quota_rows, dict(quota_names), list(quotas))
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
    queries; on simulate's database, only the fence while nothing else was written since the last
    (snapshot_moves.frame_version). Each node and quota carries its pool's name, and the engine
    schedules each pool on its own (engine.pools)."""
    fence = SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID).values_list("token", "generation").first()
    fence_token, fence_generation = fence if fence is not None else (0, 0)
    version, (kept_at, kept) = snapshot_moves.frame_version(), _built.frame
    if version is not None and version == kept_at and kept is not None:
        # Nothing it reads written since (simulate's database counts the writes): a copy, as built.
        nodes_now, names_now, quota_names_now = list(kept.nodes), dict(kept.node_names), dict(kept.quota_names)
        placed = kept.placement, kept.pool_placements
        return NodesAndQuotas(
            fence_token, fence_generation, *placed, nodes_now, names_now, quota_names_now, list(kept.quotas)
        )
    _built.frame = (None, None)

    pool_placements = tuple(ResourcePool.objects.order_by("id").values_list("name", "placement"))
    placement = pool_placements[0][1] if pool_placements else engine_types.PACK

    nodes: list[engine.Node] = []
    node_names: dict[int, str] = {}
    node_rows = raw_rows(
        Node.objects.order_by("id").values_list(
            "id", "name", "gpus", "cpu", "memory_gib", "state", "pool__name", "executor", "labels"
        )
    )
    built_rows, built_nodes, built_names = _built.nodes
    if built_rows == node_rows:  # the nodes as last built: ten thousand at S4
        nodes, node_names = list(built_nodes), dict(built_names)
        read_rows, node_rows = node_rows, []
    else:
        read_rows = node_rows
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

    if node_rows:
        _built.nodes = (read_rows, list(nodes), dict(node_names))
    quota_names, quotas = engine_quotas()
    frame = NodesAndQuotas(
        fence_token, fence_generation, placement, pool_placements, nodes, node_names, quota_names, quotas
    )
    if version is not None:  # a base once committed (at once outside a transaction); a copy, as returned
        kept = NodesAndQuotas(*frame[:4], list(nodes), dict(node_names), dict(quota_names), list(quotas))
        transaction.on_commit(lambda: setattr(_built, "frame", (version, kept)))
    return frame


def held_devices(
    node_ids: Collection[int] | None = None, job_ids: Collection[int] = ()
) -> tuple[dict[int, tuple[int, str]], list[tuple[int, int, tuple[int, ...], float]]]:
    """Nodes' GPUs and state, and the held replicas (job id, node id, devices, fraction) on them:
    the devices as the caller's transaction sees them right now. Of every node, or of `node_ids`
    only, with every replica of the jobs `job_ids` wherever it is."""
    node_rows: QuerySet[Any] | None = Node.objects.all()
    placements = ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES)
    if node_ids is not None:
        if not node_ids and not job_ids:
            return {}, []
        node_rows = Node.objects.filter(pk__in=list(node_ids)) if node_ids else None
        on = Q(node_id__in=list(node_ids)) if node_ids else Q(job_id__in=list(job_ids))
        placements = placements.filter(on | Q(job_id__in=list(job_ids)) if node_ids and job_ids else on)
    nodes = (
        {}
        if node_rows is None
        else {node_id: (gpus, state) for node_id, gpus, state in raw_rows(node_rows.values_list("id", "gpus", "state"))}
    )
    held = [
        (job_id, node_id, stored_devices(devices), fraction)
        for job_id, node_id, devices, fraction in raw_rows(
            placements.values_list("job_id", "node_id", "devices", "fraction")
        )
    ]
    return nodes, held
