"""Template filters of the job pages: GPU indices as a person reads them."""

from __future__ import annotations

from collections.abc import Sequence

from django import template

from scheduling import selectors
from scheduling.estimates import device_ranges
from scheduling.models import Job

register = template.Library()


@register.filter
def gpu_ranges(devices: Sequence[int]) -> str:
    """[0, 1, …, 7] → "GPUs 0–7", the same words the estimate uses."""
    return device_ranges(devices) if devices else ""


@register.filter
def slurm_job_ids(job: Job) -> str:
    """The job's Slurm job ids, "812, 813" (empty for jobs of other executors)."""
    return ", ".join(map(str, selectors.slurm_job_ids(job)))
