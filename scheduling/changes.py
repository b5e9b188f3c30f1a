"""Whether the beat's cycle has anything to do: a cycle only when something changed.

Every write that can change the scheduler's decisions records a SchedulingChange row in its own
transaction (`note`): a job submitted, cancelled, finished, failed, released after its grace or
lost with its node; a node created, edited, cordoned, drained, moved, deleted, gone down, lost or
back; a quota or pool created, scaled, edited, moved or deleted; a committed cycle that decided
something (its admissions and evictions are themselves a change the next cycle must look at).
Services reach it through `triggers.request_cycle_on_commit` and the quotas app's change hook,
so whatever asks for a cycle also records why.

A cycle reads the rows present before its snapshot and deletes exactly those in its commit
(`settle`); a row that commits later stays for the next beat. The beat then skips the engine
(`nothing_to_do`) when no row is left, unless

- a rule of the clock alone is due: the earliest moment a running job's min_runtime_seconds
  runs out while some job waits (`wake_at`, kept on the fence by each commit), or
- the last commit is SCHEDULER_FULL_CYCLE_BEATS beats old: the safety net for a write that
  recorded nothing (a hand edit in the database, a process killed between a commit and its
  on-commit signal), as the beat every SCHEDULER_BEAT_SECONDS was before.

Event-triggered, manual and `converge` cycles never skip. Workspace bindings, roles and caps
are not read by the engine (they are checked when a job is submitted), so they record nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

from django.conf import settings

from scheduling import engine
from scheduling.engine import types as engine_types
from scheduling.models import SchedulerFence, SchedulingChange

_DELETE_BATCH: Final = 500
DECIDED: Final = "cycle-decided"


def note(reason: str) -> None:
    """Record, in the caller's transaction, that something the scheduler reads has changed."""
    SchedulingChange.objects.create(reason=reason[:64])


def seen() -> tuple[int, ...]:
    """The changes recorded so far; a cycle reads them before its snapshot, which includes them."""
    return tuple(SchedulingChange.objects.order_by().values_list("id", flat=True))


def settle(change_ids: Sequence[int], *, decided: bool, wake_at: datetime | None) -> None:
    """In a cycle's commit: the changes its snapshot saw are done with; a cycle that decided
    something is a change itself (the next beat looks once more, then the cluster is idle)."""
    for start in range(0, len(change_ids), _DELETE_BATCH):
        SchedulingChange.objects.filter(id__in=change_ids[start : start + _DELETE_BATCH]).delete()
    if decided:
        note(DECIDED)
    SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID).update(wake_at=wake_at)


def full_cycle_seconds() -> float:
    """How old the last commit may grow before the beat runs a cycle whatever was recorded."""
    beats = int(getattr(settings, "SCHEDULER_FULL_CYCLE_BEATS", 12))
    return max(1, beats) * float(getattr(settings, "SCHEDULER_BEAT_SECONDS", 5.0))


def nothing_to_do(now: datetime) -> bool:
    """True when the beat may skip its cycle: no change recorded, no clock rule due, and the last
    commit is younger than full_cycle_seconds(). Two small reads, no snapshot."""
    fence = SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID).values_list("committed_at", "wake_at").first()
    if fence is None:
        return False
    committed_at, wake_at = fence
    if committed_at is None or now - committed_at >= timedelta(seconds=full_cycle_seconds()):
        return False
    if wake_at is not None and now >= wake_at:
        return False
    return not SchedulingChange.objects.exists()


def wake_at(snapshot: engine.Snapshot) -> datetime | None:
    """The earliest moment after the snapshot at which a running job's min_runtime_seconds
    (inherited down the quota tree, as the engine reads it) runs out while some job waits: from
    then on it may be reclaimed, with nothing written to say so. None when nothing waits."""
    if not any(job.state == engine_types.PENDING for job in snapshot.jobs):
        return None
    quotas = {quota.name: quota for quota in snapshot.quotas}
    minimum: dict[str, float] = {}

    def min_runtime(name: str) -> float:
        if name not in minimum:
            quota = quotas.get(name)
            if quota is None:
                minimum[name] = 0.0
            elif quota.min_runtime_seconds is not None:
                minimum[name] = float(quota.min_runtime_seconds)
            else:
                minimum[name] = min_runtime(quota.parent) if quota.parent else 0.0
        return minimum[name]

    earliest: float | None = None
    for job in snapshot.jobs:
        if job.state != engine_types.RUNNING or job.started_at is None:
            continue
        ends = job.started_at + min_runtime(job.quota)
        if ends > snapshot.now and (earliest is None or ends < earliest):
            earliest = ends
    return None if earliest is None else datetime.fromtimestamp(earliest, UTC)
