"""Celery beat's schedule for telemetry; settings add it to CELERY_BEAT_SCHEDULE.

`expires` drops a run a busy worker could not start in time: a late sample is worth nothing
once the next is due, and the downsampling catches up on its next run.
"""

from __future__ import annotations

from typing import Any


def schedule(*, sample_seconds: float, downsample_seconds: float) -> dict[str, dict[str, Any]]:
    return {
        "telemetry-sample-simulated-gpus": {
            "task": "telemetry.tasks.sample_simulated_gpus",
            "schedule": sample_seconds,
            "options": {"expires": sample_seconds},
        },
        "telemetry-downsample-and-prune": {
            "task": "telemetry.tasks.downsample_and_prune",
            "schedule": downsample_seconds,
            "options": {"expires": downsample_seconds},
        },
    }
