"""The cycle's snapshot: the database as the engine's frozen snapshot.

`build_snapshot` turns the database into the engine's frozen snapshot in a fixed number of
queries (six, whatever the size of the cluster; eight for a running worker's cycle, which reads
in full only the jobs whose rows moved since its last one), and keeps an index from the engine's
string ids back to rows, with the state and revision each job had when it was read.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models.expressions import RawSQL

from scheduling import engine, snapshot_moves
from scheduling.models import ACTIVE_STATES, HOLDING_STATES, Job, PendingReason, ReplicaPlacementRecord
from scheduling.pending_reasons import with_shown_reason
from scheduling.snapshot_rows import (
    _SEEN_AT,
    ENGINE_JOB_COLUMNS,
    QUOTA_ID_AT,
    STATE_AT,
    SUBMITTED_AT,
    Moment,
    NodesAndQuotas,
    engine_job,
    raw_rows,
    read_nodes_and_quotas,
)

# Re-exported: what a snapshot keeps of each job, which its readers name from here.
from scheduling.snapshot_rows import SEEN_JOB_COLUMNS as SEEN_JOB_COLUMNS
from scheduling.snapshot_rows import JobSeen as JobSeen
from scheduling.snapshot_rows import job_seen as job_seen


@dataclass(slots=True)
class SnapshotIndex:
    jobs: dict[str, JobSeen] = field(default_factory=dict)
    node_ids: dict[str, int] = field(default_factory=dict)
    quota_ids: dict[str, int] = field(default_factory=dict)
    fence_token: int = 0
    fence_generation: int = 0
    jobs_read: int = 0  # job rows read in full: all of them, or those whose row version moved


def job_key(pk: int) -> str:
    """The engine's id of a job: its primary key as a string."""
    return str(pk)


class _Known(NamedTuple):
    """An active job as the last snapshot of this process read it, with what was built from it."""

    mark: str | None  # its row version and its workspace's (PostgreSQL; see `_mark`)
    held_mark: tuple[str, ...] | None  # its placements' row versions, sorted, while it holds GPUs
    row: tuple[Any, ...]  # its row as read: ENGINE_JOB_COLUMNS, SEEN_JOB_COLUMNS, its mark
    quota: str
    replicas: tuple[tuple[str, Any, float], ...]
    seen: JobSeen
    job: engine.Job


class _Memory:
    """The active jobs of the last snapshot this process built, by job id.

    Most jobs are the same from one cycle to the next. A full read compares each row with what it
    was (keyed by id: hashing the 18-value key of each of S4's 150,000 jobs cost more) and rebuilds
    only what differs. A running worker's cycle reads less: on PostgreSQL only the row versions of
    the active jobs, their workspaces, reasons and placements (`_mark`), and in full the jobs whose
    versions moved (`_read_changed`). Any writer (a commit of either worker process, a service, a
    hand edit) makes new row versions: no change hides from that. Each snapshot replaces the map."""

    # The database, node names and quota names it was read with, and the jobs: one tuple assigned
    # at once (threads of a web process build snapshots side by side).
    read: tuple[tuple[Any, ...], dict[int, str], dict[int, str], dict[int, _Known]] = ((), {}, {}, {})
    reads_since_full = 0  # incremental reads since the last full one
    # Job rows that commit wrote without handing their new versions here (`reasons_written`).
    rewritten = 0


_memory = _Memory()


def committed(*, rows_written: int) -> None:
    """This process's commit wrote about `rows_written` job rows: after one that rewrote most rows
    the next cycle reads everything at once (scheduling.cycle)."""
    _memory.rewritten = rows_written


def build_snapshot(now: datetime, *, incremental: bool = False) -> tuple[engine.Snapshot, SnapshotIndex]:
    """The cluster as the engine sees it: ready and down nodes, the quota tree, the active jobs.

    The fence is read first: a cycle that commits after this read makes the snapshot stale, and
    the commit then refuses it (see scheduling.cycle).
    """
    frame = read_nodes_and_quotas()
    node_names, quota_names = frame.node_names, frame.quota_names
    index = SnapshotIndex(
        node_ids={name: node_id for node_id, name in node_names.items()},
        quota_ids={name: quota_id for quota_id, name in quota_names.items()},
        fence_token=frame.fence_token,
        fence_generation=frame.fence_generation,
    )

    known, read = _active_jobs(frame, incremental=incremental)
    # Mapped, not comprehended: two passes over every active job each cycle (S3's simulate: 62).
    jobs = tuple(map(_job_of, known.values()))
    index.jobs = dict(zip(map(_id_of, jobs), map(_seen_of, known.values()), strict=True))
    index.jobs_read = read

    snapshot = engine.Snapshot(
        nodes=tuple(frame.nodes),
        quotas=tuple(frame.quotas),
        jobs=jobs,
        now=now.timestamp(),
        placement=frame.placement,
        pool_placements=frame.pool_placements,
    )
    return snapshot, index


