"""The allocation history of quotas as chart series: the time ranges of the charts (1 h / 24 h /
7 d), and each quota's allocated, guaranteed and fair-share GPUs at a bounded number of moments
(steps while a window holds few samples, bucket means summed by the database beyond).
Read by the Resource Quotas Overview and the Quota page's Monitoring tab (quota_charts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection
from django.db.models import OuterRef, Subquery

from quotas.models import Quota
from scheduling import selectors as scheduling_selectors
from scheduling.models import AllocationSample
from scheduling.selectors import AllocationPoint


# The time switch of the charts (1 h / 24 h / 7 d): the range's key is in the URL (`range=24h`).
@dataclass(frozen=True, slots=True)
class ChartRange:
    key: str
    label: str
    span: timedelta
    words: str  # "the last hour", for headings and accessible names


CHART_RANGES: tuple[ChartRange, ...] = (
    ChartRange("1h", "1 h", timedelta(hours=1), "the last hour"),
    ChartRange("24h", "24 h", timedelta(hours=24), "the last 24 hours"),
    ChartRange("7d", "7 d", timedelta(days=7), "the last 7 days"),
)
DEFAULT_RANGE = CHART_RANGES[0]
# Points per series at every range, whatever the number of samples in it: a window with more
# samples than this is cut into this many equal buckets, each the time-weighted mean of the
# figure over it (10 s at 1 h, 4 min at 24 h, 28 min at 7 d), summed by the database; one more
# point says where it is now.
MAX_POINTS = 360
# How many points a live chart keeps while extended: the server's bound twice over, so an hour
# of a change a second on the 1 h chart still shows its range before the oldest points go.
LIVE_MAX_POINTS = 2 * MAX_POINTS + 2


def chart_range(key: str | None) -> ChartRange:
    """The range a URL asks for; anything else is the default (the page still answers)."""
    return next((entry for entry in CHART_RANGES if entry.key == key), DEFAULT_RANGE)


def plotly_moment(at: datetime) -> str:
    """Plotly reads ISO text as wall time; the axis says UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


Figures = tuple[float, float, float]  # allocated, guaranteed, fair share
_NONE: Figures = (0.0, 0.0, 0.0)


def _figures(point: AllocationPoint) -> Figures:
    return (point.allocated, point.guaranteed, point.fair_share)


def _held_at(points: Sequence[AllocationPoint], moments: Sequence[datetime]) -> list[Figures]:
    """Figures at each moment (ascending): a sample's figures hold until the next sample."""
    values, index, current = [], 0, _NONE
    for moment in moments:
        while index < len(points) and points[index].at <= moment:
            current = _figures(points[index])
            index += 1
        values.append(current)
    return values


# The bucket sums of AllocationSample, computed by the database: each sample weighted by how long
# it held inside its bucket (until the next sample or the bucket's end, whichever comes first),
# and per bucket its first moment and its last sample's figures (which hold into what follows).
# Only the epoch and the floor differ between the two databases.
EPOCH_SQL = {
    "sqlite": "((julianday(at) - 2440587.5) * 86400.0)",
    "postgresql": "EXTRACT(EPOCH FROM at)",
}
FLOOR_SQL = {"sqlite": "CAST({} AS INTEGER)", "postgresql": "FLOOR({})"}
_BUCKET_SQL = """
SELECT quota_id, bucket,
       SUM(allocated * (CASE WHEN t_next < bucket_end THEN t_next ELSE bucket_end END - t)),
       SUM(guaranteed * (CASE WHEN t_next < bucket_end THEN t_next ELSE bucket_end END - t)),
       SUM(fair_share * (CASE WHEN t_next < bucket_end THEN t_next ELSE bucket_end END - t)),
       MIN(t),
       MAX(CASE WHEN last_first = 1 THEN allocated END),
       MAX(CASE WHEN last_first = 1 THEN guaranteed END),
       MAX(CASE WHEN last_first = 1 THEN fair_share END)
FROM (
    SELECT quota_id, allocated, guaranteed, fair_share, t, bucket, %s + (bucket + 1) * %s AS bucket_end,
           COALESCE(LEAD(t) OVER (PARTITION BY quota_id ORDER BY at, id), %s) AS t_next,
           ROW_NUMBER() OVER (PARTITION BY quota_id, bucket ORDER BY at DESC, id DESC) AS last_first
    FROM (
        SELECT id, quota_id, at, allocated, guaranteed, fair_share, {epoch} AS t,
               {floor} AS bucket
        FROM {table}
        WHERE quota_id IN ({quotas}) AND at >= %s AND at < %s
    ) AS timed
) AS spans
GROUP BY quota_id, bucket
"""


def _epoch(moment: datetime) -> float:
    return moment.timestamp()


