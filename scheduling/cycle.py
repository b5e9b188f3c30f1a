"""One scheduling cycle: lock → snapshot → engine → one committed transaction → executor.

The commit is all or nothing. It first moves the fence (SchedulerFence) forward, which also
serializes commits: a holder whose token is stale, or whose snapshot predates another cycle's
commit, is refused before it changes a row. Then each decision is applied with a conditional
update (the job must be in the state and revision the snapshot saw; otherwise that decision is
skipped), and every placement is checked against the devices as the transaction sees them, so
no GPU is ever double-booked whatever else raced. A worker killed anywhere in here leaves either
the whole cycle or nothing; the next cycle reads the database and carries on.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from quotas.bounds import readable
from quotas.models import NodeState
from scheduling import bulk, engine, events, history, triggers
from scheduling.clock import get_clock
from scheduling.engine import types as engine_types
from scheduling.lifecycle import add_event, released_event, released_values
from scheduling.lock import CycleLease, CycleLock, get_cycle_lock
from scheduling.models import (
    CycleRecord,
    Job,
    JobEvent,
    JobEventKind,
    JobState,
    ReplicaPlacementRecord,
    SchedulerFence,
)
from scheduling.selectors import JobSeen, SnapshotIndex, build_snapshot, held_devices

logger = logging.getLogger(__name__)

# Room for float rounding when fractions add up to exactly one device.
_EPSILON = 1e-9
# Rows per bulk statement (reasons, admissions, the locking read): a few thousand parameters each.
_BATCH = 1000

Placement = tuple[int, tuple[int, ...], float]  # node id, devices, fraction

_PLACEMENT_COLUMNS = ("job_id", "node_id", "devices", "fraction")
_EVENT_COLUMNS = ("job_id", "kind", "at", "rule", "beneficiary_id", "message")


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
    *, trigger: str = "manual", wait_seconds: float | None = None, lock: CycleLock | None = None
) -> CycleOutcome:
    """Run one cycle under the cluster-wide lock, then let the executor act on what was committed.

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
            outcome = decide_and_commit(lease=lease, trigger=trigger, now=clock.now())
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
    if outcome.admitted_ids or outcome.evicted_ids:
        jobs = {job.pk: job for job in Job.objects.filter(pk__in=[*outcome.admitted_ids, *outcome.evicted_ids])}
        executor.on_admitted_many([jobs[job_id] for job_id in outcome.admitted_ids if job_id in jobs])
        for job_id in outcome.evicted_ids:
            if job_id in jobs:
                executor.on_evicted(jobs[job_id])
    return executor.tick(get_clock().now())


@contextmanager
def _without_collector_pauses() -> Iterator[None]:
    """Python's cyclic garbage collector paused for one cycle's decide and commit.

    A cycle of S3 allocates a few hundred thousand short-lived objects on a heap that already
    holds a snapshot of 15,000 jobs: the collector's full passes then landed inside the engine
    and doubled some cycles (S3 engine: 84 ms median, 208 ms at worst; paused: 79 ms, 83 ms).
    What the cycle leaves behind is collected once the collector runs again.
    """
    collecting = gc.isenabled()  # False inside a nested cycle: the outer one turns it back on
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def decide_and_commit(*, lease: CycleLease, trigger: str, now: datetime) -> CycleOutcome:
    """Snapshot, engine, commit; no executor. Callers hold `lease` (tests call this to force races)."""
    with _without_collector_pauses():
        return _decide_and_commit(lease=lease, trigger=trigger, now=now)


def _decide_and_commit(*, lease: CycleLease, trigger: str, now: datetime) -> CycleOutcome:
    started = time.perf_counter()
    snapshot, index = build_snapshot(now)
    result = engine.schedule(snapshot)
    try:
        with transaction.atomic():
            _advance_fence(token=lease.token, seen_generation=index.fence_generation, now=now)
            applied = _Commit(index=index, now=now).apply(result)
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
    history.record_changes(figures=figures, at=now)
    history.prune_now_and_then(now=now)


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
    ensure_fence()
    moved = SchedulerFence.objects.filter(
        pk=SchedulerFence.SINGLETON_ID, token__lt=token, generation=seen_generation
    ).update(token=token, generation=F("generation") + 1, committed_at=now)
    if moved:
        return
    fence = SchedulerFence.objects.get(pk=SchedulerFence.SINGLETON_ID)
    if fence.token >= token:
        raise _Refused(f"stale_token: token {token} <= last committed {fence.token}")
    raise _Refused(f"stale_snapshot: generation {fence.generation} != {seen_generation} seen by the snapshot")


