"""Where the runtime reads the time: the wall clock in the console, a simulated one in `simulate`.

The cycle, the executor and the services all ask `get_clock()`, so that a scenario can move
time forward (`SimulatedClock.advance`) and every grace period and duration follows.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class SimulatedClock:
    """Time stands still until `advance` moves it; `simulate` starts it at a fixed instant."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2025, 1, 1, tzinfo=UTC)
        if self._now.tzinfo is None:
            raise ValueError("SimulatedClock needs an aware datetime (UTC).")

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError(f"the clock only moves forward; advance({seconds}) is negative")
        self._now += timedelta(seconds=seconds)
        return self._now


_default_clock: Clock = SystemClock()
_override = threading.local()


def get_clock() -> Clock:
    clock: Clock | None = getattr(_override, "clock", None)
    return clock if clock is not None else _default_clock


@contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Run the block on `clock` (this thread only), then go back to what was there before."""
    previous: Clock | None = getattr(_override, "clock", None)
    _override.clock = clock
    try:
        yield clock
    finally:
        _override.clock = previous