_job_of, _seen_of, _id_of = attrgetter("job"), attrgetter("seen"), attrgetter("id")


def _active_jobs(frame: NodesAndQuotas, *, incremental: bool) -> tuple[dict[int, _Known], int]:
    """The active jobs in the engine's order (submitted_at, id), and how many rows were read in full."""
    memory = _memory
    database = snapshot_moves.database_key()
    read_with, node_names, quota_names, before = memory.read
    full_every = max(1, int(getattr(settings, "SCHEDULER_FULL_CYCLE_BEATS", 12)))
    same = bool(before) and (read_with, node_names, quota_names) == (database, frame.node_names, frame.quota_names)
    if (
        incremental
        and connection.vendor == "postgresql"
        and same
        and memory.reads_since_full < full_every
        and memory.rewritten * _MOSTLY <= len(before)
    ):
        changed = _read_changed(frame, before)
        if changed is not None:
            known, read = changed
            memory.read = (database, frame.node_names, frame.quota_names, known)
            memory.reads_since_full += 1
            return known, read
    if same and snapshot_moves.tracked(database) and len(moved := snapshot_moves.moved()) < len(before):
        known = _read_moved(frame, before, moved)
        snapshot_moves.read(database)  # the log emptied once its jobs are read
        memory.read = (database, frame.node_names, frame.quota_names, known)
        return known, len(moved)
    known = _read_all(frame, before)
    snapshot_moves.read(database)
    memory.read = (database, frame.node_names, frame.quota_names, known)
    memory.reads_since_full = 0
    return known, len(known)


def _mark(table: str) -> str:
    """SQL for the version of a row of `table` (PostgreSQL): its `xmin` (the transaction that wrote
    it) and `ctid` (where it lies). An UPDATE writes a new version; a version written by one
    transaction never takes another's place, and a later one by the same transaction (a test's)
    goes elsewhere while the first is still there, so an equal mark is the same row as read."""
    return f"{table}.xmin::text || {table}.ctid::text"


def _job_mark(job: str, workspace: str, reason: str) -> str:
    """SQL for a job's mark: its row's, its workspace's and its pending reason's versions (without
    the reason's, any commit but this process's own meant a full read: issue 25's drain, most)."""
    return f"{_mark(job)} || ' ' || {_mark(workspace)} || ' ' || COALESCE({_mark(reason)}, '')"


def _job_part(mark: str | None) -> str | None:
    """The job row's own version in a job's mark (the others follow it)."""
    return None if mark is None else mark.split(" ", 1)[0]


def reasons_written(written: list[tuple[int, str, str, str, str, int | None, str]]) -> None:
    """After a commit: the pending jobs whose reason it wrote, each (id, the row's version before
    and after: the same, a reason having a table of its own; code, message, position; the reason
    row's version as written). The next snapshot takes them as they are, not reading them again."""
    database, node_names, quota_names, known = _memory.read
    if not written or not known:
        return
    kept = dict(known)
    for pk, before, version, code, message, position, reason_mark in written:
        entry = kept.get(pk)
        if entry is None or entry.mark is None or entry.seen.version != before:
            continue  # this process has read the row since, or another version of it
        # Positionally, not `_replace` (a first cycle hands 100,000 reasons here at S4: 0.2 s less).
        _was_mark, held_mark, was_row, quota, replicas, was, job = entry
        mark = f"{version} {entry.mark.split(' ')[1]} {reason_mark}"  # the workspace's as it was
        row = (*was_row[: _SEEN_AT + 3], code, message, position, mark)  # the row as it is now
        seen = _new_tuple(JobSeen, (*was[:8], code, message, position, version))
        kept[pk] = _new_tuple(_Known, (mark, held_mark, row, quota, replicas, seen, job))
    _memory.read = (database, node_names, quota_names, kept)


