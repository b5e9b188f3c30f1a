"""Reads of the console: the sign-ins a user holds, the dashboard's numbers per role, and the
quota charts, which compose the quota tree (quotas) with the allocation history (scheduling)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, TypedDict

from django.contrib.auth.models import AbstractBaseUser
from django.contrib.sessions.models import Session
from django.db import connection
from django.db.models import Count, OuterRef, Q, Subquery, Sum
from django.utils import timezone

from quotas import selectors as quota_selectors
from quotas.bounds import readable
from quotas.hooks import QuotaStatus
from quotas.models import Node, NodeState, Quota
from quotas.selectors import QuotaTreeRow
from scheduling import selectors as scheduling_selectors
from scheduling.models import HOLDING_STATES, AllocationSample, Job, JobState
from scheduling.selectors import AllocationPoint


def session_keys_of(user: AbstractBaseUser) -> list[str]:
    """Keys of the user's live database sessions.

    Django stores the user id only inside the encoded session data, so this decodes every live
    session: linear in live sessions, which is fine for a console's few hundred users and runs only
    on sign-out-everywhere and deactivation. It assumes the default database session engine."""
    user_id = str(user.pk)
    keys = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator(chunk_size=500):
        if str(session.get_decoded().get("_auth_user_id", "")) == user_id:
            keys.append(session.session_key)
    return keys


# ---- The dashboard's numbers, one read per role, each a fixed number of queries. ----

DASHBOARD_QUOTAS_SHOWN = 20


class ClusterFigures(TypedDict):
    """A platform admin's view: where the pool's GPUs are."""

    gpus_total: float
    gpus_in_use: float
    gpus_guaranteed: float
    gpus_idle: float
    nodes_total: int
    nodes_down: int
    nodes_cordoned: int
    jobs_pending: int


class QuotaUsage(TypedDict):
    quota: Quota
    status: QuotaStatus


class MemberFigures(TypedDict):
    """A member's view: their own jobs by state and the usage of the quotas they may use."""

    jobs_by_state: list[tuple[str, int]]
    jobs_total: int
    quotas: list[QuotaUsage]
    more_quotas: bool


def cluster_figures() -> ClusterFigures:
    """Three queries, whatever the size of the cluster. Idle is what ready nodes have that no job
    holds: GPUs on a node that is down are neither in use nor idle."""
    nodes = Node.objects.aggregate(
        all_gpus=Sum("gpus"),
        ready_gpus=Sum("gpus", filter=Q(state=NodeState.READY)),
        total=Count("id"),
        down=Count("id", filter=Q(state=NodeState.NOT_READY)),
        cordoned=Count("id", filter=Q(state__in=[NodeState.CORDONED, NodeState.DRAINING])),
    )
    jobs = Job.objects.aggregate(
        in_use=Sum("allocated_gpus", filter=Q(state__in=HOLDING_STATES)),
        pending=Count("id", filter=Q(state=JobState.PENDING)),
    )
    # Roots carry the guarantees of the whole tree (a child's guarantee is carved out of its parent's).
    guaranteed = Quota.objects.filter(parent__isnull=True).aggregate(guaranteed=Sum("gpus"))["guaranteed"]
    in_use = float(jobs["in_use"] or 0)
    return ClusterFigures(
        gpus_total=float(nodes["all_gpus"] or 0),
        gpus_in_use=in_use,
        gpus_guaranteed=float(guaranteed or 0),
        gpus_idle=max(float(nodes["ready_gpus"] or 0) - in_use, 0.0),
        nodes_total=int(nodes["total"]),
        nodes_down=int(nodes["down"]),
        nodes_cordoned=int(nodes["cordoned"]),
        jobs_pending=int(jobs["pending"] or 0),
    )


def member_figures(user: AbstractBaseUser) -> MemberFigures:
    """Jobs the user owns, counted by state, and the first quotas the user may use with their
    status: a fixed number of queries (the status provider reads a page of quotas at once)."""
    counts = dict(
        Job.objects.filter(owner_id=user.pk).values_list("state").annotate(n=Count("id")).values_list("state", "n")
    )
    # In the lifecycle's order, so "Pending 2 · Running 1" reads the same on every visit.
    by_state = [(label, int(counts[value])) for value, label in JobState.choices if counts.get(value)]
    quotas = list(quota_selectors.quota_list(user=user)[: DASHBOARD_QUOTAS_SHOWN + 1])
    shown = quotas[:DASHBOARD_QUOTAS_SHOWN]
    statuses = quota_selectors.quota_statuses(shown)
    return MemberFigures(
        jobs_by_state=by_state,
        jobs_total=sum(count for _label, count in by_state),
        quotas=[QuotaUsage(quota=quota, status=statuses[quota.pk]) for quota in shown],
        more_quotas=len(quotas) > DASHBOARD_QUOTAS_SHOWN,
    )


