"""Pending reasons in their own table (scheduling.models.PendingReason, issue 26): the commit's
write, and the reason a reader shows.

A job's reason as shown: while it is pending and its PendingReason row is at the job's revision,
that row (the engine's last word, even an empty one); otherwise the job's own columns (cancelling,
preempted, a final message) and no position: only the engine's reasons have one, and the job has
no column for it (migration 0011 dropped it). `with_shown_reason` puts that into any query of jobs as
`shown_reason_code`, `shown_reason_message`, `shown_reason_position` (one join, no query per job);
a Job read with `select_related("pending_reason")` has the same as `job.shown_reason`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, F, Q, QuerySet, When

from scheduling.models import Job, JobState, PendingReason, SchedulerFence

# (job id, the revision the snapshot saw it pending at, code, message, position)
ReasonRow = tuple[int, int, str, str, int | None]


def _current() -> Q:
    """The job's PendingReason row counts: the job is pending at the revision the row was written for."""
    return Q(state=JobState.PENDING, pending_reason__revision=F("revision"))


def with_shown_reason(jobs: QuerySet[Job]) -> QuerySet[Any]:
    """The jobs, each with the reason it shows (see the module): shown_reason_code, _message, _position.
    Typed loosely: the type checker's model of a queryset knows no annotation made in a helper."""
    current = _current()
    return jobs.annotate(
        shown_reason_code=Case(When(current, then=F("pending_reason__code")), default=F("reason_code")),
        shown_reason_message=Case(When(current, then=F("pending_reason__message")), default=F("reason_message")),
        shown_reason_position=Case(When(current, then=F("pending_reason__position"))),  # else NULL
    )


def write(rows: Sequence[ReasonRow]) -> list[int]:
    """Each row's reason, written only where its job is still pending at the seen revision.
    Returns the ids of the jobs written (SQLite: all of them, or none known). PostgreSQL: COPY
    into a temporary table and one merge (measured cheapest: unnest arrays cost the client 0.5 s
    more at S4); SQLite: one upsert statement for all rows."""
    return list(write_versions(rows))


def write_versions(rows: Sequence[ReasonRow]) -> dict[int, str]:
    """`write`, with the version of each reason row written (PostgreSQL: its xmin and ctid, as a
    snapshot's mark has them, scheduling.snapshot; SQLite: empty text)."""
    if not rows:
        return {}
    qn = connection.ops.quote_name
    table, jobs = qn(PendingReason._meta.db_table), qn(Job._meta.db_table)
    merge = (
        f"ON CONFLICT ({qn('job_id')}) DO UPDATE SET {qn('revision')} = excluded.{qn('revision')}, "
        f"{qn('code')} = excluded.{qn('code')}, {qn('message')} = excluded.{qn('message')}, "
        f"{qn('position')} = excluded.{qn('position')}"
    )
    names = f"{qn('job_id')}, {qn('revision')}, {qn('code')}, {qn('message')}, {qn('position')}"
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE TEMPORARY TABLE pending_reason_in (id bigint, revision integer, code text, message text, "
                "position integer) ON COMMIT DROP"
            )
            with cursor.copy("COPY pending_reason_in (id, revision, code, message, position) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            insert = (
                f"INSERT INTO {table} AS o ({names}) SELECT v.id, v.revision, v.code, v.message, v.position "
                f"FROM pending_reason_in AS v JOIN {jobs} AS j ON j.{qn('id')} = v.id AND j.{qn('state')} = %s "
                f"AND j.{qn('revision')} = v.revision"
            )
            returning = f"RETURNING o.{qn('job_id')}, o.xmin::text || o.ctid::text"
            written = _into_empty(cursor, table, f"{insert} {returning}")
            if written is None:
                cursor.execute(f"{insert} {merge} {returning}", [JobState.PENDING])
                written = dict(cursor.fetchall())
            cursor.execute("DROP TABLE pending_reason_in")  # within a longer transaction, the next commit's is new
            return written
        # `WHERE` before `ON CONFLICT`: SQLite's upsert after a SELECT needs it to parse. One
        # statement for all rows; which of them were written is known only when all were.
        cursor.executemany(
            f"INSERT INTO {table} ({names}) SELECT %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM {jobs} "
            f"WHERE {qn('id')} = %s AND {qn('state')} = %s AND {qn('revision')} = %s) {merge}",
            [
                (pk, revision, code, message, position, pk, JobState.PENDING, revision)
                for pk, revision, code, message, position in rows
            ],
        )
        return {row[0]: "" for row in rows} if cursor.rowcount == len(rows) else {}


def _into_empty(cursor: Any, table: str, insert: str) -> dict[int, str] | None:
    """The first write into an empty table (a fresh deployment's or seed's first cycle, 100,000
    reasons at S4) as a plain insert: `ON CONFLICT` checks each row's key speculatively first,
    0.1-0.15 s more at S4. None where the table has rows, or where a row arrived meanwhile (a
    commit that outlived its lease): the caller then merges, as always."""
    cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {table})")
    if cursor.fetchone()[0]:
        return None
    try:
        with transaction.atomic():  # a savepoint: a duplicate key undoes only this insert
            cursor.execute(insert, [JobState.PENDING])
            return dict(cursor.fetchall())
    except IntegrityError:
        return None


def positions_held_until(now: datetime) -> datetime | None:
    """None when the commit at `now` writes the pending jobs whose only change is their place in
    the queue (noted on the fence, whose row lock the caller's transaction holds); otherwise when
    they fall due, for the fence's wake_at, so that the beat writes a quiet queue's positions then.
    Those are most of a busy queue's rewrites (an admission moves every job behind it: 85 % of
    the rows the Kueue replay rewrote), so they go at most every SCHEDULER_POSITION_REFRESH_SECONDS;
    a new code or sentence is written by the cycle that makes it, with its position. Due on a
    fence that never wrote them and on a clock that went back."""
    every = _position_refresh()
    fence = SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID)
    last = fence.values_list("positions_at", flat=True).first()
    if every > timedelta(0) and last is not None and last <= now < last + every:
        return last + every
    fence.update(positions_at=now)
    return None


def _position_refresh() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "SCHEDULER_POSITION_REFRESH_SECONDS", 0.0)))