def reasons_written_here(
    written: list[tuple[int, int, str, str, int | None]], logged_before: set[int], seen: dict[str, JobSeen]
) -> None:
    """SQLite with its moves logged (snapshot_moves), inside the commit, right after its pending
    reasons were written: each (id, seen revision, code, message, position), every one written.
    A job that no other write touched since the snapshot `seen` read it (not in `logged_before`,
    the log as it was before the reasons went) is taken as written, not read again; the next
    snapshot builds on this one only once the commit's transaction commits."""
    database, node_names, quota_names, known = _memory.read
    if not snapshot_moves.tracked(database):
        return
    kept = dict(known)
    taken = []
    for pk, _revision, code, message, position in written:
        entry = kept.get(pk)
        if pk in logged_before or entry is None or entry.seen is not seen.get(str(pk)):  # str(pk): job_key
            continue  # moved since, or this process has read another snapshot since
        # Positionally, as `job_seen` builds them: `_replace` cost S3's commits a second in all.
        mark, held_mark, row, quota, replicas, was, job = entry
        row = (*row[: _SEEN_AT + 3], code, message, position, row[-1])  # the row as it is now
        now = _new_tuple(JobSeen, (*was[:8], code, message, position, was.version))
        kept[pk] = _new_tuple(_Known, (mark, held_mark, row, quota, replicas, now, job))
        taken.append(pk)
    snapshot_moves.taken(database, taken)
    _memory.read = (database, node_names, quota_names, kept)


def _tables() -> tuple[str, str, str, str]:
    """The job, workspace, placement and pending reason tables, quoted."""
    qn = connection.ops.quote_name
    workspace = Job._meta.get_field("workspace").related_model
    assert workspace is not None and not isinstance(workspace, str)
    models = (Job, workspace, ReplicaPlacementRecord, PendingReason)
    job, workspaces, placement, reason = (qn(model._meta.db_table) for model in models)
    return job, workspaces, placement, reason


def _job_rows(ids: list[int] | None, *, moved: bool = False) -> list[tuple[Any, ...]]:
    """Active jobs as `ENGINE_JOB_COLUMNS` + `SEEN_JOB_COLUMNS` (+ their mark on PostgreSQL), in the
    engine's order: all of them, those of `ids`, or the `moved` ones (snapshot_moves)."""
    jobs = Job.objects.filter(state__in=ACTIVE_STATES).order_by("submitted_at", "id")
    if ids is not None:  # their order is the versions' read (`_read_changed`)
        jobs = jobs.filter(pk__in=RawSQL("SELECT unnest(%s::bigint[])", (ids,))).order_by()
    elif moved:  # their order is the caller's (`_read_moved`)
        jobs = jobs.filter(pk__in=RawSQL(snapshot_moves.moved_subquery(), ())).order_by()
    jobs = jobs.annotate(submitted=Moment("submitted_at"), started=Moment("started_at"), evicted=Moment("evicted_at"))
    jobs = with_shown_reason(jobs)
    if connection.vendor == "postgresql":
        # The workspace's name is among the engine columns: its row version belongs to the mark.
        _job, workspace, _placement, reason = _tables()
        # The reason's table is joined by `with_shown_reason` (a LEFT OUTER JOIN, by its own name).
        jobs = jobs.annotate(mark=RawSQL(_job_mark(_job, workspace, reason), ()))
        return raw_rows(jobs.values_list(*ENGINE_JOB_COLUMNS, *SEEN_JOB_COLUMNS, "mark"))
    return [(*row, None) for row in raw_rows(jobs.values_list(*ENGINE_JOB_COLUMNS, *SEEN_JOB_COLUMNS))]


def _placement_rows(ids: list[int] | None, *, moved: bool = False) -> list[tuple[Any, ...]]:
    """Held replicas as (job id, node id, devices as stored, fraction, mark), by job and id: of every
    holding job, or of the jobs `ids` or `moved` (whatever their state; the caller keeps the holding ones)."""
    placements = ReplicaPlacementRecord.objects.all()
    if moved:
        placements = placements.filter(job_id__in=RawSQL(snapshot_moves.moved_subquery(), ()))
    elif ids is None:
        placements = placements.filter(job__state__in=HOLDING_STATES)
    else:
        placements = placements.filter(job_id__in=RawSQL("SELECT unnest(%s::bigint[])", (ids,)))
    placements = placements.order_by("job_id", "id")
    if connection.vendor == "postgresql":
        placements = placements.annotate(mark=RawSQL(_mark(_tables()[2]), ()))
        return raw_rows(placements.values_list("job_id", "node_id", "devices", "fraction", "mark"))
    return [(*row, None) for row in raw_rows(placements.values_list("job_id", "node_id", "devices", "fraction"))]


