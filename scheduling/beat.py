"""Celery beat's schedule for scheduling; settings build CELERY_BEAT_SCHEDULE from it.

The cycle here is only a safety net (a lost trigger, a broker hiccup): event triggers run the
real cycles at once. The executor tick moves simulated jobs along the real clock (durations,
grace periods). `expires` drops runs that a busy worker could not start in time, so a backlog
never piles up.
"""

from __future__ import annotations

from typing import Any


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
