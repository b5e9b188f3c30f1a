"""Template filters of the job pages: GPU indices as a person reads them."""

from __future__ import annotations

from collections.abc import Sequence

from django import template

from scheduling.estimates import device_ranges

register = template.Library()


@register.filter
def gpu_ranges(devices: Sequence[int]) -> str:
    """[0, 1, …, 7] → "GPUs 0–7", the same words the estimate uses."""
    return device_ranges(devices) if devices else ""
