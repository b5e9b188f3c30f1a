"""Retention of per-GPU telemetry: raw samples into 1-minute averages, those into 1-hour ones,
then each level pruned past its retention (docs/telemetry.md). Beat runs it every minute
(tasks.downsample_and_prune). Every write is a bulk insert or a ranged delete."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from django.db import transaction
from django.db.models import Avg, Max
from django.db.models.functions import TruncHour, TruncMinute

from scheduling import bulk
from scheduling.clock import get_clock
from telemetry import selectors
from telemetry.models import GpuSample, Resolution
from telemetry.services import _COLUMNS

# The downsampling leaves a bucket alone until this long after it ends: a heartbeat a few
# seconds late still lands in the average.
SETTLE: Final = timedelta(seconds=15)
_TRUNCATE = {Resolution.MINUTE: TruncMinute, Resolution.HOUR: TruncHour}
# Each statement averages at most this many buckets, so a backlog (beat stopped for a day) is
# caught up in bounded pieces rather than in one read of millions of rows.
_BUCKETS_PER_STATEMENT: Final = 60


def _floor(moment: datetime, seconds: int) -> datetime:
    epoch = moment.timestamp()
    return datetime.fromtimestamp(epoch - epoch % seconds, tz=UTC)


def _downsample_level(source: int, target: int, *, now: datetime) -> int:
    """Average the `source` rows of every whole `target` bucket not averaged yet, per node, GPU
    and job (a GPU that changed hands within a minute gives each job its own average)."""
    width = timedelta(seconds=target)
    end = _floor(now - SETTLE, target)
    last = selectors.level_edge(target, newest=True)
    if last is not None:
        start = last + width
    else:
        first = selectors.level_edge(source, newest=False)
        if first is None:
            return 0
        start = _floor(first, target)
    written = 0
    truncate = _TRUNCATE[Resolution(target)]
    while start < end:
        stop = min(end, start + width * _BUCKETS_PER_STATEMENT)
        averaged = (
            GpuSample.objects.filter(resolution=source, at__gte=start, at__lt=stop)
            .annotate(bucket=truncate("at", tzinfo=UTC))
            .values("bucket", "node_id", "gpu", "job_id")
            .annotate(busy=Avg("utilisation"), used=Avg("memory_used_mib"), total=Max("memory_total_mib"))
            .order_by("bucket", "node_id", "gpu", "job_id")
            .values_list("node_id", "gpu", "job_id", "bucket", "busy", "used", "total")
        )
        rows = [
            (node_id, gpu, job_id, target, bucket, round(busy, 1), round(used), total)
            for node_id, gpu, job_id, bucket, busy, used, total in averaged
        ]
        bulk.insert(GpuSample, _COLUMNS, rows)
        written += len(rows)
        start = stop
    return written


def downsample(*, now: datetime) -> dict[int, int]:
    """Raw samples into 1-minute averages, those into 1-hour ones; rows written per level."""
    with transaction.atomic():
        minutes = _downsample_level(Resolution.RAW, Resolution.MINUTE, now=now)
    with transaction.atomic():
        hours = _downsample_level(Resolution.MINUTE, Resolution.HOUR, now=now)
    return {Resolution.MINUTE: minutes, Resolution.HOUR: hours}


def prune(*, now: datetime) -> dict[int, int]:
    """Drop each level's rows older than its retention; rows deleted per level. One ranged DELETE
    per level (GpuSample has no signals or dependants, so Django deletes without fetching)."""
    deleted = {}
    for level, kept in selectors.retention().items():
        count, _ = GpuSample.objects.filter(resolution=level, at__lt=now - kept).delete()
        deleted[int(level)] = count
    return deleted


def downsample_and_prune(*, now: datetime | None = None) -> dict[str, dict[int, int]]:
    """The beat task's work: average first, so that nothing is pruned before it is averaged."""
    moment = now or get_clock().now()
    return {"downsampled": downsample(now=moment), "pruned": prune(now=moment)}