# ---------------------------------------------------------------------------------------------
# Charts of the Resource Quotas Overview and the Quota page's Monitoring tab
# ---------------------------------------------------------------------------------------------
#
# Figures are plain plotly dicts ({"data": [...], "layout": {...}}) handed to the page through
# `json_script` and drawn by static/console/charts.js; the page's colours (text, dark mode) are
# applied there, from the stylesheet. Plain dicts rather than plotly.graph_objects: building and
# validating a figure object of a thousand quotas costs more than the page may spend.


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
# Quota topics a live Overview subscribes to at most (the socket takes 250, LIVE_MAX_SUBSCRIPTIONS):
# beyond it, a treemap box or a band summing many quotas holds its figure until the page is read
# again.
LIVE_MAX_TOPICS = 200
# Quotas drawn as their own band in the stacked area; the rest are summed in one.
_MAX_BANDS = 10
# allocated ÷ guaranteed at the top of the colour scale: twice the guarantee, or more.
_RATIO_CAP = 2.0
# Under quota (teal), at quota (amber), well over (red): readable on light and dark backgrounds.
_USE_COLOURS: list[list[float | str]] = [[0.0, "#2a9d8f"], [0.5, "#e9c46a"], [1.0, "#d62828"]]
_GRID = "rgba(128, 128, 128, 0.25)"
# One colour per band, so that a band's guarantee line wears its colour (plotly's default order).
_BAND_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def chart_range(key: str | None) -> ChartRange:
    """The range a URL asks for; anything else is the default (the page still answers)."""
    return next((entry for entry in CHART_RANGES if entry.key == key), DEFAULT_RANGE)


def _base_layout(**more: Any) -> dict[str, Any]:
    return {
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        "margin": {"l": 48, "r": 16, "t": 8, "b": 40},
        **more,
    }


def _time_axis() -> dict[str, Any]:
    # No axis title: at 390 px the ticks turn and a title would run into the legend; the
    # page's text says the times are UTC.
    return {"type": "date", "gridcolor": _GRID, "automargin": True}


def _gpu_axis() -> dict[str, Any]:
    return {"title": {"text": "GPUs"}, "rangemode": "tozero", "gridcolor": _GRID, "zeroline": False}


def _moment(at: datetime) -> str:
    """Plotly reads ISO text as wall time; the axis says UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _use_ratio(allocated: float, guaranteed: float) -> float:
    if guaranteed <= 0:
        return 0.0 if allocated <= 0 else _RATIO_CAP
    return min(allocated / guaranteed, _RATIO_CAP)


class OverQuota(TypedDict):
    name: str
    allocated: float
    guaranteed: float


class BandNow(TypedDict):
    """A band's figures now, for the table under the stacked area (its cells move live)."""

    label: str
    quota_id: int | None  # a band of one quota: its cells follow that quota's topic
    allocated: float
    guaranteed: float
    over: float  # allocated beyond the guarantee: the borrowed GPUs


class QuotaOverview(TypedDict):
    treemap: dict[str, Any]
    colour_scale: str  # JSON, for the page's colour key
    ratio_cap: float
    allocation: dict[str, Any] | None
    over_quota: list[OverQuota]
    bands: list[BandNow]
    live_topics: str  # the quota topics the stacked area follows, space-separated
    range: ChartRange


def quota_overview(*, rows: Sequence[QuotaTreeRow], now: datetime, span: ChartRange = DEFAULT_RANGE) -> QuotaOverview:
    """The Overview of the Resource Quotas page, from the tree rows the user may see.

    Two queries for the history (the tree rows come with their status already), whatever the
    number of quotas: the treemap needs no history, and the area chart stacks one level only."""
    bands = _stacked_level(rows)
    since = now - span.span
    series = quota_allocation_series(
        quota_ids=[quota_id for band in bands for quota_id, _sign in band.terms], since=since, now=now
    )
    status_of = {row["quota"].pk: row["status"] for row in rows}
    guarantee_of = {row["quota"].pk: float(row["quota"].gpus) for row in rows}
    # The bands' quotas first (the stacked area), then the other visible ones (the treemap's boxes).
    in_bands = sorted({quota_id for band in bands for quota_id, _sign in band.terms})
    banded = set(in_bands)
    followed = [*in_bands, *(row["quota"].pk for row in rows if row["quota"].pk not in banded)]
    followed = followed[:LIVE_MAX_TOPICS]
    return QuotaOverview(
        treemap=_treemap(rows),
        colour_scale=json.dumps(_USE_COLOURS),
        ratio_cap=_RATIO_CAP,
        allocation=_stacked_area(bands, series, now=now, span=span),
        over_quota=[
            OverQuota(name=row["quota"].name, allocated=row["status"]["allocated"], guaranteed=row["quota"].gpus)
            for row in rows
            if row["status"]["allocated"] > row["quota"].gpus + 1e-9
        ],
        bands=[_band_now(band, status_of, guarantee_of) for band in bands],
        live_topics=" ".join(f"quota:{quota_id}" for quota_id in followed),
        range=span,
    )


