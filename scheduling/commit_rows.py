"""What one cycle's commit works on: the job rows it locked, the devices as its transaction sees
them, and the rows it writes in bulk (scheduling.commit decides, decision by decision, what goes
into them).

Every placement is checked here against the devices as the transaction sees them, so no GPU is
ever double-booked whatever else raced; the locked rows make each check final, so the checked
rows are written together, a few statements for all of them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction

from quotas.bounds import readable
from quotas.models import NodeState
from scheduling import bulk, engine, pending_reasons, snapshot_moves
from scheduling import snapshot as snapshots
from scheduling.models import Job, JobEvent, JobState, ReplicaPlacementRecord
from scheduling.selectors import JobSeen, SnapshotIndex, held_devices

# Room for float rounding when fractions add up to exactly one device.
_EPSILON = 1e-9
# Rows per bulk statement (reasons, admissions, the locking read): a few thousand parameters each.
_BATCH = 1000
# Past this many nodes placed on, the commit reads the devices of all of them (one plain read).
_READ_ALL_NODES = 2000

Placement = tuple[int, tuple[int, ...], float]  # node id, devices, fraction

_PLACEMENT_COLUMNS = ("job_id", "node_id", "devices", "fraction")
_EVENT_COLUMNS = ("job_id", "kind", "at", "rule", "beneficiary_id", "message")


@dataclass(slots=True)
class _Applied:
    admitted: int = 0
    evicted: int = 0
    pending: int = 0
    # Pending jobs whose reason this commit rewrote without telling the snapshot's memory (SQLite,
    # or a snapshot read without row versions): so many rows the next snapshot reads anew.
    reasons_read_again: int = 0
    # When a pending job's new queue position, left for a later commit, falls due (pending_reasons).
    positions_held_until: datetime | None = None
    skipped: int = 0
    decisions: list[dict[str, Any]] = field(default_factory=list)
    admitted_ids: list[int] = field(default_factory=list)
    evicted_ids: list[int] = field(default_factory=list)


class DeferredReasons:
    """Pending reasons kept in memory across the cycles of one converge, written once at its end
    (`flush`): the mode of simulate, whose database is its own, where nothing reads a stored
    reason between two cycles but the next commit, to write only what changed (the engine's
    decisions never read one). A worker's commit gets none and writes every cycle.

    `stored` is the reason each job has or will have once flushed, with the revision it is for:
    the commit compares against it rather than the snapshot's, which may be older; `dirty` are
    the jobs whose reason is not written yet."""

    def __init__(self) -> None:
        self.stored: dict[int, tuple[int, str, str, int | None]] = {}
        self.dirty: set[int] = set()
        self.seen: dict[str, JobSeen] = {}  # the last commit's snapshot, for its memory (`flush`)

    def flush(self) -> None:
        """Write the reasons kept since the last flush, as the commits would have (only to jobs
        still pending at the revision). Those of jobs unmoved since the last snapshot go to its
        memory too, as a commit's do (`snapshot.reasons_written_here`), so they are not read again."""
        if not self.dirty:
            return
        rows = [(pk, *self.stored[pk]) for pk in sorted(self.dirty)]
        self.dirty.clear()
        versions = {seen.pk: seen.version for seen in self.seen.values()}
        with transaction.atomic():  # one commit; the snapshot's memory is a base again after it
            write_reasons(rows, versions=versions, seen=self.seen)


def write_reasons(
    rows: list[pending_reasons.ReasonRow], *, versions: dict[int, str | None], seen: dict[str, JobSeen]
) -> int:
    """Write `rows` (pending_reasons.write) inside the caller's transaction, and hand what was
    written to the snapshot's memory so that the next cycle need not read those jobs again:
    on PostgreSQL once committed, each at its row's version (`versions`, as the snapshot read
    them: a reason does not move the job row's); on simulate's SQLite inside the commit, the
    jobs still as `seen` read them and untouched since (`snapshot.reasons_written_here`, which
    takes only a batch written whole: the others go in a write of their own). Returns the rows
    the SQLite write is known to have written (PostgreSQL: 0, its rows being taken by version)."""
    if connection.vendor == "postgresql":
        done = pending_reasons.write_versions(rows)
        settled = [
            (pk, version, version, code, message, position, done[pk])
            for pk, _revision, code, message, position in rows
            if pk in done and (version := versions.get(pk)) is not None
        ]
        transaction.on_commit(lambda: snapshots.reasons_written(settled))
        return 0
    logged, pending = snapshot_moves.logged(), JobState.PENDING.value
    unmoved: list[pending_reasons.ReasonRow] = []
    others: list[pending_reasons.ReasonRow] = []
    for row in rows:
        job = seen.get(str(row[0]))  # str(pk): job_key
        still = job is not None and job.state == pending and job.revision == row[1]
        (unmoved if still and row[0] not in logged else others).append(row)
    written = len(pending_reasons.write(others))
    taken = pending_reasons.write(unmoved)
    if taken:
        snapshots.reasons_written_here(unmoved, logged, seen)
    return written + len(taken)