@dataclass(slots=True)
class _Applied:
    admitted: int = 0
    evicted: int = 0
    pending: int = 0
    skipped: int = 0
    decisions: list[dict[str, Any]] = field(default_factory=list)
    admitted_ids: list[int] = field(default_factory=list)
    evicted_ids: list[int] = field(default_factory=list)


def _gpus_of(placements: list[Placement]) -> float:
    return sum(fraction if fraction < 1 else float(len(devices)) for _node, devices, fraction in placements)


class _Commit:
    """Applies one engine result inside the caller's transaction."""

    def __init__(self, *, index: SnapshotIndex, now: datetime) -> None:
        self.index = index
        self.now = now
        self.applied = _Applied()
        self.node_names = {pk: name for name, pk in index.node_ids.items()}
        self.used: dict[tuple[int, int], float] = defaultdict(float)
        self.held: dict[int, list[Placement]] = defaultdict(list)
        self.node_gpus: dict[int, int] = {}
        self.node_state: dict[int, str] = {}
        # Admissions are checked one by one, in the engine's order, against rows locked up front
        # (`_lock_admissions`), and written together at the end (`_flush_admissions`).
        self.current: dict[int, tuple[str, int]] = {}
        self.admit_rows: list[tuple[int, int, float, int]] = []
        self.releasing_rows: list[tuple[int, int, datetime, int | None]] = []
        self.released_rows: list[tuple[Any, ...]] = []
        # Rows for bulk.insert, in the order of _PLACEMENT_COLUMNS and _EVENT_COLUMNS.
        self.new_placements: list[tuple[int, int, list[int], float]] = []
        self.new_events: list[tuple[int, str, datetime, str, int | None, str]] = []
        self.drained_to_queue = False

    # --- the whole result --------------------------------------------------------------------

    def apply(self, result: engine.CycleResult) -> _Applied:
        admits = {d.job_id for d in result.decisions if isinstance(d, engine.Admit)}
        moves = {
            d.job_id
            for d in result.decisions
            if isinstance(d, engine.Evict) and d.rule == engine_types.CONSOLIDATION and d.job_id in admits
        }
        admitted_now: set[str] = set()
        requeued_now = 0
        self._lock_jobs(result, moves)
        # Evictions and shrinks first: an admission in the same result may stand on their GPUs.
        for decision in result.decisions:
            if isinstance(decision, engine.Evict) and decision.job_id not in moves:
                requeued_now += self._evict(decision)
            elif isinstance(decision, engine.Shrink):
                self._shrink(decision)
        self._flush_evictions()
        if self.drained_to_queue:
            # A drained job is placed by a cycle that sees it pending: ask for one, as the
            # executor does when a grace period ends.
            triggers.request_cycle_on_commit("drain")
        self._load_occupancy()
        # Moves first, each once the devices it goes to are free: the engine may list a move onto
        # devices that a later move in the same result vacates (a chain of consolidations).
        waiting = [d for d in result.decisions if isinstance(d, engine.Admit) and d.job_id in moves]
        while waiting:
            ready = [d for d in waiting if self._move_fits(d)]
            for decision in ready or waiting:  # none fits: apply them in order, to log and skip
                self._move(decision, result)
            waiting = [d for d in waiting if d not in ready] if ready else []
        for decision in result.decisions:
            if isinstance(decision, engine.Admit):
                if decision.job_id in moves:
                    continue
                elif self._admit(decision):
                    admitted_now.add(decision.job_id)
            elif isinstance(decision, engine.Grow):
                self._grow(decision)
        self._flush_admissions()
        self._write_reasons(result, admitted_now)
        still_pending = sum(
            1 for key, seen in self.index.jobs.items() if seen.state == JobState.PENDING and key not in admitted_now
        )
        self.applied.pending = still_pending + requeued_now
        return self.applied

    # --- helpers ---------------------------------------------------------------------------------

    def _seen(self, job_id: str, state: str) -> JobSeen | None:
        seen = self.index.jobs.get(job_id)
        if seen is None or seen.state != state:
            self.applied.skipped += 1
            return None
        return seen

    def _beneficiary(self, job_id: str | None) -> tuple[int | None, str | None]:
        if job_id is None or job_id not in self.index.jobs:
            return None, None
        seen = self.index.jobs[job_id]
        return seen.pk, seen.name

    def _placements(self, replicas: tuple[engine.ReplicaPlacement, ...]) -> list[Placement] | None:
        resolved: list[Placement] = []
        for replica in replicas:
            node_id = self.index.node_ids.get(replica.node)
            if node_id is None:
                return None
            resolved.append((node_id, tuple(replica.devices), float(replica.fraction)))
        return resolved

    def _load_occupancy(self) -> None:
        """The devices as this transaction sees them, after this cycle's own evictions and shrinks."""
        nodes, held = held_devices()
        for node_id, (gpus, state) in nodes.items():
            self.node_gpus[node_id] = gpus
            self.node_state[node_id] = state
        for job_id, node_id, devices, fraction in held:
            self._occupy(job_id, [(node_id, devices, fraction)], sign=1)

    def _lock_jobs(self, result: engine.CycleResult, moves: set[str]) -> None:
        """The state and revision, right now, of every job the result admits or evicts, their rows
        locked (PostgreSQL) until the commit: a decision checked against them cannot lose a race,
        so those decisions can be written together, a few statements for all of them."""
        pks = sorted(
            {
                seen.pk
                for d in result.decisions
                if (isinstance(d, engine.Admit) or (isinstance(d, engine.Evict) and d.job_id not in moves))
                and (seen := self.index.jobs.get(d.job_id)) is not None
            }
        )
        for start in range(0, len(pks), _BATCH):
            rows = (
                Job.objects.select_for_update()
                .filter(pk__in=pks[start : start + _BATCH])
                .order_by("pk")
                .values_list("pk", "state", "revision")
            )
            for pk, state, revision in rows:
                self.current[pk] = (state, revision)

    def _flush_evictions(self) -> None:
        """Evicted jobs with a grace period become releasing; the others let go of their GPUs now."""
        written = bulk.update_as_seen(
            Job,
            state=JobState.RUNNING,
            columns=("release_at", "beneficiary_id"),
            rows=self.releasing_rows,
            fixed=(
                ("state", "%s", (JobState.RELEASING,)),
                ("revision", "revision + 1", ()),
                ("evicted_at", "%s", (self.now,)),
            ),
        )
        written += bulk.update_as_seen(
            Job,
            state=JobState.RUNNING,
            columns=("state", "finished_at", "reason_code", "reason_message"),
            rows=self.released_rows,
            fixed=(
                ("revision", "revision + 2", ()),
                ("preemptions", "preemptions + 1", ()),
                ("allocated_gpus", "0", ()),
                ("running_replicas", "0", ()),
                ("started_at", "NULL", ()),
                ("evicted_at", "NULL", ()),
                ("release_at", "NULL", ()),
                ("beneficiary_id", "NULL", ()),
                ("position", "NULL", ()),
            ),
        )
        expected = len(self.releasing_rows) + len(self.released_rows)
        if written != expected:
            raise RuntimeError(f"evicted {written} of {expected} checked jobs; cycle rolled back")
        released = [row[0] for row in self.released_rows]
        for start in range(0, len(released), _BATCH):
            ReplicaPlacementRecord.objects.filter(job_id__in=released[start : start + _BATCH]).delete()
        bulk.insert(JobEvent, _EVENT_COLUMNS, self.new_events)
        self.new_events = []

    def _flush_admissions(self) -> None:
        if not self.admit_rows:
            return
        written = bulk.update_as_seen(
            Job,
            state=JobState.PENDING,
            columns=("allocated_gpus", "running_replicas"),
            rows=self.admit_rows,
            fixed=(
                ("state", "%s", (JobState.RUNNING,)),
                ("revision", "revision + 1", ()),
                ("started_at", "%s", (self.now,)),
                ("reason_code", "''", ()),
                ("reason_message", "''", ()),
                ("position", "NULL", ()),
                ("beneficiary_id", "NULL", ()),
                ("evicted_at", "NULL", ()),
                ("release_at", "NULL", ()),
            ),
        )
        if written != len(self.admit_rows):
            # The rows were locked and checked; anything else is a bug: nothing of this cycle commits.
            raise RuntimeError(f"admitted {written} of {len(self.admit_rows)} checked jobs; cycle rolled back")
        bulk.insert(ReplicaPlacementRecord, _PLACEMENT_COLUMNS, self.new_placements)
        bulk.insert(JobEvent, _EVENT_COLUMNS, self.new_events)
        # A requeued victim names the job it was evicted for until that job starts, so that no one
        # else takes the freed GPUs (SCHEDULING.md §5, no ping-pong); once it starts, the promise is
        # kept and the victims queue like everyone else. The link is not part of a revision: only
        # the engine reads it.
        admitted = [job_pk for job_pk, *_rest in self.admit_rows]
        for start in range(0, len(admitted), _BATCH):
            Job.objects.filter(state=JobState.PENDING, beneficiary_id__in=admitted[start : start + _BATCH]).update(
                beneficiary=None
            )

    def _occupy(self, job_pk: int, placements: list[Placement], *, sign: int) -> None:
        for node_id, devices, fraction in placements:
            share = fraction if fraction < 1 else 1.0
            for device in devices:
                self.used[(node_id, device)] += sign * share
        if sign > 0:
            self.held[job_pk].extend(placements)

    def _conflict(self, placements: list[Placement]) -> str | None:
        trial: dict[tuple[int, int], float] = defaultdict(float)
        for node_id, devices, fraction in placements:
            name = self.node_names.get(node_id, str(node_id))
            if node_id not in self.node_gpus:
                return f"node {name} no longer exists"
            state = self.node_state[node_id]
            if state != NodeState.READY:
                # Changed since the snapshot: only a ready node takes new placements.
                return f"node {name} is {'down' if state == NodeState.NOT_READY else state}"
            if fraction < 1 and len(devices) != 1:
                return f"a fractional replica needs exactly one device on {name}, got {list(devices)}"
            share = fraction if fraction < 1 else 1.0
            for device in devices:
                if not 0 <= device < self.node_gpus[node_id]:
                    return f"node {name} has no device {device}"
                taken = self.used[(node_id, device)] + trial[(node_id, device)]
                if taken + share > 1 + _EPSILON:
                    return (
                        f"device {name}/{device} is taken ({readable(taken)} of 1 used, {readable(share)} more asked)"
                    )
                trial[(node_id, device)] += share
        return None

    def _create_placements(self, job_pk: int, placements: list[Placement]) -> None:
        bulk.insert(
            ReplicaPlacementRecord,
            _PLACEMENT_COLUMNS,
            [(job_pk, node_id, list(devices), fraction) for node_id, devices, fraction in placements],
        )

    def _nodes(self, placements: list[Placement]) -> list[str]:
        return sorted({self.node_names.get(node_id, str(node_id)) for node_id, _d, _f in placements})

    # --- decisions ---------------------------------------------------------------------------------

    def _evict(self, decision: engine.Evict) -> int:
        """Returns 1 when the job went straight back to the queue (no grace period).

        Checked here against the locked row; written by `_flush_evictions`."""
        seen = self._seen(decision.job_id, JobState.RUNNING)
        if seen is None:
            return 0
        if self.current.get(seen.pk) != (JobState.RUNNING, seen.revision):
            self.applied.skipped += 1
            return 0
        beneficiary_pk, beneficiary_name = self._beneficiary(decision.beneficiary)
        self.new_events.append(
            (seen.pk, JobEventKind.EVICTED.value, self.now, decision.rule, beneficiary_pk, decision.reason)
        )
        self.applied.evicted += 1
        self.applied.evicted_ids.append(seen.pk)
        self.applied.decisions.append(
            {
                "kind": "evict",
                "job": seen.name,
                "job_id": seen.pk,
                "rule": decision.rule,
                "beneficiary": beneficiary_name,
                "reason": decision.reason,
                "grace_seconds": seen.grace_seconds,
            }
        )
        if seen.grace_seconds > 0:
            release_at = self.now + timedelta(seconds=seen.grace_seconds)
            self.releasing_rows.append((seen.pk, seen.revision, release_at, beneficiary_pk))
            self.current[seen.pk] = (JobState.RELEASING, seen.revision + 1)
            return 0
        # No grace period: the GPUs are free in this very commit.
        message = f"evicted by {decision.rule}" + (f" for {beneficiary_name}" if beneficiary_name else "")
        values = released_values(requeue=seen.requeue, now=self.now, message=message)
        self.released_rows.append(
            (
                seen.pk,
                seen.revision,
                values["state"],
                values["finished_at"],
                values["reason_code"],
                values["reason_message"],
            )
        )
        kind, event_message = released_event(requeue=seen.requeue, message=message)
        self.new_events.append((seen.pk, str(kind), self.now, "", None, event_message))
        self.current[seen.pk] = (str(values["state"]), seen.revision + 2)
        if decision.rule == engine_types.DRAIN and values["state"] == JobState.PENDING:
            self.drained_to_queue = True
        return 1 if values["state"] == JobState.PENDING else 0

    def _shrink(self, decision: engine.Shrink) -> None:
        seen = self._seen(decision.job_id, JobState.RUNNING)
        remove = self._placements(decision.remove)
        if seen is None or remove is None:
            return
        records = list(
            ReplicaPlacementRecord.objects.filter(job_id=seen.pk).values("id", "node_id", "devices", "fraction")
        )
        doomed: list[int] = []
        for node_id, devices, fraction in remove:
            match = next(
                (
                    r
                    for r in records
                    if r["id"] not in doomed
                    and r["node_id"] == node_id
                    and tuple(r["devices"]) == devices
                    and abs(r["fraction"] - fraction) < _EPSILON
                ),
                None,
            )
            if match is None:
                self.applied.skipped += 1
                return
            doomed.append(match["id"])
        if len(doomed) >= len(records):
            self.applied.skipped += 1  # A shrink never takes the last replica; that is an eviction.
            return
        removed_gpus = _gpus_of(remove)
        changed = Job.objects.filter(pk=seen.pk, state=JobState.RUNNING, revision=seen.revision).update(
            revision=F("revision") + 1,
            allocated_gpus=F("allocated_gpus") - removed_gpus,
            running_replicas=F("running_replicas") - len(doomed),
        )
        if not changed:
            self.applied.skipped += 1
            return
        ReplicaPlacementRecord.objects.filter(pk__in=doomed).delete()
        beneficiary_pk, beneficiary_name = self._beneficiary(decision.beneficiary)
        add_event(
            job_id=seen.pk,
            kind=JobEventKind.SHRUNK,
            at=self.now,
            rule=decision.rule,
            beneficiary_id=beneficiary_pk,
            message=decision.reason or f"gave up {len(doomed)} replica(s), {readable(removed_gpus)} GPUs",
        )
        self.applied.decisions.append(
            {
                "kind": "shrink",
                "job": seen.name,
                "job_id": seen.pk,
                "rule": decision.rule,
                "beneficiary": beneficiary_name,
                "replicas": len(doomed),
                "gpus": removed_gpus,
                "reason": decision.reason,
            }
        )

    def _admit(self, decision: engine.Admit) -> bool:
        seen = self._seen(decision.job_id, JobState.PENDING)
        placements = self._placements(decision.placements)
        if seen is None or placements is None or not placements:
            if seen is not None:
                self.applied.skipped += 1
            return False
        conflict = self._conflict(placements)
        if conflict is not None:
            logger.error("admission of %s skipped: %s", seen.name, conflict)
            self.applied.skipped += 1
            return False
        if self.current.get(seen.pk) != (JobState.PENDING, seen.revision):
            self.applied.skipped += 1  # Cancelled (or otherwise changed) since the snapshot.
            return False
        gpus = _gpus_of(placements)
        self.current[seen.pk] = (JobState.RUNNING, seen.revision + 1)
        self.admit_rows.append((seen.pk, seen.revision, gpus, len(placements)))
        self.new_placements.extend(
            (seen.pk, node_id, list(devices), fraction) for node_id, devices, fraction in placements
        )
        self._occupy(seen.pk, placements, sign=1)
        nodes = self._nodes(placements)
        self.new_events.append(
            (
                seen.pk,
                JobEventKind.ADMITTED.value,
                self.now,
                "",
                None,
                f"{len(placements)} replica(s), {readable(gpus)} GPUs on {', '.join(nodes)}",
            )
        )
        self.applied.admitted += 1
        self.applied.admitted_ids.append(seen.pk)
        self.applied.decisions.append(
            {
                "kind": "admit",
                "job": seen.name,
                "job_id": seen.pk,
                "gpus": gpus,
                "replicas": len(placements),
                "nodes": nodes,
            }
        )
        return True

    def _move_fits(self, decision: engine.Admit) -> bool:
        seen = self.index.jobs.get(decision.job_id)
        placements = self._placements(decision.placements)
        if seen is None or placements is None:
            return True  # `_move` skips it
        old = self.held.get(seen.pk, [])
        self._occupy(seen.pk, old, sign=-1)
        fits = self._conflict(placements) is None
        for node_id, devices, fraction in old:  # put back without adding to `held` twice
            share = fraction if fraction < 1 else 1.0
            for device in devices:
                self.used[(node_id, device)] += share
        return fits

    def _move(self, decision: engine.Admit, result: engine.CycleResult) -> None:
        """Consolidation: a running job restarts elsewhere in the same commit."""
        seen = self._seen(decision.job_id, JobState.RUNNING)
        placements = self._placements(decision.placements)
        if seen is None or placements is None:
            return
        old = self.held.pop(seen.pk, [])
        self._occupy(seen.pk, old, sign=-1)
        conflict = self._conflict(placements)
        if conflict is not None:
            logger.error("move of %s skipped: %s", seen.name, conflict)
            self._occupy(seen.pk, old, sign=1)
            self.applied.skipped += 1
            return
        gpus = _gpus_of(placements)
        changed = Job.objects.filter(pk=seen.pk, state=JobState.RUNNING, revision=seen.revision).update(
            revision=F("revision") + 1, allocated_gpus=gpus, running_replicas=len(placements), started_at=self.now
        )
        if not changed:
            self._occupy(seen.pk, old, sign=1)
            self.applied.skipped += 1
            return
        ReplicaPlacementRecord.objects.filter(job_id=seen.pk).delete()
        self._create_placements(seen.pk, placements)
        self._occupy(seen.pk, placements, sign=1)
        evict = next((d for d in result.decisions if isinstance(d, engine.Evict) and d.job_id == decision.job_id), None)
        beneficiary_pk, beneficiary_name = self._beneficiary(evict.beneficiary if evict else None)
        nodes = self._nodes(placements)
        add_event(
            job_id=seen.pk,
            kind=JobEventKind.MOVED,
            at=self.now,
            rule=engine_types.CONSOLIDATION,
            beneficiary_id=beneficiary_pk,
            message=f"restarted on {', '.join(nodes)}"
            + (f" to make room for {beneficiary_name}" if beneficiary_name else ""),
        )
        self.applied.decisions.append(
            {
                "kind": "move",
                "job": seen.name,
                "job_id": seen.pk,
                "rule": engine_types.CONSOLIDATION,
                "beneficiary": beneficiary_name,
                "nodes": nodes,
            }
        )

    def _grow(self, decision: engine.Grow) -> None:
        seen = self._seen(decision.job_id, JobState.RUNNING)
        placements = self._placements(decision.add)
        if seen is None or placements is None or not placements:
            return
        conflict = self._conflict(placements)
        if conflict is not None:
            logger.error("growth of %s skipped: %s", seen.name, conflict)
            self.applied.skipped += 1
            return
        gpus = _gpus_of(placements)
        changed = Job.objects.filter(pk=seen.pk, state=JobState.RUNNING, revision=seen.revision).update(
            revision=F("revision") + 1,
            allocated_gpus=F("allocated_gpus") + gpus,
            running_replicas=F("running_replicas") + len(placements),
        )
        if not changed:
            self.applied.skipped += 1
            return
        self._create_placements(seen.pk, placements)
        self._occupy(seen.pk, placements, sign=1)
        nodes = self._nodes(placements)
        add_event(
            job_id=seen.pk,
            kind=JobEventKind.GROWN,
            at=self.now,
            message=f"+{len(placements)} replica(s), {readable(gpus)} GPUs on {', '.join(nodes)}",
        )
        self.applied.decisions.append(
            {
                "kind": "grow",
                "job": seen.name,
                "job_id": seen.pk,
                "replicas": len(placements),
                "gpus": gpus,
                "nodes": nodes,
            }
        )

    def _write_reasons(self, result: engine.CycleResult, admitted_now: set[str]) -> None:
        """Only reasons that changed since the snapshot are written, and only to jobs still pending
        at the revision the snapshot saw: one statement per thousand rows."""
        rows: list[tuple[int, int, str, str, int | None]] = []
        for key, seen in self.index.jobs.items():
            if seen.state != JobState.PENDING or key in admitted_now:
                continue
            reason = result.pending.get(key)
            wanted = (reason.code, reason.message, reason.position) if reason else ("", "", None)
            if wanted != (seen.reason_code, seen.reason_message, seen.position):
                rows.append((seen.pk, seen.revision, *wanted))
        bulk.update_as_seen(
            Job, state=JobState.PENDING, columns=("reason_code", "reason_message", "position"), rows=rows
        )


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
