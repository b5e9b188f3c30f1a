"""One scheduling cycle: lock → snapshot → engine → one committed transaction → executor.

The commit is all or nothing. It first moves the fence (SchedulerFence) forward, which also
serializes commits: a holder whose token is stale, or whose snapshot predates another cycle's
commit, is refused before it changes a row. Then each decision is applied with a conditional
update (the job must be in the state and revision the snapshot saw; otherwise that decision is
skipped), and every placement is checked against the devices as the transaction sees them, so
no GPU is ever double-booked whatever else raced. A worker killed anywhere in here leaves either
the whole cycle or nothing; the next cycle reads the database and carries on.

Here: the lease and the fence, the decide step and the cycle's record. The decisions are applied
by scheduling.commit (one method per kind of decision), over the locked rows, the device checks
and the bulk writes of scheduling.commit_rows.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from scheduling import changes, engine, events, history, resource_figures
from scheduling import snapshot as snapshots
from scheduling.clock import get_clock
from scheduling.commit import _Commit
from scheduling.commit_rows import DeferredReasons
from scheduling.gc_pauses import without_collector_pauses
from scheduling.lock import CycleLease, CycleLock, get_cycle_lock
from scheduling.models import CycleRecord, SchedulerFence
from scheduling.selectors import SnapshotIndex, build_snapshot

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CycleOutcome:
    """What one cycle did. `refused` says why it changed nothing: lock_busy, stale_token, stale_snapshot."""

    ran: bool
    committed: bool
    trigger: str
    token: int | None = None
    started_at: datetime | None = None
    duration_ms: float = 0.0
    admitted: int = 0
    evicted: int = 0
    pending: int = 0
    skipped: int = 0
    decisions: tuple[dict[str, Any], ...] = ()
    executor_changes: int = 0
    refused: str = ""
    record_id: int | None = None
    admitted_ids: tuple[int, ...] = field(default=(), repr=False)
    evicted_ids: tuple[int, ...] = field(default=(), repr=False)

    @classmethod
    def from_record(cls, record: CycleRecord) -> CycleOutcome:
        """What a committed cycle did, read back from its record (another process ran it)."""
        decisions = record.decisions if isinstance(record.decisions, dict) else {"committed": record.decisions}
        return cls(
            ran=True,
            committed=True,
            trigger=record.trigger,
            token=record.lock_token,
            started_at=record.started_at,
            duration_ms=record.duration_ms,
            admitted=record.admitted,
            evicted=record.evicted,
            pending=record.pending,
            skipped=int(decisions.get("skipped") or 0),
            decisions=tuple(decisions.get("committed") or ()),
            record_id=record.pk,
        )

    @property
    def changed(self) -> bool:
        return bool(self.decisions) or self.executor_changes > 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "ran": self.ran,
            "committed": self.committed,
            "trigger": self.trigger,
            "token": self.token,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "duration_ms": round(self.duration_ms, 3),
            "admitted": self.admitted,
            "evicted": self.evicted,
            "pending": self.pending,
            "skipped": self.skipped,
            "executor_changes": self.executor_changes,
            "refused": self.refused,
            "decisions": list(self.decisions),
        }


class _Refused(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


_state = threading.local()


def in_cycle() -> bool:
    """True while this thread runs a cycle (the inline trigger uses it to queue a rerun instead of recursing)."""
    return bool(getattr(_state, "depth", 0))


def run_cycle(
    *,
    trigger: str = "manual",
    wait_seconds: float | None = None,
    lock: CycleLock | None = None,
    deferred_reasons: DeferredReasons | None = None,
) -> CycleOutcome:
    """Run one cycle under the cluster-wide lock, then let the executor act on what was committed.
    With `deferred_reasons` (simulate only: see DeferredReasons) the pending reasons are kept
    there for the caller to flush, not written.

    Returns `ran=False, refused="lock_busy"` when another cycle held the lock for `wait_seconds`.
    """
    clock = get_clock()
    cycle_lock = lock or get_cycle_lock()
    wait = float(getattr(settings, "SCHEDULER_LOCK_WAIT_SECONDS", 10.0)) if wait_seconds is None else wait_seconds
    lease = cycle_lock.acquire(wait_seconds=wait)
    if lease is None:
        return CycleOutcome(ran=False, committed=False, trigger=trigger, refused="lock_busy")
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        try:
            outcome = decide_and_commit(
                lease=lease, trigger=trigger, now=clock.now(), deferred_reasons=deferred_reasons
            )
        finally:
            cycle_lock.release(lease)
        changes = act_on(outcome)
    finally:
        _state.depth -= 1
    if changes:
        outcome = replace(outcome, executor_changes=changes)
    return outcome


def act_on(outcome: CycleOutcome) -> int:
    """The executor starts what was admitted, stops what was evicted, then ticks once."""
    from scheduling.executors import get_executor

    executor = get_executor()
    executor.on_committed(outcome.admitted_ids, outcome.evicted_ids)
    return executor.tick(get_clock().now())


def decide_and_commit(
    *, lease: CycleLease, trigger: str, now: datetime, deferred_reasons: DeferredReasons | None = None
) -> CycleOutcome:
    """Snapshot, engine, commit; no executor. Callers hold `lease` (tests call this to force races)."""
    with without_collector_pauses():
        return _decide_and_commit(lease=lease, trigger=trigger, now=now, deferred_reasons=deferred_reasons)


def _decide_and_commit(
    *, lease: CycleLease, trigger: str, now: datetime, deferred_reasons: DeferredReasons | None
) -> CycleOutcome:
    started = time.perf_counter()
    # Read before the snapshot: a change committed in between is in the snapshot and stays
    # recorded, which costs at most one more cycle, never a missed one.
    change_ids = changes.seen()
    # Only the jobs whose rows moved since this worker's last cycle are read in full (scheduling.snapshot).
    snapshot, index = build_snapshot(now, incremental=True)
    result = engine.schedule(snapshot)
    try:
        with transaction.atomic():
            _advance_fence(token=lease.token, seen_generation=index.fence_generation, now=now)
            applied = _Commit(index=index, now=now, deferred=deferred_reasons).apply(result)
            wake_at = changes.wake_at(snapshot)
            if applied.positions_held_until is not None:
                wake_at = min(filter(None, (wake_at, applied.positions_held_until)))
            changes.settle(change_ids, decided=bool(applied.decisions), wake_at=wake_at)
            _record_allocations(result, index, now)
            duration_ms = (time.perf_counter() - started) * 1000
            record = CycleRecord.objects.create(
                started_at=now,
                duration_ms=duration_ms,
                trigger=trigger,
                admitted=applied.admitted,
                evicted=applied.evicted,
                pending=applied.pending,
                lock_token=lease.token,
                lock_holder=lease.holder,
                decisions={"committed": applied.decisions, "skipped": applied.skipped},
            )
            outcome = CycleOutcome(
                ran=True,
                committed=True,
                trigger=trigger,
                token=lease.token,
                started_at=now,
                duration_ms=duration_ms,
                admitted=applied.admitted,
                evicted=applied.evicted,
                pending=applied.pending,
                skipped=applied.skipped,
                decisions=tuple(applied.decisions),
                record_id=record.pk,
                admitted_ids=tuple(applied.admitted_ids),
                evicted_ids=tuple(applied.evicted_ids),
            )
            if applied.decisions:
                summary = {"kind": "cycle", **outcome.as_dict()}
                transaction.on_commit(lambda: events.publish(summary))
        snapshots.committed(rows_written=applied.reasons_read_again + len(applied.decisions))
        history.committed(index.fence_generation + 1)
    except _Refused as refusal:
        logger.warning("cycle with token %s refused: %s", lease.token, refusal.why)
        return CycleOutcome(
            ran=True,
            committed=False,
            trigger=trigger,
            token=lease.token,
            started_at=now,
            duration_ms=(time.perf_counter() - started) * 1000,
            refused=refusal.why,
        )
    return outcome


def _record_allocations(result: engine.CycleResult, index: SnapshotIndex, now: datetime) -> None:
    """Allocation history of the quotas whose figures this cycle moved, in the same commit.

    The figures are the engine's after its decisions (a decision the commit skipped, a rare
    race, shows in the next cycle's sample)."""
    figures = {
        quota_id: history.AllocationFigures(status.allocated, status.guaranteed, status.fair_share)
        for name, quota_id in index.quota_ids.items()
        if (status := result.quotas.get(name)) is not None
    }
    history.record_changes(figures=figures, at=now, seen_generation=index.fence_generation)
    history.prune_now_and_then(now=now)
    resource_figures.record_fair_shares(result=result, quota_ids=index.quota_ids, at=now)