def _bucketed_history(
    quota_ids: Sequence[int], *, start: datetime, now: datetime, leading: Mapping[int, Figures]
) -> dict[int, list[Figures]]:
    """Per quota, MAX_POINTS bucket means over [start, now) and the figures that hold now, in one
    query whose answer is at most MAX_POINTS rows per quota, whatever the number of samples."""
    vendor = connection.vendor if connection.vendor in EPOCH_SQL else "postgresql"
    width = (now - start).total_seconds() / MAX_POINTS
    origin = _epoch(start)
    sql = _BUCKET_SQL.format(
        epoch=EPOCH_SQL[vendor],
        floor=FLOOR_SQL[vendor].format(f"(({EPOCH_SQL[vendor]}) - %s) / %s"),
        table=connection.ops.quote_name(AllocationSample._meta.db_table),
        quotas=", ".join(["%s"] * len(quota_ids)),
    )
    bounds = [connection.ops.adapt_datetimefield_value(moment) for moment in (start, now)]
    params: list[Any] = [origin, width, _epoch(now), origin, width, *quota_ids, *bounds]
    sums: dict[int, dict[int, tuple[Any, ...]]] = {quota_id: {} for quota_id in quota_ids}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for quota_id, bucket, *rest in cursor.fetchall():
            sums[quota_id][min(int(bucket), MAX_POINTS - 1)] = tuple(rest)
    series: dict[int, list[Figures]] = {}
    for quota_id in quota_ids:
        carry = leading.get(quota_id, _NONE)
        means: list[Figures] = []
        for bucket in range(MAX_POINTS):
            row = sums[quota_id].get(bucket)
            if row is None:
                means.append(carry)
                continue
            allocated, guaranteed, fair_share, first, *last = row
            # Before the bucket's first sample, the figures of the one before hold.
            head = max(0.0, float(first) - (origin + bucket * width))
            total = (float(allocated), float(guaranteed), float(fair_share))
            mean = tuple(round((value + held * head) / width, 3) for value, held in zip(total, carry, strict=True))
            means.append((mean[0], mean[1], mean[2]))
            carry = (float(last[0]), float(last[1]), float(last[2]))
        series[quota_id] = [*means, carry]
    return series


class AllocationSeries(NamedTuple):
    """Per quota, its figures at the chart's moments: steps (`bucketed` False) or bucket means."""

    moments: list[datetime]
    figures: dict[int, list[Figures]]
    bucketed: bool


def allocation_series(
    history: Mapping[int, Sequence[AllocationPoint]], *, since: datetime, now: datetime
) -> AllocationSeries | None:
    """The history of some quotas as steps at common moments: every change, and now with the
    figures that hold now. For a window of few samples (quota_allocation_series). None when no
    quota has a sample."""
    if not any(history.values()):
        return None
    # From the window's start, or from the first sample when the history is younger than that
    # (a fresh cluster's first minutes would otherwise be a sliver at the right edge).
    start = max(since, min(points[0].at for points in history.values() if points))
    changes = sorted({point.at for points in history.values() for point in points if start < point.at < now})
    moments = [start, *changes, now]
    return AllocationSeries(
        moments, {quota_id: _held_at(points, moments) for quota_id, points in history.items()}, False
    )


def quota_allocation_series(*, quota_ids: Sequence[int], since: datetime, now: datetime) -> AllocationSeries | None:
    """`allocation_series` of some quotas, read so that a long range costs no more than a short
    one: while the window holds at most MAX_POINTS - 1 samples they are read and drawn as steps;
    past that the database sums them per bucket (one query, at most MAX_POINTS rows per quota).
    Three or four queries whatever the number of quotas and samples."""
    ids = sorted(set(quota_ids))
    if not ids:
        return None
    window = AllocationSample.objects.filter(quota_id__in=ids, at__gte=since, at__lt=now)
    if window.count() <= MAX_POINTS - 1:
        history = scheduling_selectors.allocation_history(quota_ids=ids, since=since)
        return allocation_series({quota_id: history.get(quota_id, []) for quota_id in ids}, since=since, now=now)
    before = (
        AllocationSample.objects.filter(quota_id=OuterRef("pk"), at__lt=since).order_by("-at", "-id").values("pk")[:1]
    )
    leading_rows = AllocationSample.objects.filter(
        pk__in=Quota.objects.filter(pk__in=ids).annotate(last=Subquery(before)).values("last")
    ).values_list("quota_id", "allocated", "guaranteed", "fair_share")
    leading = {quota_id: (allocated, guaranteed, fair) for quota_id, allocated, guaranteed, fair in leading_rows}
    first = window.order_by("at").values_list("at", flat=True).first()
    start = since if leading or first is None else max(since, first)
    step = (now - start) / MAX_POINTS
    edges = [start + step * n for n in range(MAX_POINTS)] + [now]
    return AllocationSeries(edges, _bucketed_history(ids, start=start, now=now, leading=leading), True)
