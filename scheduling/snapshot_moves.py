"""Which jobs moved since the last snapshot, where the database logs it itself: `manage.py
simulate`'s private SQLite database (issue 26).

A running worker on PostgreSQL learns which job rows moved from their row versions (`_mark`,
scheduling.snapshot). SQLite has no row versions, so every cycle read all 10,000 active jobs of
simulate's S3 burst again, a sixth of its time. The private database is the simulation's alone,
and there the snapshot can be told of every write: `track_moves` adds triggers that log the id of
each job whose row, placements or workspace any statement inserts, changes or deletes, and the
next snapshot reads in full only those jobs (`moved`), keeping the others as the last one built
them. Nothing is trusted that the log may have missed: a snapshot read inside a transaction
counts as the base of the next one only once that transaction commits (a rollback would restore
log rows the read had taken), and any doubt (another database, names of nodes or quotas that
changed, most jobs moved) means a full read, as before.

The nodes, quotas and pools (the snapshot's frame, 2,000 rows at S3) are counted the same way:
triggers count every row written to them (`frame_version`), and a snapshot builds on the last
frame it read, committed, at the same count instead of reading them again (scheduling.snapshot_rows).
"""

from __future__ import annotations

from django.db import connection, transaction

from quotas.models import Node, Quota, ResourcePool
from scheduling.models import Job, PendingReason, ReplicaPlacementRecord
from workspaces.models import Workspace

MOVED_TABLE = "scheduling_snapshot_moved_job"
# One row, one count: the writes to the tables a snapshot's frame reads (`frame_version`).
FRAME_TABLE = "scheduling_snapshot_frame_version"


class _Tracking:
    # The database (`database_key`) whose writes are logged, if any; and
    # whether the last snapshot of it was read with the log emptied and has committed since.
    database: tuple[object, ...] | None = None
    base_read: bool = False
    tracking = 0  # which `track_moves` this is: a frame version counts from 0 in each


_tracking = _Tracking()


def database_key() -> tuple[object, ...]:
    """The connected database, as a snapshot's memory is keyed by."""
    settings_dict = connection.settings_dict
    return (connection.vendor, settings_dict.get("HOST"), settings_dict.get("PORT"), settings_dict.get("NAME"))


def _triggers() -> dict[str, str]:
    """Each trigger's name and its CREATE statement."""
    qn = connection.ops.quote_name
    moved = qn(MOVED_TABLE)
    job, placement, reason, workspace = (
        model._meta.db_table for model in (Job, ReplicaPlacementRecord, PendingReason, Workspace)
    )
    log = f"INSERT OR IGNORE INTO {moved} (job_id)"
    triggers: dict[str, str] = {}
    # An update logs the row's job as it is now, and as it was only where the statement sets the
    # job's id itself (a second insert per row cost the commit's thousands of updates a cycle).
    events = (("insert", "INSERT", "NEW"), ("update", "UPDATE", "NEW"), ("update_of_job", "UPDATE OF", "OLD"))
    # A job's pending reason is read with it (scheduling.pending_reasons): its own table's writes log the job.
    for table, column in ((job, "id"), (placement, "job_id"), (reason, "job_id")):
        for suffix, event, row in (*events, ("delete", "DELETE", "OLD")):
            name = qn(f"{MOVED_TABLE}_{table}_{suffix}")
            on = f"{event} {qn(column)} ON" if event == "UPDATE OF" else f"{event} ON"
            triggers[name] = (
                f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {on} {qn(table)} "
                f"BEGIN {log} VALUES ({row}.{qn(column)}); END"
            )
    # A workspace's name is among a job's engine columns.
    name = qn(f"{MOVED_TABLE}_workspace_update")
    triggers[name] = (
        f"CREATE TRIGGER IF NOT EXISTS {name} AFTER UPDATE ON {qn(workspace)} BEGIN "
        f"{log} SELECT {qn('id')} FROM {qn(job)} WHERE {qn('workspace_id')} IN (NEW.{qn('id')}, OLD.{qn('id')}); END"
    )
    return triggers


def _frame_triggers() -> dict[str, str]:
    """Each trigger's name and its CREATE statement: every row written to the nodes, the quotas
    or the pools (what a snapshot's frame reads besides the fence) counts one."""
    qn = connection.ops.quote_name
    triggers: dict[str, str] = {}
    for table in (model._meta.db_table for model in (Node, Quota, ResourcePool)):
        for event in ("INSERT", "UPDATE", "DELETE"):
            name = qn(f"{FRAME_TABLE}_{table}_{event.lower()}")
            triggers[name] = (
                f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON {qn(table)} "
                f"BEGIN UPDATE {qn(FRAME_TABLE)} SET {qn('n')} = {qn('n')} + 1; END"
            )
    return triggers