class _CommitRows:
    """The state of one commit and its row-level work; `_Commit` (scheduling.commit) applies the
    decisions through it. With `deferred` (simulate), the pending reasons go there instead of to
    the database (DeferredReasons)."""

    def __init__(self, *, index: SnapshotIndex, now: datetime, deferred: DeferredReasons | None = None) -> None:
        self.index = index
        self.now = now
        self.deferred = deferred
        self.applied = _Applied()
        self.node_names = {pk: name for name, pk in index.node_ids.items()}
        self.used: dict[tuple[int, int], float] = defaultdict(float)
        self.held: dict[int, list[Placement]] = defaultdict(list)
        self.node_gpus: dict[int, int] = {}
        self.node_state: dict[int, str] = {}
        # Admissions are checked one by one, in the engine's order, against rows locked up front
        # (`_lock_jobs`), and written together at the end (`_flush_admissions`).
        self.current: dict[int, tuple[str, int]] = {}
        self.admit_rows: list[tuple[int, int, float, int]] = []
        self.releasing_rows: list[tuple[int, int, datetime, int | None]] = []
        self.released_rows: list[tuple[Any, ...]] = []
        # Rows for bulk.insert, in the order of _PLACEMENT_COLUMNS and _EVENT_COLUMNS.
        self.new_placements: list[tuple[int, int, list[int], float]] = []
        self.new_events: list[tuple[int, str, datetime, str, int | None, str]] = []
        self.drained_to_queue = False

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

    def _load_occupancy(self, result: engine.CycleResult, moves: set[str]) -> None:
        """The devices as this transaction sees them, after this cycle's own evictions and shrinks:
        of the nodes the result places on, and every replica of the jobs it moves (a cycle of S4
        places on a few hundred of its 10,000 nodes, which hold 50,000 replicas in all)."""
        targets: set[int] = set()
        for decision in result.decisions:
            replicas = (
                decision.placements
                if isinstance(decision, engine.Admit)
                else decision.add
                if isinstance(decision, engine.Grow)
                else ()
            )
            for replica in replicas:
                node_id = self.index.node_ids.get(replica.node)
                if node_id is not None:
                    targets.add(node_id)
        moved = [seen.pk for key in moves if (seen := self.index.jobs.get(key)) is not None]
        nodes, held = held_devices(targets, moved) if len(targets) <= _READ_ALL_NODES else held_devices()
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
            columns=("state", "finished_at", "reason_code", "reason_message", "beneficiary_id"),
            rows=self.released_rows,
            fixed=(
                ("revision", "revision + 2", ()),
                ("preemptions", "preemptions + 1", ()),
                ("allocated_gpus", "0", ()),
                ("running_replicas", "0", ()),
                ("started_at", "NULL", ()),
                ("evicted_at", "NULL", ()),
                ("release_at", "NULL", ()),
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

    def _write_reasons(self, result: engine.CycleResult, admitted_now: set[str]) -> None:
        """Only reasons that changed since the snapshot are written, and only to jobs still pending
        at the revision the snapshot saw, into their own table (scheduling.pending_reasons): the
        job rows are not rewritten. The reasons written go to the snapshot's memory once
        committed (on simulate's SQLite, as written, inside the commit), so that the next cycle
        need not read those jobs again."""
        if self.deferred is not None:
            self._defer_reasons(result, admitted_now, self.deferred)
            return
        rows: list[pending_reasons.ReasonRow] = []
        versions: dict[int, str | None] = {}  # the rows' jobs' versions, for the snapshot's memory
        reason_of, pending, none = result.pending.get, JobState.PENDING.value, ("", "", None)  # 150,000 jobs at S4
        held_until, held = pending_reasons.positions_held_until(self.now), False
        for key, seen in self.index.jobs.items():
            if seen.state != pending or key in admitted_now:
                continue
            reason = reason_of(key)
            code, message, position = wanted = (
                (reason.code, reason.message, reason.position) if reason is not None else none
            )
            if code == seen.reason_code and message == seen.reason_message:
                if position == seen.position:
                    continue
                if held_until is not None and position is not None and seen.position is not None:
                    held = True  # only moved in the queue, and positions are not due
                    continue
            rows.append((seen.pk, seen.revision, *wanted))
            versions[seen.pk] = seen.version
        self.applied.positions_held_until = held_until if held else None
        if rows:
            self.applied.reasons_read_again = write_reasons(rows, versions=versions, seen=self.index.jobs)

    def _defer_reasons(self, result: engine.CycleResult, admitted_now: set[str], deferred: DeferredReasons) -> None:
        """`_write_reasons` into `deferred`: each reason compared with the one the job will have
        once flushed, where that is for the revision the snapshot saw, else with the snapshot's."""
        stored, dirty = deferred.stored, deferred.dirty
        # Hoisted: every pending job, every cycle (S3's simulate: 62 cycles of up to 10,000), and
        # an enum member's lookup cost as much as the rest of a job's comparison.
        reason_of, kept_of, mark_dirty, pending = result.pending.get, stored.get, dirty.add, JobState.PENDING.value
        for key, seen in self.index.jobs.items():
            if seen.state != pending or key in admitted_now:
                continue
            reason = reason_of(key)
            revision = seen.revision
            # The kept form: the revision it is for, then the reason.
            wanted = (revision, reason.code, reason.message, reason.position) if reason else (revision, "", "", None)
            kept = kept_of(seen.pk)
            if kept is not None and kept[0] == revision:
                if wanted != kept:
                    stored[seen.pk] = wanted
                    mark_dirty(seen.pk)
            elif wanted[1:] != (seen.reason_code, seen.reason_message, seen.position):
                stored[seen.pk] = wanted
                mark_dirty(seen.pk)
        deferred.seen = self.index.jobs
