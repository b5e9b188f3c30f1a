"""A cycle's reservations as data: the session holds them, `actions.reserve` makes and uses them
(docs/scheduling.md, "Reservations"). Apart from the action so that the session imports no action."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_not

from scheduling.engine.cluster import Placement
from scheduling.engine.types import PENDING, Job

UNKNOWN = math.inf  # a device whose holder has no expected end


@dataclass(slots=True)
class Hold:
    """One reservation: the free devices kept for `job`, on the nodes it will start on."""

    job: int
    devices: list[Placement]
    nodes: tuple[int, ...]
    start: float  # expected start; UNKNOWN when a device it waits for has no expected end
    level: int  # the reserved job's entitlement (`entitlement`) when it was made
    leaf: int


@dataclass(slots=True)
class Reservations:
    """A cycle's reservations, in the order they were made (the order quotas were served)."""

    holds: dict[int, Hold] = field(default_factory=dict)
    leaves: set[int] = field(default_factory=set)
    held: set[tuple[int, int]] = field(default_factory=set)  # (node, device) kept for a hold
    # When each busy device frees, from the jobs on it; built at the first hold of the cycle and
    # brought up to date with the admissions decided since (`decisions_seen`).
    # ends[node][device]: None where nothing known frees it (promised, held outside, reserved)
    ends: list[list[float | None]] = field(default_factory=list)
    decisions_seen: int = -1
    known_ends: bool = False
    # Shapes that found no room on reservations this cycle: (leaf, level, replica, count, duration)
    failed_backfill: list[tuple[int, int, int, int, float]] = field(default_factory=list)
    pending_durations: bool | None = None  # whether a pending job has a known duration (`open_to`)
    top_level: int = -1  # the least entitled level among the holds (-1: none), as they never leave
    # `less_entitled` per level, until a hold is made or a hold's devices change (`changed`)
    less_entitled_at: dict[int, bool] = field(default_factory=dict)

    def less_entitled(self, level: int) -> bool:
        """Whether a hold that keeps devices is less entitled than `level` (`actions.reserve.open_to`,
        asked at each quota a pass serves once nothing is free: the same answer until `changed`)."""
        found = self.less_entitled_at.get(level)
        if found is None:
            found = level < self.top_level and any(kept.devices and kept.level > level for kept in self.holds.values())
            self.less_entitled_at[level] = found
        return found

    def changed(self) -> None:
        """A hold was made, or a hold's devices changed: `less_entitled` is asked again."""
        self.less_entitled_at.clear()


_DURATION = attrgetter("duration")


def pending_with_duration(jobs: Sequence[Job], state: Sequence[str]) -> bool:
    """Whether a job pending in `state` has a known duration: the states of the jobs with one,
    searched at C level (`actions.reserve.open_to` asks it once a cycle, of every job)."""
    return PENDING in compress(state, map(is_not, map(_DURATION, jobs), repeat(None)))