def ensure_fence() -> None:
    if SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID).exists():
        return
    try:
        with transaction.atomic():
            SchedulerFence.objects.create(pk=SchedulerFence.SINGLETON_ID)
    except IntegrityError:
        pass  # Another process created it first; that is all we wanted.


def _advance_fence(*, token: int, seen_generation: int, now: datetime) -> None:
    """The first write of the commit; its row lock makes concurrent commits take turns."""
    ours = SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID, token__lt=token, generation=seen_generation)
    # The row is missing only from a fresh database: ensured when the update finds nothing.
    if ours.update(token=token, generation=F("generation") + 1, committed_at=now):
        return
    ensure_fence()
    if ours.update(token=token, generation=F("generation") + 1, committed_at=now):
        return
    fence = SchedulerFence.objects.get(pk=SchedulerFence.SINGLETON_ID)
    if fence.token >= token:
        raise _Refused(f"stale_token: token {token} <= last committed {fence.token}")
    raise _Refused(f"stale_snapshot: generation {fence.generation} != {seen_generation} seen by the snapshot")


def converge(max_cycles: int = 50) -> int:
    """Run cycles (each with its executor tick) until one changes nothing; returns how many ran.

    Triggers raised meanwhile are dropped: this loop is already doing what they ask for.
    """
    from scheduling import triggers

    ran = 0
    with triggers.paused():
        while ran < max_cycles:
            outcome = run_cycle(trigger="converge")
            ran += 1
            if outcome.ran and outcome.committed and not outcome.changed:
                break
            if not outcome.committed and outcome.refused == "lock_busy":
                time.sleep(0.01)
    return ran
