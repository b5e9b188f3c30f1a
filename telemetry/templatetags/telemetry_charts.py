"""`{% job_gpu_chart job %}`: the Job page's utilisation and memory chart, with its figure.

A template tag rather than a view's context, so that scheduling's job page shows telemetry
without importing it (telemetry sits above scheduling: docs/telemetry.md).
"""

from __future__ import annotations

from typing import Any

from django import template

from scheduling.clock import get_clock
from scheduling.models import Job
from telemetry import charts, selectors
from telemetry.models import Resolution

register = template.Library()

_LEVEL_WORDS = {Resolution.RAW: "every sample", Resolution.MINUTE: "1-minute averages", Resolution.HOUR: "hourly"}


@register.inclusion_tag("telemetry/job_gpus.html")
def job_gpu_chart(job: Job) -> dict[str, Any]:
    now = get_clock().now()
    since = max(now - selectors.JOB_CHART_WINDOW, job.submitted_at)
    level, series = selectors.job_gpu_history(job_id=job.pk, since=since, now=now)
    return {
        "job": job,
        "json_id": f"job-gpus-{job.pk}",
        "figure": charts.job_gpu_figure(series),
        "has_samples": bool(series),
        "sampled_note": f"Per GPU since the job was submitted (at most 24 h; {_LEVEL_WORDS[Resolution(level)]}), "
        "then live. Solid lines: utilisation; dotted: memory. Times are UTC.",
        "started_note": "No GPU readings yet: the chart appears when the job's GPUs first report.",
    }
