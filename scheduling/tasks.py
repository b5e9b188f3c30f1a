"""Celery tasks: thin, idempotent wrappers around the cycle and the executor.

Delivered twice, a task does no harm: a second cycle finds nothing new to decide (the engine
is stable on a converged snapshot) and conditional updates refuse to apply a decision twice.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task

from scheduling import changes, triggers
from scheduling.clock import get_clock
from scheduling.cycle import run_cycle
from scheduling.executors import get_executor

logger = logging.getLogger(__name__)


@shared_task(name="scheduling.tasks.run_scheduling_cycle", ignore_result=True)
def run_scheduling_cycle(trigger: str = "event") -> dict[str, Any]:
    if trigger == "beat" and changes.nothing_to_do(get_clock().now()):
        return {"ran": False, "committed": False, "trigger": trigger, "refused": "unchanged"}
    with triggers.cycle_running():
        triggers.clear_request()
        outcome = run_cycle(trigger=trigger)
    if not outcome.ran:
        # Another cycle held the lock all along; it may have read its snapshot before our
        # change, so ask again rather than lose the trigger.
        triggers.request_cycle(f"{trigger} (retry)")
    elif outcome.executor_changes:
        triggers.request_cycle("executor")
    return outcome.as_dict()


@shared_task(name="scheduling.tasks.executor_tick", ignore_result=True)
def executor_tick() -> int:
    return get_executor().tick(get_clock().now())