def _held(
    rows: list[tuple[Any, ...]], node_names: dict[int, str]
) -> tuple[dict[int, list[tuple[str, Any, float]]], dict[int, list[str]]]:
    """Per job, its replicas as read (node name, devices as stored, fraction) and their marks."""
    held: dict[int, list[tuple[str, Any, float]]] = defaultdict(list)
    marks: dict[int, list[str]] = defaultdict(list)
    for job_id, node_id, devices, fraction, mark in rows:
        stored = devices if isinstance(devices, str) else tuple(devices)  # hashable: part of a job's identity
        held[job_id].append((node_names[node_id], stored, fraction))
        marks[job_id].append(mark)
    return held, marks


def _known(
    row: tuple[Any, ...],
    quota: str,
    replicas: tuple[tuple[str, Any, float], ...],
    held_mark: tuple[str, ...] | None,
    previous: _Known | None,
) -> _Known:
    """A job read in full (its mark last); its engine job kept from `previous` if built from the same,
    and `previous` itself if read the same (most pending jobs, cycle after cycle)."""
    if previous is not None and previous.quota == quota and previous.replicas == replicas:
        if previous.row == row and previous.held_mark == held_mark:
            return previous
        if previous.row[:_SEEN_AT] == row[:_SEEN_AT]:
            return _Known(row[-1], held_mark, row, quota, replicas, job_seen(row, _job_part(row[-1])), previous.job)
    job = engine_job(str(row[0]), row, quota, replicas)
    return _Known(row[-1], held_mark, row, quota, replicas, job_seen(row, _job_part(row[-1])), job)


def _read_all(frame: NodesAndQuotas, before: dict[int, _Known]) -> dict[int, _Known]:
    """Every active job, read in full; an engine job equal to the one built before is kept."""
    job_rows = _job_rows(None)
    held: dict[int, list[tuple[str, Any, float]]] = {}
    held_marks: dict[int, list[str]] = {}
    if any(row[STATE_AT] in HOLDING_STATES for row in job_rows):
        held, held_marks = _held(_placement_rows(None), frame.node_names)
    quota_names = frame.quota_names
    known: dict[int, _Known] = {}
    for row in job_rows:
        pk = row[0]
        mark, state = row[-1], row[STATE_AT]
        if pk in held:
            replicas = tuple(held[pk])
            marks = held_marks.get(pk)
        else:
            replicas, marks = (), None
        quota = quota_names[row[QUOTA_ID_AT]]
        # `_held_mark`, inline: 150,000 calls at S4.
        held_mark = None if mark is None or state not in HOLDING_STATES else (tuple(sorted(marks)) if marks else ())
        previous = before.get(pk)
        if previous is not None:
            known[pk] = _known(row, quota, replicas, held_mark, previous)
            continue
        # A job this process has not read (all of them in a fresh worker's first cycle): built
        # here without `_known`'s comparisons.
        seen = job_seen(row, None if mark is None else mark.partition(" ")[0])  # `_job_part`
        known[pk] = _new_tuple(
            _Known, (mark, held_mark, row, quota, replicas, seen, engine_job(str(pk), row, quota, replicas))
        )
    return known


# A named tuple made from its values at once, without its `__new__`'s call per field.
_new_tuple = tuple.__new__