def _band_now(band: _Band, status_of: Mapping[int, QuotaStatus], guarantee_of: Mapping[int, float]) -> BandNow:
    allocated = round(max(0.0, sum(sign * status_of[quota_id]["allocated"] for quota_id, sign in band.terms)), 3)
    guaranteed = round(max(0.0, sum(sign * guarantee_of[quota_id] for quota_id, sign in band.terms)), 3)
    return BandNow(
        label=band.label,
        quota_id=band.terms[0][0] if len(band.terms) == 1 else None,
        allocated=allocated,
        guaranteed=guaranteed,
        over=round(max(0.0, allocated - guaranteed), 3),
    )


def _treemap(rows: Sequence[QuotaTreeRow]) -> dict[str, Any]:
    """Every visible quota, sized by its guarantee and coloured by allocated ÷ guaranteed."""
    visible = {row["quota"].pk for row in rows}
    value: dict[int, float] = {row["quota"].pk: float(row["quota"].gpus) for row in rows}
    # A parent's box holds its children's ("total" branch values); float sums of fractional
    # guarantees may come out a hair above the parent's, which plotly would refuse to draw.
    children_sum: dict[int, float] = {}
    for row in reversed(rows):  # tree order has parents first, so children come first here
        quota = row["quota"]
        value[quota.pk] = max(value[quota.pk], children_sum.get(quota.pk, 0.0))
        if quota.parent_id in visible:
            children_sum[quota.parent_id] = children_sum.get(quota.parent_id, 0.0) + value[quota.pk]
    ids, labels, parents, values, colours, custom = [], [], [], [], [], []
    for row in rows:
        quota, status = row["quota"], row["status"]
        ids.append(str(quota.pk))
        labels.append(quota.name)
        parents.append(str(quota.parent_id) if quota.parent_id in visible else "")
        values.append(value[quota.pk])
        colours.append(round(_use_ratio(status["allocated"], quota.gpus), 3))
        custom.append([readable(status["allocated"]), readable(quota.gpus), readable(status["fair_share"])])
    trace = {
        "type": "treemap",
        "ids": ids,
        "labels": labels,
        "parents": parents,
        "values": values,
        "branchvalues": "total",
        "maxdepth": 3,
        "customdata": custom,
        "texttemplate": "%{label}<br>%{customdata[0]} / %{customdata[1]} GPUs",
        "hovertemplate": (
            "<b>%{label}</b><br>guaranteed %{customdata[1]} GPUs<br>allocated %{customdata[0]} GPUs"
            "<br>fair share %{customdata[2]} GPUs<extra></extra>"
        ),
        "marker": {
            "colors": colours,
            "colorscale": _USE_COLOURS,
            "cmin": 0,
            "cmax": _RATIO_CAP,
            # The key is the page's (overview.html): plotly's colour bar sets a style attribute
            # that the Content-Security-Policy refuses.
            "showscale": False,
        },
        "pathbar": {"visible": True},
    }
    # Each quota's allocated and guaranteed now: the script recolours a box when its quota's
    # figures change (static/console/charts.js).
    live = {
        "kind": "treemap",
        "ratio_cap": _RATIO_CAP,
        "quotas": {
            str(row["quota"].pk): [round(row["status"]["allocated"], 3), float(row["quota"].gpus)] for row in rows
        },
    }
    return {"data": [trace], "layout": _base_layout(margin={"l": 4, "r": 4, "t": 28, "b": 4}), "live": live}


@dataclass(frozen=True, slots=True)
class _Band:
    """One band of the stacked area: a sum of quotas' allocations (sign -1 subtracts children,
    to leave a parent's own jobs)."""

    label: str
    terms: tuple[tuple[int, int], ...]


