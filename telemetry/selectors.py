"""Reads of per-GPU telemetry, shared by the Nodes page, the Job page, /metrics and the sampler.

Each read is one query whatever the number of nodes, GPUs or samples.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection

from quotas.models import Node, NodeExecutor, NodeState
from scheduling.models import Job
from telemetry.models import GpuSample, Resolution

DEFAULTS: dict[str, float] = {
    "TELEMETRY_SAMPLE_SECONDS": 5.0,
    "TELEMETRY_RAW_RETENTION_HOURS": 1.0,
    "TELEMETRY_MINUTE_RETENTION_DAYS": 7.0,
    "TELEMETRY_HOUR_RETENTION_DAYS": 90.0,
    "TELEMETRY_STALE_SECONDS": 60.0,
    "TELEMETRY_SIMULATED_GPU_MEMORY_MIB": 81_920,
    "TELEMETRY_MAX_SAMPLES_PER_CALL": 1_024,
}


def setting(name: str) -> float:
    return float(getattr(settings, name, DEFAULTS[name]))


def retention() -> dict[int, timedelta]:
    """How long each level is kept (settings, docs/telemetry.md)."""
    return {
        Resolution.RAW: timedelta(hours=setting("TELEMETRY_RAW_RETENTION_HOURS")),
        Resolution.MINUTE: timedelta(days=setting("TELEMETRY_MINUTE_RETENTION_DAYS")),
        Resolution.HOUR: timedelta(days=setting("TELEMETRY_HOUR_RETENTION_DAYS")),
    }


def resolution_for(window: timedelta) -> int:
    """The finest level that still covers a window: samples for the last hour, minutes for a week."""
    kept = retention()
    for level in (Resolution.RAW, Resolution.MINUTE):
        if window <= kept[level]:
            return int(level)
    return int(Resolution.HOUR)


class GpuLatest(NamedTuple):
    node_id: int
    node: str
    gpu: int
    job_id: int | None
    job: str
    at: datetime
    utilisation: float
    memory_used_mib: int
    memory_total_mib: int


def _aware(value: Any) -> datetime:
    """A datetime column as a raw cursor returns it: text on SQLite (UTC), aware on PostgreSQL."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def latest_gpu_readings(*, now: datetime, node_ids: Iterable[int] | None = None) -> list[GpuLatest]:
    """Each GPU's latest sample of the last TELEMETRY_STALE_SECONDS, by node and GPU: a GPU whose
    node stopped reporting has none (a stale figure would read as a live one)."""
    qn = connection.ops.quote_name
    samples, nodes, jobs = (qn(model._meta.db_table) for model in (GpuSample, Node, Job))
    since = connection.ops.adapt_datetimefield_value(now - timedelta(seconds=setting("TELEMETRY_STALE_SECONDS")))
    params: list[Any] = [Resolution.RAW, since]
    only = ""
    if node_ids is not None:
        wanted = [int(node_id) for node_id in node_ids]
        if not wanted:
            return []
        only = f" AND node_id IN ({', '.join('%s' for _ in wanted)})"
        params.extend(wanted)
    # The newest sample time per GPU over a short range of (resolution, at), then its row by
    # the partial index on raw rows' (node, gpu, at): two index ranges, not a scan of the hour's
    # samples. `resolution = 0` is written out: a planner uses a partial index only for a
    # condition it can read, not a parameter.
    sql = (
        f"SELECT s.node_id, n.name, s.gpu, s.job_id, j.name, s.at, s.utilisation, s.memory_used_mib, "
        f"s.memory_total_mib FROM {samples} s "
        f"JOIN (SELECT node_id, gpu, MAX(at) AS last FROM {samples} WHERE resolution = %s AND at >= %s{only} "
        f"GROUP BY node_id, gpu) m ON s.node_id = m.node_id AND s.gpu = m.gpu AND s.at = m.last "
        f"JOIN {nodes} n ON n.id = s.node_id LEFT JOIN {jobs} j ON j.id = s.job_id "
        f"WHERE s.resolution = {int(Resolution.RAW)} ORDER BY s.node_id, s.gpu, s.id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    latest: dict[tuple[int, int], GpuLatest] = {}
    for node_id, node, gpu, job_id, job, at, busy, used, total in rows:
        # Two rows at the same instant (a report sent twice): the last written wins.
        latest[(node_id, gpu)] = GpuLatest(node_id, node, gpu, job_id, job or "", _aware(at), busy, used, total)
    return list(latest.values())


class GpuSeries(NamedTuple):
    """One GPU's figures over time, as one job held it."""

    key: str  # "<node id>:<gpu>", what a live change names it by
    label: str  # "dgx-1 GPU 3"
    at: list[datetime]
    utilisation: list[float]
    memory_used_mib: list[int]
    memory_total_mib: int


def gpu_key(node_id: int, gpu: int) -> str:
    return f"{node_id}:{gpu}"


def gpu_label(node: str, gpu: int) -> str:
    return f"{node} GPU {gpu}"


def job_gpu_series(*, job_id: int, since: datetime, resolution: int) -> list[GpuSeries]:
    """The job's GPUs since `since` at one level, one series per (node, GPU), in one query."""
    queryset = (
        GpuSample.objects.filter(job_id=job_id, resolution=resolution, at__gte=since)
        .order_by("at", "node_id", "gpu")
        .values_list("node_id", "node__name", "gpu", "at", "utilisation", "memory_used_mib", "memory_total_mib")
    )
    # Through the driver, not Django's per-value converters: a day of minutes for 8 GPUs is
    # 11,520 datetimes, and fromisoformat (in _aware) parses them several times faster.
    sql, params = queryset.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    series: dict[str, GpuSeries] = {}
    for node_id, node, gpu, raw_at, busy, used, total in rows:
        at = _aware(raw_at)
        key = gpu_key(node_id, gpu)
        entry = series.get(key)
        if entry is None:
            entry = series[key] = GpuSeries(key, gpu_label(node, gpu), [], [], [], total)
        entry.at.append(at)
        entry.utilisation.append(busy)
        entry.memory_used_mib.append(used)
    return sorted(series.values(), key=lambda entry: entry.label)


class SampledNode(NamedTuple):
    id: int
    name: str
    gpus: int


def simulated_nodes() -> list[SampledNode]:
    """The nodes whose GPUs the simulated executor stands for: simulated and up (a node that is
    down reports nothing, as a real one would not)."""
    rows = (
        Node.objects.filter(executor=NodeExecutor.SIMULATED, gpus__gt=0)
        .exclude(state=NodeState.NOT_READY)
        .order_by("id")
        .values_list("id", "name", "gpus")
    )
    return [SampledNode(*row) for row in rows]


def existing_job_ids(job_ids: Iterable[int]) -> set[int]:
    wanted = set(job_ids)
    if not wanted:
        return set()
    return set(Job.objects.filter(pk__in=wanted).values_list("pk", flat=True))


def level_edge(resolution: int, *, newest: bool) -> datetime | None:
    """The oldest or newest `at` of one level (the downsampling's watermark): one seek on the
    (resolution, at) index. Asked apart, as SQLite answers MIN and MAX together with a scan."""
    rows = GpuSample.objects.filter(resolution=resolution).order_by("-at" if newest else "at")
    return rows.values_list("at", flat=True).first()


# How far back the Job page's chart looks.
JOB_CHART_WINDOW = timedelta(hours=24)


def job_gpu_history(*, job_id: int, since: datetime, now: datetime) -> tuple[int, list[GpuSeries]]:
    """The job's GPUs since `since` at the finest level that covers the window, and, under
    averages, the raw samples newer than the last average (the minutes not averaged yet), so a
    chart runs up to now. Two queries at most. Returns (resolution, series)."""
    level = resolution_for(now - since)
    series = job_gpu_series(job_id=job_id, since=since, resolution=level)
    if level == Resolution.RAW:
        return level, series
    last = max((entry.at[-1] for entry in series), default=None)
    tail_since = last + timedelta(seconds=level) if last is not None else since
    by_key = {entry.key: entry for entry in series}
    for entry in job_gpu_series(job_id=job_id, since=tail_since, resolution=Resolution.RAW):
        known = by_key.get(entry.key)
        if known is None:
            by_key[entry.key] = entry
            continue
        known.at.extend(entry.at)
        known.utilisation.extend(entry.utilisation)
        known.memory_used_mib.extend(entry.memory_used_mib)
    return level, sorted(by_key.values(), key=lambda entry: entry.label)