def frame_version() -> tuple[int, int] | None:
    """Where writes are logged, the version of the nodes, quotas and pools: a frame read at the
    same version (and committed: a rolled-back write takes its count back) is the same frame
    (scheduling.snapshot_rows). None where they are not logged."""
    if _tracking.database != database_key():
        return None
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {connection.ops.quote_name('n')} FROM {connection.ops.quote_name(FRAME_TABLE)}")
        return _tracking.tracking, cursor.fetchone()[0]


def track_moves() -> None:
    """Log every job's moves on the connected SQLite database from now on, for its snapshots.
    Only for a database that this process alone writes, through one connection (simulate's own)."""
    assert connection.vendor == "sqlite", "PostgreSQL snapshots read row versions instead"
    moved = connection.ops.quote_name(MOVED_TABLE)
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {moved} (job_id integer NOT NULL PRIMARY KEY)")
        frame = connection.ops.quote_name(FRAME_TABLE)
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {frame} (n integer NOT NULL)")
        for statement in (*_triggers().values(), *_frame_triggers().values()):
            cursor.execute(statement)
        cursor.execute(f"DELETE FROM {moved}")
        cursor.execute(f"DELETE FROM {frame}")
        cursor.execute(f"INSERT INTO {frame} (n) VALUES (0)")
    _tracking.database = database_key()
    _tracking.base_read = False
    _tracking.tracking += 1


def stop_tracking(*, drop: bool = True) -> None:
    """Snapshots read everything again; the log and its triggers are dropped (unless the database
    is about to go: `drop=False`)."""
    if drop and _tracking.database == database_key():
        with connection.cursor() as cursor:
            for trigger in (*_triggers(), *_frame_triggers()):
                cursor.execute(f"DROP TRIGGER IF EXISTS {trigger}")
            for table in (MOVED_TABLE, FRAME_TABLE):
                cursor.execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(table)}")
    _tracking.database = None
    _tracking.base_read = False


def tracked(database: tuple[object, ...]) -> bool:
    """Whether `database`'s moves are logged and the last snapshot of it is a base to build on."""
    return _tracking.database == database and _tracking.base_read


def logged() -> set[int]:
    """The ids of the jobs moved since the last snapshot, where moves are logged; else none."""
    return set(moved()) if _tracking.database == database_key() else set()


def moved() -> list[int]:
    """The ids of the jobs moved since the last snapshot (the log itself stays until `read`)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT job_id FROM {connection.ops.quote_name(MOVED_TABLE)}")
        return [job_id for (job_id,) in cursor.fetchall()]


def moved_subquery() -> str:
    """SQL for the moved jobs' ids, to filter a read by."""
    return f"SELECT job_id FROM {connection.ops.quote_name(MOVED_TABLE)}"


def taken(database: tuple[object, ...], job_ids: list[int]) -> None:
    """The snapshot's memory took the writes to `job_ids` as they were made (scheduling.snapshot's
    `reasons_written_here`): out of the log. The memory is a base again once the caller's
    transaction commits; after a rollback, which restores neither the rows nor the memory, it is
    not, and the next snapshot reads everything."""
    _tracking.base_read = False
    moved = connection.ops.quote_name(MOVED_TABLE)
    with connection.cursor() as cursor:
        for start in range(0, len(job_ids), 500):
            chunk = job_ids[start : start + 500]
            cursor.execute(f"DELETE FROM {moved} WHERE job_id IN ({', '.join(['%s'] * len(chunk))})", chunk)
    _settle_on_commit(database)


def _settle_on_commit(database: tuple[object, ...]) -> None:
    def settle() -> None:
        if _tracking.database == database:
            _tracking.base_read = True

    transaction.on_commit(settle)  # at once outside a transaction


def read(database: tuple[object, ...]) -> None:
    """A snapshot of `database` has just read the jobs (when tracked): empty the log. The read is
    the base of the next one once the caller's transaction commits (at once outside one)."""
    if _tracking.database != database:
        return
    _tracking.base_read = False
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {connection.ops.quote_name(MOVED_TABLE)}")
    _settle_on_commit(database)