def _stacked_level(rows: Sequence[QuotaTreeRow]) -> list[_Band]:
    """The level whose allocations add up without counting a GPU twice: the visible roots, or,
    under a single root, its children and the root's own jobs. The largest guarantees get their
    own band; the rest share one."""
    roots = [row["quota"] for row in rows if row["depth"] == 0]
    if not roots:
        return []
    members = roots
    own: _Band | None = None
    if len(roots) == 1:
        children = [row["quota"] for row in rows if row["depth"] == 1]
        if children:
            members = children
            root = roots[0]
            own = _Band(f"{root.name} (own jobs)", ((root.pk, 1), *((child.pk, -1) for child in children)))
    ranked = sorted(members, key=lambda quota: (-quota.gpus, quota.pk))
    bands = [_Band(quota.name, ((quota.pk, 1),)) for quota in ranked[:_MAX_BANDS]]
    rest = ranked[_MAX_BANDS:]
    if rest:
        bands.append(_Band(f"{len(rest)} other quotas", tuple((quota.pk, 1) for quota in rest)))
    if own is not None:
        bands.append(own)
    return bands


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
_EPOCH = {
    "sqlite": "((julianday(at) - 2440587.5) * 86400.0)",
    "postgresql": "EXTRACT(EPOCH FROM at)",
}
_FLOOR = {"sqlite": "CAST({} AS INTEGER)", "postgresql": "FLOOR({})"}
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
    vendor = connection.vendor if connection.vendor in _EPOCH else "postgresql"
    width = (now - start).total_seconds() / MAX_POINTS
    origin = _epoch(start)
    sql = _BUCKET_SQL.format(
        epoch=_EPOCH[vendor],
        floor=_FLOOR[vendor].format(f"(({_EPOCH[vendor]}) - %s) / %s"),
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


def _live_clock(now: datetime, span: ChartRange) -> dict[str, Any]:
    """What a chart's script needs to extend it: the server's time (to correct the browser's
    clock), the range it shows and how many points it keeps."""
    return {"now": _moment(now), "range_seconds": span.span.total_seconds(), "max_points": LIVE_MAX_POINTS}


def _stacked_area(
    bands: Sequence[_Band], series: AllocationSeries | None, *, now: datetime, span: ChartRange
) -> dict[str, Any] | None:
    """One stacked band per quota (or sum of quotas), and per band a dashed line at its guarantee
    drawn on top of the bands below it: where a band rises above its own line, that quota holds
    more than its guarantee, borrowing idle GPUs."""
    if not bands or series is None:
        return None
    count = len(series.moments)
    x = [_moment(moment) for moment in series.moments]

    def band_sum(band: _Band, field: int) -> list[float]:
        return [
            max(0.0, round(sum(sign * series.figures[quota_id][n][field] for quota_id, sign in band.terms), 3))
            for n in range(count)
        ]

    allocated = [band_sum(band, 0) for band in bands]
    guaranteed = [band_sum(band, 1) for band in bands]
    areas, lines = [], []
    below = [0.0] * count
    for index, band in enumerate(bands):
        colour = _BAND_COLOURS[index % len(_BAND_COLOURS)]
        areas.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": band.label,
                "legendgroup": band.label,
                "x": x,
                "y": allocated[index],
                "stackgroup": "allocated",
                "line": {"shape": "hv", "width": 1, "color": colour},
                "hovertemplate": f"{band.label}: %{{y}} GPUs<extra></extra>",
            }
        )
        lines.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{band.label} guarantee",
                "legendgroup": band.label,
                "showlegend": False,
                "x": x,
                "y": [round(base + own, 3) for base, own in zip(below, guaranteed[index], strict=True)],
                "customdata": guaranteed[index],
                "line": {"shape": "hv", "width": 1.5, "dash": "dash", "color": colour},
                "hovertemplate": f"{band.label} guarantee: %{{customdata}} GPUs<extra></extra>",
            }
        )
        below = [round(base + own, 3) for base, own in zip(below, allocated[index], strict=True)]
    layout = _base_layout(
        xaxis=_time_axis(),
        yaxis=_gpu_axis(),
        hovermode="x unified",
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 48, "r": 16, "t": 8, "b": 24},
    )
    live = {
        **_live_clock(now, span),
        "kind": "stacked",
        "bands": [[list(term) for term in band.terms] for band in bands],
        # Each quota's figures now (allocated, guaranteed): the start of every live sum.
        "quotas": {str(quota_id): list(series.figures[quota_id][-1][:2]) for quota_id in series.figures},
    }
    return {"data": [*areas, *lines], "layout": layout, "live": live}


