"""Reads of the console: the sign-ins a user holds, the dashboard's numbers per role, and the
quota charts, which compose the quota tree (quotas) with the allocation history (scheduling)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from django.contrib.auth.models import AbstractBaseUser
from django.contrib.sessions.models import Session
from django.db.models import Count, Q, Sum
from django.utils import timezone

from quotas import selectors as quota_selectors
from quotas.bounds import readable
from quotas.hooks import QuotaStatus
from quotas.models import Node, NodeState, Quota
from quotas.selectors import QuotaTreeRow
from scheduling import selectors as scheduling_selectors
from scheduling.models import HOLDING_STATES, Job, JobState
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

# How far back the charts look, and how many points a stacked area may have at most.
CHART_WINDOW = timedelta(hours=1)
_MAX_POINTS = 600
# Quotas drawn as their own band in the stacked area; the rest are summed in one.
_MAX_BANDS = 10
# allocated ÷ guaranteed at the top of the colour scale: twice the guarantee, or more.
_RATIO_CAP = 2.0
# Under quota (teal), at quota (amber), well over (red): readable on light and dark backgrounds.
_USE_COLOURS: list[list[float | str]] = [[0.0, "#2a9d8f"], [0.5, "#e9c46a"], [1.0, "#d62828"]]
_GRID = "rgba(128, 128, 128, 0.25)"


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


class QuotaOverview(TypedDict):
    treemap: dict[str, Any]
    colour_scale: str  # JSON, for the page's colour key
    ratio_cap: float
    allocation: dict[str, Any] | None
    over_quota: list[OverQuota]
    bands: list[str]


def quota_overview(*, rows: Sequence[QuotaTreeRow], now: datetime) -> QuotaOverview:
    """The Overview of the Resource Quotas page, from the tree rows the user may see.

    Two queries for the history (the tree rows come with their status already), whatever the
    number of quotas: the treemap needs no history, and the area chart stacks one level only."""
    bands = _stacked_level(rows)
    history = scheduling_selectors.allocation_history(
        quota_ids=[quota_id for band in bands for quota_id, _sign in band.terms], since=now - CHART_WINDOW
    )
    return QuotaOverview(
        treemap=_treemap(rows),
        colour_scale=json.dumps(_USE_COLOURS),
        ratio_cap=_RATIO_CAP,
        allocation=_stacked_area(bands, history, since=now - CHART_WINDOW, now=now),
        over_quota=[
            OverQuota(name=row["quota"].name, allocated=row["status"]["allocated"], guaranteed=row["quota"].gpus)
            for row in rows
            if row["status"]["allocated"] > row["quota"].gpus + 1e-9
        ],
        bands=[band.label for band in bands],
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
    return {"data": [trace], "layout": _base_layout(margin={"l": 4, "r": 4, "t": 28, "b": 4})}


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


def _held_at(points: Sequence[AllocationPoint], moments: Sequence[datetime]) -> list[float]:
    """Allocation at each moment (ascending): a sample's figure holds until the next sample."""
    values, index, current = [], 0, 0.0
    for moment in moments:
        while index < len(points) and points[index].at <= moment:
            current = points[index].allocated
            index += 1
        values.append(current)
    return values


def _stacked_area(
    bands: Sequence[_Band], history: Mapping[int, Sequence[AllocationPoint]], *, since: datetime, now: datetime
) -> dict[str, Any] | None:
    if not bands or not any(history.get(quota_id) for band in bands for quota_id, _sign in band.terms):
        return None
    # From the window's start, or from the first sample when the history is younger than that
    # (a fresh cluster's first minutes would otherwise be a sliver at the right edge).
    start = max(since, min(points[0].at for points in history.values() if points))
    changes = sorted({point.at for points in history.values() for point in points if point.at > start})
    if len(changes) > _MAX_POINTS - 2:
        step = (now - start) / (_MAX_POINTS - 1)
        moments = [start + step * n for n in range(_MAX_POINTS)]
    else:
        moments = [start, *changes, now]
    held = {quota_id: _held_at(points, moments) for quota_id, points in history.items()}
    zeros = [0.0] * len(moments)
    x = [_moment(moment) for moment in moments]
    traces = []
    for band in bands:
        totals = [
            max(0.0, round(sum(sign * held.get(quota_id, zeros)[n] for quota_id, sign in band.terms), 3))
            for n in range(len(moments))
        ]
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": band.label,
                "x": x,
                "y": totals,
                "stackgroup": "allocated",
                "line": {"shape": "hv", "width": 1},
                "hovertemplate": f"{band.label}: %{{y}} GPUs<extra></extra>",
            }
        )
    layout = _base_layout(
        xaxis=_time_axis(),
        yaxis=_gpu_axis(),
        hovermode="x unified",
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 48, "r": 16, "t": 8, "b": 24},
    )
    return {"data": traces, "layout": layout}


def quota_monitoring(*, quota_id: int, now: datetime) -> dict[str, Any] | None:
    """Allocated, guaranteed and fair share of one quota over the last hour, as steps; None
    before any cycle recorded it."""
    since = now - CHART_WINDOW
    points = scheduling_selectors.allocation_history(quota_ids=[quota_id], since=since).get(quota_id)
    if not points:
        return None
    last = points[-1]
    # The last figures hold until now.
    extended = [*points, AllocationPoint(now, last.allocated, last.guaranteed, last.fair_share)]
    x = [_moment(point.at) for point in extended]
    # Allocated is filled, so that it still shows where a line lies on top of it (allocated
    # equal to the fair share is the usual case for a busy quota).
    lines: tuple[tuple[str, list[float], dict[str, Any], str], ...] = (
        ("Allocated", [point.allocated for point in extended], {"width": 2}, "tozeroy"),
        ("Guaranteed", [point.guaranteed for point in extended], {"width": 2, "dash": "dash"}, "none"),
        ("Fair share", [point.fair_share for point in extended], {"width": 2, "dash": "dot"}, "none"),
    )
    traces: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": name,
            "x": x,
            "y": values,
            "fill": fill,
            "line": {"shape": "hv", **line},
            "hovertemplate": f"{name}: %{{y}} GPUs<extra></extra>",
        }
        for name, values, line, fill in lines
    ]
    layout = _base_layout(
        xaxis=_time_axis(),
        yaxis=_gpu_axis(),
        hovermode="x unified",
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 48, "r": 16, "t": 8, "b": 24},
    )
    return {"data": traces, "layout": layout}
