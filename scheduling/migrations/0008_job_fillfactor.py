"""Room on each page of the job table for its rows' next versions (PostgreSQL only; issue 26).

Every cycle rewrites the pending reasons (reason_code, reason_message, position): a fresh worker
writes all of them (100,000 rows at S4), a running one those that moved. None of those columns
is in an index, so PostgreSQL can update a row in place on its own page (a HOT update: no new
entry in the table's nine indexes) — but only where the page has room for the new version. At
the default fillfactor (100) the pages of rows inserted together are full, and every reason
write became a cold update: a new version on another page and an entry in every index.

FILLFACTOR chosen by measurement at S4 (docs/benchmarks-engine.md, "Room for the reasons"): the
pending jobs are the newest rows, so their pages hold nothing else, and a page keeps a cycle's
rewrites HOT when it has room for one more version of each of its rows (about 210 bytes without
a reason, 300-410 with one; the version before is pruned when the page is next read). Of 100,
70, 55 and 45, 55 is the highest at which a running worker's rewrites are nearly all HOT: 99 %
of the 93,000 rows of a cycle (70: 83 %; 100: 1 %), PostgreSQL's CPU for them 3.2 s -> 0.8 s; 45
gains nothing more and costs 20 % more pages. A job's first reason doubles its row and goes HOT
on 40 % of the rows at 55 (all of them would need about 33). The snapshot's CPU did not move
with the table's size.

Only rows inserted or moved after this migration get the room: it does not rewrite the table
(VACUUM FULL takes the table's exclusive lock). The rows a cycle rewrites are the active jobs,
most of them submitted after it; `VACUUM FULL scheduling_job` at a quiet time gives the old
pages room at once. SQLite has no such setting: nothing is done there.
"""

from typing import Any

from django.db import migrations

FILLFACTOR = 55


def _job_table(apps: Any, schema_editor: Any) -> str | None:
    """The quoted name of the job table, or None where the database is not PostgreSQL."""
    if schema_editor.connection.vendor != "postgresql":
        return None
    table: str = apps.get_model("scheduling", "Job")._meta.db_table
    return str(schema_editor.quote_name(table))


def leave_room(apps: Any, schema_editor: Any) -> None:
    table = _job_table(apps, schema_editor)
    if table is not None:
        schema_editor.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")


def fill_pages(apps: Any, schema_editor: Any) -> None:
    table = _job_table(apps, schema_editor)
    if table is not None:
        schema_editor.execute(f"ALTER TABLE {table} RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0007_change_log"),
    ]

    operations = [
        migrations.RunPython(leave_room, fill_pages),
    ]