def quota_monitoring(*, quota_id: int, now: datetime, span: ChartRange = DEFAULT_RANGE) -> dict[str, Any] | None:
    """Allocated, guaranteed and fair share of one quota over the chosen range, as steps (or
    bucket means past MAX_POINTS changes); None before any cycle recorded it."""
    since = now - span.span
    series = quota_allocation_series(quota_ids=[quota_id], since=since, now=now)
    if series is None:
        return None
    figures = series.figures[quota_id]
    x = [_moment(moment) for moment in series.moments]
    # Allocated is filled, so that it still shows where a line lies on top of it (allocated
    # equal to the fair share is the usual case for a busy quota).
    lines: tuple[tuple[str, int, dict[str, Any], str], ...] = (
        ("Allocated", 0, {"width": 2}, "tozeroy"),
        ("Guaranteed", 1, {"width": 2, "dash": "dash"}, "none"),
        ("Fair share", 2, {"width": 2, "dash": "dot"}, "none"),
    )
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": name,
            "x": x,
            "y": [values[field] for values in figures],
            "fill": fill,
            "line": {"shape": "hv", **line},
            "hovertemplate": f"{name}: %{{y}} GPUs<extra></extra>",
        }
        for name, field, line, fill in lines
    ]
    layout = _base_layout(
        xaxis=_time_axis(),
        yaxis=_gpu_axis(),
        hovermode="x unified",
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 48, "r": 16, "t": 8, "b": 24},
    )
    live = {**_live_clock(now, span), "kind": "quota", "quota": quota_id, "figures": list(figures[-1])}
    return {"data": traces, "layout": layout, "live": live}


# The mean utilisation of a quota's jobs' GPUs, per bucket of the range, from the telemetry level
# that covers it (raw samples for an hour, minute averages for a week, hour averages beyond).
_UTILISATION_SQL = """
SELECT {floor} AS bucket, AVG(utilisation), COUNT(*)
FROM {samples}
WHERE resolution = %s AND at >= %s AND at < %s
  AND job_id IN (SELECT id FROM {jobs} WHERE quota_id IN ({quotas}))
GROUP BY {floor}
ORDER BY bucket
"""


def quota_utilisation(*, quota_ids: Sequence[int], now: datetime, span: ChartRange) -> dict[str, Any] | None:
    """The Monitoring tab's second chart: the mean GPU utilisation of the jobs of a quota and its
    subtree, in MAX_POINTS buckets of the range at most (one query; None without samples). A
    bucket's mean is over every GPU sample of those jobs in it, so a busy 8-GPU job weighs eight
    times a 1-GPU notebook."""
    from telemetry.models import GpuSample
    from telemetry.selectors import resolution_for

    ids = sorted(set(quota_ids))
    if not ids:
        return None
    start = now - span.span
    width = span.span.total_seconds() / MAX_POINTS
    vendor = connection.vendor if connection.vendor in _EPOCH else "postgresql"
    floor = _FLOOR[vendor].format(f"(({_EPOCH[vendor]}) - {start.timestamp()!r}) / {width!r}")
    sql = _UTILISATION_SQL.format(
        floor=floor,
        samples=connection.ops.quote_name(GpuSample._meta.db_table),
        jobs=connection.ops.quote_name(Job._meta.db_table),
        quotas=", ".join(["%s"] * len(ids)),
    )
    bounds = [connection.ops.adapt_datetimefield_value(moment) for moment in (start, now)]
    with connection.cursor() as cursor:
        cursor.execute(sql, [resolution_for(span.span), *bounds, *ids])
        rows = cursor.fetchall()
    if not rows:
        return None
    x = [_moment(start + timedelta(seconds=int(bucket) * width)) for bucket, _mean, _count in rows]
    trace = {
        "type": "scatter",
        "mode": "lines+markers" if len(rows) < 3 else "lines",
        "name": "Mean GPU utilisation",
        "x": x,
        "y": [round(float(mean), 1) for _bucket, mean, _count in rows],
        "customdata": [int(count) for _bucket, _mean, count in rows],
        "line": {"width": 2},
        "hovertemplate": "%{y} % over %{customdata} GPU samples<extra></extra>",
    }
    layout = _base_layout(
        xaxis=_time_axis(),
        yaxis={"title": {"text": "%"}, "range": [0, 100], "gridcolor": _GRID, "zeroline": False},
        hovermode="x unified",
        showlegend=False,
        margin={"l": 48, "r": 16, "t": 8, "b": 24},
    )
    return {"data": [trace], "layout": layout}
