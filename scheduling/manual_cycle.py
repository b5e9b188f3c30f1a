"""A cycle for a person waiting on an answer ("run a cycle now" in the API and the console)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from scheduling import triggers
from scheduling.clock import get_clock
from scheduling.cycle import CycleOutcome, run_cycle
from scheduling.selectors import first_cycle_since


@dataclass(frozen=True, slots=True)
class ManualCycle:
    """The answer to "run a cycle now": the cycle's outcome, or, when none finished within the
    wait, `queued` (the worker runs it; /scheduler/status/ shows it when done)."""

    outcome: CycleOutcome
    queued: bool

    def as_dict(self) -> dict[str, Any]:
        return {**self.outcome.as_dict(), "queued": self.queued}


# How often a person's "run a cycle now" looks for the worker's cycle record.
MANUAL_CYCLE_POLL_SECONDS = 0.05


def run_cycle_now(*, trigger: str) -> ManualCycle:
    """A cycle for a person waiting on an answer, who gets one within
    SCHEDULER_API_LOCK_WAIT_SECONDS (a second by default), never a hang.

    With a worker (celery triggers) the cycle is handed to it, and the answer is the first cycle
    that starts after the request if it commits in time, else `queued`: the web process never
    waits on the cycle lock or on a long commit behind other writers. Without a worker the cycle
    runs here, waiting for the lock at most that long.
    """
    wait = float(getattr(settings, "SCHEDULER_API_LOCK_WAIT_SECONDS", 1.0))
    if triggers.trigger_mode() != "celery":
        return ManualCycle(outcome=run_cycle(trigger=trigger, wait_seconds=wait), queued=False)
    asked_at = get_clock().now()
    # False when a cycle is queued already: it has not started, so it sees everything until now.
    triggers.request_cycle(trigger)
    deadline = time.monotonic() + wait
    while True:
        record = first_cycle_since(asked_at)
        if record is not None:
            return ManualCycle(outcome=CycleOutcome.from_record(record), queued=False)
        if time.monotonic() >= deadline:
            return ManualCycle(outcome=CycleOutcome(ran=False, committed=False, trigger=trigger), queued=True)
        time.sleep(MANUAL_CYCLE_POLL_SECONDS)