def _read_moved(frame: NodesAndQuotas, before: dict[int, _Known], moved: list[int]) -> dict[int, _Known]:
    """The active jobs where SQLite logs their moves (snapshot_moves): the `moved` ones read in full,
    the others as in `before`; in the engine's order (submitted_at as SQLite stores it, naive UTC
    ISO text, sorts here as in its ORDER BY; then id).

    `before` is in that order, and a moved job keeps its place while its submitted_at stays: it is
    replaced where it is, a job gone is dropped, new ones (a burst's) go after the rest; sorting
    all of S3's 10,000 jobs again cost ms a cycle. A new job before the last kept: a full sort."""
    rows = _job_rows(None, moved=True)
    held = _held(_placement_rows(None, moved=True), frame.node_names)[0] if rows else {}
    known = dict(before)
    placed: list[tuple[str, int, _Known]] = []  # jobs new here, or whose place moved
    active: set[int] = set()
    for row in rows:
        pk = row[0]
        active.add(pk)
        replicas = tuple(held[pk]) if pk in held and row[STATE_AT] in HOLDING_STATES else ()
        previous = before.get(pk)
        entry = _known(row, frame.quota_names[row[QUOTA_ID_AT]], replicas, None, previous)
        if previous is not None and previous.row[SUBMITTED_AT] == row[SUBMITTED_AT]:
            known[pk] = entry  # in its place
        else:
            if previous is not None:
                del known[pk]
            placed.append((row[SUBMITTED_AT], pk, entry))
    for pk in moved:
        if pk not in active:
            known.pop(pk, None)  # no longer active
    if not placed:
        return known
    placed.sort(key=_order)
    last = next(reversed(known), None)
    if last is not None and (known[last].row[SUBMITTED_AT], last) > placed[0][:2]:
        placed.extend((entry.row[SUBMITTED_AT], pk, entry) for pk, entry in known.items())
        placed.sort(key=_order)
        return {pk: entry for _submitted, pk, entry in placed}
    known.update((pk, entry) for _submitted, pk, entry in placed)
    return known


_order = itemgetter(0, 1)  # of (submitted_at, id, entry): the engine's order


# Past one job in this many moved, a full read: PostgreSQL reads rows by id at about twice the cost
# of the plain scan (S4's second cycle, 100,000 of 150,000 rows moved: 1.5 s against 0.8 s).
_MOSTLY = 3


def _held_mark(row: tuple[Any, ...], marks: list[str] | None) -> tuple[str, ...] | None:
    """What a job's placements' marks say of it: their versions while it holds GPUs, else nothing."""
    if row[-1] is None or row[STATE_AT] not in HOLDING_STATES:
        return None
    return tuple(sorted(marks)) if marks else ()


def _read_changed(frame: NodesAndQuotas, before: dict[int, _Known]) -> tuple[dict[int, _Known], int] | None:
    """The active jobs from their row versions alone, reading in full only those whose version (or
    whose workspace's or placements') moved since `before`. None when a job moved again between
    the two reads: the caller reads everything."""
    job, workspace, placement, reason = _tables()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {job}.id, {_job_mark(job, workspace, reason)} FROM {job} "
            f"INNER JOIN {workspace} ON {workspace}.id = {job}.workspace_id "
            f"LEFT OUTER JOIN {reason} ON {reason}.job_id = {job}.id "
            f"WHERE {job}.state = ANY(%s) ORDER BY {job}.submitted_at ASC, {job}.id ASC",
            [list(ACTIVE_STATES)],
        )
        versions: list[tuple[int, str]] = cursor.fetchall()
        # Every placement: a finished job's are deleted with it, so these are the holding jobs'.
        cursor.execute(f"SELECT job_id, {_mark(placement)} FROM {placement}")
        placed: dict[int, list[str]] = defaultdict(list)
        for job_id, mark in cursor.fetchall():
            placed[job_id].append(mark)
    stale = []
    for pk, mark in versions:
        known = before.get(pk)
        if (
            known is None
            or known.mark != mark
            or (known.held_mark is not None and known.held_mark != (tuple(sorted(placed[pk])) if pk in placed else ()))
        ):
            stale.append(pk)
    if len(stale) * _MOSTLY > len(versions):
        return None  # most rows moved (a first cycle's reasons): one plain read costs less than by id
    fresh: dict[int, tuple[Any, ...]] = {}
    held: dict[int, list[tuple[str, Any, float]]] = {}
    held_marks: dict[int, list[str]] = {}
    if stale:
        fresh = {row[0]: row for row in _job_rows(stale)}
        if len(fresh) != len(stale):
            return None  # a job left the active states between the two reads
        held, held_marks = _held(_placement_rows(stale), frame.node_names)
    quota_names = frame.quota_names
    known_now: dict[int, _Known] = {}
    for pk, mark in versions:
        row = fresh.get(pk)
        if row is None:
            known_now[pk] = before[pk]
            continue
        held_mark = _held_mark(row, held_marks.get(pk))
        if row[-1] != mark or (held_mark is not None and held_mark != tuple(sorted(placed.get(pk, ())))):
            return None  # moved again between the two reads
        replicas = tuple(held[pk]) if held_mark is not None and pk in held else ()
        known_now[pk] = _known(row, quota_names[row[QUOTA_ID_AT]], replicas, held_mark, before.get(pk))
    return known_now, len(stale)
