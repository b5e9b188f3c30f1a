"""Charts of the Resource Quotas Overview and the Quota page's Monitoring tab: the treemap of
the quota tree coloured by use, and the stacked allocation of quotas over a time range, each band
with its guarantee line. The series come from allocation_history.

Figures are plain plotly dicts ({"data": [...], "layout": {...}}) handed to the page through
`json_script` and drawn by static/console/charts.js; the page's colours (text, dark mode) are
applied there, from the stylesheet. Plain dicts rather than plotly.graph_objects: building and
validating a figure object of a thousand quotas costs more than the page may spend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from quotas.bounds import readable
from quotas.hooks import QuotaStatus
from quotas.models import Quota
from quotas.selectors import QuotaTreeRow
from scheduling.allocation_history import (
    DEFAULT_RANGE,
    LIVE_MAX_POINTS,
    AllocationSeries,
    ChartRange,
    plotly_moment,
    quota_allocation_series,
)
from scheduling.quota_in_view import InView, focus_of, in_view, parents_with_children

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
GRID = "rgba(128, 128, 128, 0.25)"
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


def base_layout(**more: Any) -> dict[str, Any]:
    return {
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        "margin": {"l": 48, "r": 16, "t": 8, "b": 40},
        **more,
    }


def time_axis() -> dict[str, Any]:
    # No axis title: at 390 px the ticks turn and a title would run into the legend; the
    # page's text says the times are UTC.
    return {"type": "date", "gridcolor": GRID, "automargin": True}


def _gpu_axis() -> dict[str, Any]:
    return {"title": {"text": "GPUs"}, "rangemode": "tozero", "gridcolor": GRID, "zeroline": False}


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
    opens: bool  # that quota has visible children: the table links to their stack
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
    in_view: InView  # whose children the stacked area stacks, and the ways up and down


def quota_overview(
    *,
    rows: Sequence[QuotaTreeRow],
    now: datetime,
    span: ChartRange = DEFAULT_RANGE,
    asked: int | None = None,
    pool: str = "",
) -> QuotaOverview:
    """The Overview of the Resource Quotas page, from the tree rows the user may see.

    The stacked area stacks the children of the quota in view (`asked`, a visible quota's id:
    quota_in_view.asked_quota checks it), each with its guarantee line, and that quota's own
    jobs; with none asked, the roots, or under a single root its children. Where the page shows
    one pool alone, `rows` are that pool's and `pool` names it: the section's links keep it.
    Two queries for the history (the tree rows come with their status already) and one for the
    quota's children, whatever the number of quotas: the area chart stacks one level only."""
    focus = focus_of(rows, asked)
    # One query in every view (with no quota in view it counts the roots, unused), so that the
    # page's queries stay the same whatever the tree (tests/console/test_quota_charts.py).
    children_in_all = Quota.objects.filter(parent_id=focus.pk if focus is not None else None).count()
    bands = _stacked_level(rows, focus, children_in_all)
    since = now - span.span
    series = quota_allocation_series(
        quota_ids=[quota_id for band in bands for quota_id, _sign in band.terms], since=since, now=now
    )
    parents = parents_with_children(rows)
    status_of = {row["quota"].pk: row["status"] for row in rows}
    guarantee_of = {row["quota"].pk: float(row["quota"].gpus) for row in rows}
    # The bands' quotas first (the stacked area), then the other visible ones (the treemap's boxes).
    in_bands = sorted({quota_id for band in bands for quota_id, _sign in band.terms})
    banded = set(in_bands)
    followed = [*in_bands, *(row["quota"].pk for row in rows if row["quota"].pk not in banded)]
    followed = followed[:LIVE_MAX_TOPICS]
    where = in_view(rows, focus, asked=asked, pool=pool)
    return QuotaOverview(
        treemap=_treemap(rows, level=where["treemap_level"] or None),
        colour_scale=json.dumps(_USE_COLOURS),
        ratio_cap=_RATIO_CAP,
        allocation=_stacked_area(bands, series, now=now, span=span),
        over_quota=[
            OverQuota(name=row["quota"].name, allocated=row["status"]["allocated"], guaranteed=row["quota"].gpus)
            for row in rows
            if row["status"]["allocated"] > row["quota"].gpus + 1e-9
        ],
        bands=[_band_now(band, status_of, guarantee_of, parents) for band in bands],
        live_topics=" ".join(f"quota:{quota_id}" for quota_id in followed),
        range=span,
        in_view=where,
    )


def _band_now(
    band: _Band, status_of: Mapping[int, QuotaStatus], guarantee_of: Mapping[int, float], parents: set[int]
) -> BandNow:
    allocated = round(max(0.0, sum(sign * status_of[quota_id]["allocated"] for quota_id, sign in band.terms)), 3)
    guaranteed = round(max(0.0, sum(sign * guarantee_of[quota_id] for quota_id, sign in band.terms)), 3)
    quota_id = band.terms[0][0] if len(band.terms) == 1 else None
    return BandNow(
        label=band.label,
        quota_id=quota_id,
        opens=quota_id in parents,
        allocated=allocated,
        guaranteed=guaranteed,
        over=round(max(0.0, allocated - guaranteed), 3),
    )


