"""The Quota page's Monitoring tab, second chart: the mean GPU utilisation of a quota's jobs over
the range. Scheduling's page shows it; telemetry registers it there (scheduling.page_figures)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from scheduling.allocation_history import EPOCH_SQL, FLOOR_SQL, MAX_POINTS, ChartRange, plotly_moment
from scheduling.models import Job
from scheduling.quota_charts import GRID, base_layout, time_axis
from telemetry.models import GpuSample
from telemetry.selectors import resolution_for

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
    ids = sorted(set(quota_ids))
    if not ids:
        return None
    start = now - span.span
    width = span.span.total_seconds() / MAX_POINTS
    vendor = connection.vendor if connection.vendor in EPOCH_SQL else "postgresql"
    floor = FLOOR_SQL[vendor].format(f"(({EPOCH_SQL[vendor]}) - {start.timestamp()!r}) / {width!r}")
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
    x = [plotly_moment(start + timedelta(seconds=int(bucket) * width)) for bucket, _mean, _count in rows]
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
    layout = base_layout(
        xaxis=time_axis(),
        yaxis={"title": {"text": "%"}, "range": [0, 100], "gridcolor": GRID, "zeroline": False},
        hovermode="x unified",
        showlegend=False,
        margin={"l": 48, "r": 16, "t": 8, "b": 24},
    )
    return {"data": [trace], "layout": layout}
