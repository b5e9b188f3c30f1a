"""Celery beat's schedule for scheduling; the lead puts it in settings as CELERY_BEAT_SCHEDULE.

The cycle here is only a safety net (a lost trigger, a broker hiccup): event triggers run the
real cycles at once. The executor tick moves simulated jobs along the real clock (durations,
grace periods). `expires` drops runs that a busy worker could not start in time, so a backlog
never piles up.
"""

from __future__ import annotations

import os
from typing import Any


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        return default


def schedule(*, cycle_seconds: float, tick_seconds: float) -> dict[str, dict[str, Any]]:
    return {
        "scheduling-cycle": {
            "task": "scheduling.tasks.run_scheduling_cycle",
            "schedule": cycle_seconds,
            "kwargs": {"trigger": "beat"},
            "options": {"expires": cycle_seconds},
        },
        "executor-tick": {
            "task": "scheduling.tasks.executor_tick",
            "schedule": tick_seconds,
            "options": {"expires": max(tick_seconds * 2, 1.0)},
        },
    }


SCHEDULE = schedule(
    cycle_seconds=_seconds("SCHEDULER_BEAT_SECONDS", 5.0), tick_seconds=_seconds("EXECUTOR_TICK_SECONDS", 1.0)
)