def _treemap(rows: Sequence[QuotaTreeRow], *, level: str | None = None) -> dict[str, Any]:
    """Every visible quota, sized by its guarantee and coloured by allocated ÷ guaranteed; opened
    at `level` (a quota's id) when the page has a quota in view."""
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
        # No <b>: plotly writes rich text as a style attribute, which the CSP refuses on hover.
        "hovertemplate": (
            "%{label}<br>guaranteed %{customdata[1]} GPUs<br>allocated %{customdata[0]} GPUs"
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
    if level is not None:
        trace["level"] = level
    # Each quota's allocated and guaranteed now: the script recolours a box when its quota's
    # figures change (static/console/charts.js).
    live = {
        "kind": "treemap",
        "ratio_cap": _RATIO_CAP,
        "quotas": {
            str(row["quota"].pk): [round(row["status"]["allocated"], 3), float(row["quota"].gpus)] for row in rows
        },
    }
    return {"data": [trace], "layout": base_layout(margin={"l": 4, "r": 4, "t": 28, "b": 4}), "live": live}


@dataclass(frozen=True, slots=True)
class _Band:
    """One band of the stacked area: a sum of quotas' allocations (sign -1 subtracts children,
    to leave a parent's own jobs)."""

    label: str
    terms: tuple[tuple[int, int], ...]


def _stacked_level(rows: Sequence[QuotaTreeRow], focus: Quota | None, children_in_all: int) -> list[_Band]:
    """The level whose allocations add up without counting a GPU twice: the children of the
    quota in view and its own jobs (its allocation less its children's), or with none in view
    the visible roots. A quota in view without visible children is one band of its own. The
    largest guarantees get their own band; the rest share one."""
    own: _Band | None = None
    if focus is None:
        members = [row["quota"] for row in rows if row["depth"] == 0]
        if not members:
            return []
    else:
        members = [row["quota"] for row in rows if row["quota"].parent_id == focus.pk]
        if not members:
            return [_Band(focus.name, ((focus.pk, 1),))]
        # A child the user may not see is in the parent's allocation: the band says so.
        words = "own jobs and quotas not shown" if children_in_all > len(members) else "own jobs"
        own = _Band(f"{focus.name} ({words})", ((focus.pk, 1), *((child.pk, -1) for child in members)))
    ranked = sorted(members, key=lambda quota: (-quota.gpus, quota.pk))
    bands = [_Band(quota.name, ((quota.pk, 1),)) for quota in ranked[:_MAX_BANDS]]
    rest = ranked[_MAX_BANDS:]
    if rest:
        bands.append(_Band(f"{len(rest)} other quotas", tuple((quota.pk, 1) for quota in rest)))
    if own is not None:
        bands.append(own)
    return bands


def _live_clock(now: datetime, span: ChartRange) -> dict[str, Any]:
    """What a chart's script needs to extend it: the server's time (to correct the browser's
    clock), the range it shows and how many points it keeps."""
    return {"now": plotly_moment(now), "range_seconds": span.span.total_seconds(), "max_points": LIVE_MAX_POINTS}


def _stacked_area(
    bands: Sequence[_Band], series: AllocationSeries | None, *, now: datetime, span: ChartRange
) -> dict[str, Any] | None:
    """One stacked band per quota (or sum of quotas), and per band a dashed line at its guarantee
    drawn on top of the bands below it: where a band rises above its own line, that quota holds
    more than its guarantee, borrowing idle GPUs."""
    if not bands or series is None:
        return None
    count = len(series.moments)
    x = [plotly_moment(moment) for moment in series.moments]

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
    layout = _gpus_over_time_layout()
    live = {
        **_live_clock(now, span),
        "kind": "stacked",
        "bands": [[list(term) for term in band.terms] for band in bands],
        # Each quota's figures now (allocated, guaranteed): the start of every live sum.
        "quotas": {str(quota_id): list(series.figures[quota_id][-1][:2]) for quota_id in series.figures},
    }
    return {"data": [*areas, *lines], "layout": layout, "live": live}


def _gpus_over_time_layout() -> dict[str, Any]:
    """The Overview's stacked area and the Monitoring tab's lines: GPUs over time, one hover
    label for every trace at a moment, the legend under the plot."""
    return base_layout(
        xaxis=time_axis(),
        yaxis=_gpu_axis(),
        hovermode="x unified",
        legend={"orientation": "h", "y": -0.25},
        margin={"l": 48, "r": 16, "t": 8, "b": 24},
    )


def quota_monitoring(*, quota_id: int, now: datetime, span: ChartRange = DEFAULT_RANGE) -> dict[str, Any] | None:
    """Allocated, guaranteed and fair share of one quota over the chosen range, as steps (or
    bucket means past MAX_POINTS changes); None before any cycle recorded it."""
    since = now - span.span
    series = quota_allocation_series(quota_ids=[quota_id], since=since, now=now)
    if series is None:
        return None
    figures = series.figures[quota_id]
    x = [plotly_moment(moment) for moment in series.moments]
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
    layout = _gpus_over_time_layout()
    live = {**_live_clock(now, span), "kind": "quota", "quota": quota_id, "figures": list(figures[-1])}
    return {"data": traces, "layout": layout, "live": live}
