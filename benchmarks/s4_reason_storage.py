"""Where the S4 first cycle's pending reasons could live (issue 26): a prototype in raw SQL.

The first cycle of a fresh worker on the S4 template writes a pending reason (code, a sentence,
the queue position) into each of its ~100,000 pending jobs: an UPDATE of the wide job table with
its nine indexes (scheduling.bulk.update_as_read), most of PostgreSQL's CPU of that cycle. This
script measures that write against other ways to store the same reasons, before any of them is
built, on fresh copies of a template seeded by `scale_s4.py --seed-only`:

1. The reasons themselves are those of one real cycle (`scheduling.cycle.run_cycle` on a copy of
   the template, as the worker runs it), read back from the job table: their real codes, their
   real sentences (jobs of one quota with the same shape share one) and positions.
2. Each variant then writes them on a fresh copy of the template ("first": no job has a reason
   yet), then writes them again with the position of 13 rows in 14 moved by one ("next": about
   the share of reasons a running worker's next cycle rewrites at S4).

Per write: CPU of this process (building the parameters, sending them, reading what comes back),
CPU of the PostgreSQL backend (/proc/PID/stat, same machine), wall. Every write is guarded as the
commit guards it: only jobs still pending at the revision (and, on the job table, the row
version) the snapshot read.

    SCALE_S4_KEEP_SEED=1 nice -n 5 prlimit --as=4000000000 .venv/bin/python benchmarks/scale_s4.py \\
        --seed-only --scale 10 --postgres postgres://postgres@127.0.0.1:5432/h3 --db-prefix h3_s4
    nice -n 5 prlimit --as=4000000000 .venv/bin/python benchmarks/s4_reason_storage.py \\
        --postgres postgres://postgres@127.0.0.1:5432/h3 --template h3_s4_seed10 [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HZ = os.sysconf("SC_CLK_TCK")
# (id, revision, row version, code, message, position): one pending job's reason as the commit has it.
Reason = tuple[int, int, str, str, str, int | None]

_NARROW = (
    "CREATE TABLE reason_narrow (job_id bigint PRIMARY KEY{fk}, revision integer NOT NULL, "
    "code varchar(50) NOT NULL, message text NOT NULL, position integer NULL)"
)
_GUARDED = (
    "INSERT INTO reason_narrow AS o (job_id, revision, code, message, position) "
    "SELECT v.id, v.rev, v.code, v.message, v.pos FROM {source} "
    "JOIN scheduling_job j ON j.id = v.id AND j.state = 'pending' AND j.revision = v.rev"
)
# The job's own position column, as it was when this was measured: migration 0011 dropped it (the
# position lives with the reason in its own table), so the job-table variants add it back on their
# copy (catalog only: no row is rewritten, every row reads NULL as before).
_JOB_POSITION = "ALTER TABLE scheduling_job ADD COLUMN IF NOT EXISTS position integer NULL"
_MERGE = (
    f"{_GUARDED} ON CONFLICT (job_id) DO UPDATE SET revision = excluded.revision, code = excluded.code, "
    "message = excluded.message, position = excluded.position RETURNING o.job_id"
)


def _admin(url: str) -> dict[str, Any]:
    info = psycopg.conninfo.conninfo_to_dict(url)
    return {key: info[key] for key in ("host", "port", "user", "password") if info.get(key)}


def _copy_of(url: str, template: str, name: str) -> psycopg.Connection[Any]:
    with psycopg.connect(dbname="postgres", autocommit=True, **_admin(url)) as server:
        server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        server.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return psycopg.connect(dbname=name, **_admin(url))


def _drop(url: str, name: str) -> None:
    with psycopg.connect(dbname="postgres", autocommit=True, **_admin(url)) as server:
        server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _backend_cpu(connection: psycopg.Connection[Any]) -> float:
    fields = Path(f"/proc/{connection.info.backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / HZ


def real_reasons(url: str, template: str, scratch: str) -> list[tuple[int, str, str, int | None]]:
    """The pending reasons one real cycle writes on a copy of the template (run in a child
    process: Django set up on that copy), as (job id, code, message, position)."""
    _copy_of(url, template, scratch).close()
    code = (
        "import sys; sys.path.insert(0, '.'); from benchmarks import scale_s4 as s; "
        f"s._django({url!r}); s._use_database({url!r}, {scratch!r}); "
        "from scheduling import cycle; print(cycle.run_cycle(trigger='benchmark').pending)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent)
    with psycopg.connect(dbname=scratch, **_admin(url)) as connection:
        rows = connection.execute(  # since the reasons' table: read from there, not the job's columns
            "SELECT job_id, code, message, position FROM scheduling_pendingreason WHERE code <> '' ORDER BY job_id"
        ).fetchall()
    _drop(url, scratch)
    return rows


def _as_seen(connection: psycopg.Connection[Any], reasons: Sequence[tuple[int, str, str, int | None]]) -> list[Reason]:
    """Each reason with its job's revision and row version as a snapshot of this copy reads them."""
    seen = {
        pk: (revision, version)
        for pk, revision, version in connection.execute(
            "SELECT id, revision, xmin::text || ctid::text FROM scheduling_job WHERE state = 'pending'"
        )
    }
    return [(pk, *seen[pk], code, message, position) for pk, code, message, position in reasons if pk in seen]


def _job_table(connection: psycopg.Connection[Any], rows: Sequence[Reason]) -> int:
    """Today's write: scheduling.bulk.update_as_read's statement."""
    keys = ("seen_id", "seen_revision", "seen_version", "reason_code", "reason_message", "position")
    document = json.dumps([dict(zip(keys, row, strict=True)) for row in rows])
    cursor = connection.execute(
        "UPDATE scheduling_job AS j SET reason_code = v.reason_code, reason_message = v.reason_message, "
        "position = v.position FROM json_to_recordset(%s::json) AS v(seen_id bigint, seen_revision integer, "
        "seen_version text, reason_code varchar(50), reason_message text, position integer) "
        "WHERE j.id = v.seen_id AND j.state = 'pending' AND j.revision = v.seen_revision "
        "AND j.xmin::text || j.ctid::text = v.seen_version RETURNING j.id, j.xmin::text || j.ctid::text",
        [document],
    )
    return len(cursor.fetchall())


def _short(rows: Sequence[Reason]) -> list[Reason]:
    """Code and position only: the bytes a reason adds to the job row when its sentence is kept
    elsewhere (rendered on read, or one row per distinct sentence)."""
    return [(pk, revision, version, code, "", position) for pk, revision, version, code, _m, position in rows]


def _unnest(connection: psycopg.Connection[Any], rows: Sequence[Reason]) -> int:
    columns = [list(column) for column in zip(*[(r[0], r[1], r[3], r[4], r[5]) for r in rows], strict=True)]
    source = "unnest(%s::bigint[], %s::int[], %s::text[], %s::text[], %s::int[]) AS v(id, rev, code, message, pos)"
    return len(connection.execute(_MERGE.format(source=source), columns).fetchall())


def _copy(connection: psycopg.Connection[Any], rows: Sequence[Reason]) -> int:
    connection.execute(
        "CREATE TEMP TABLE reason_in (id bigint, rev int, code text, message text, pos int) ON COMMIT DROP"
    )
    with connection.cursor().copy("COPY reason_in (id, rev, code, message, pos) FROM STDIN") as copy:
        for pk, revision, _version, code, message, position in rows:
            copy.write_row((pk, revision, code, message, position))
    return len(connection.execute(_MERGE.format(source="reason_in AS v")).fetchall())


def _copy_plain_if_empty(connection: psycopg.Connection[Any], rows: Sequence[Reason]) -> int:
    """As scheduling.pending_reasons writes since: into an empty table a plain insert (no
    speculative per-row conflict check), else the merge."""
    if connection.execute("SELECT EXISTS (SELECT 1 FROM reason_narrow)").fetchone() != (False,):
        return _copy(connection, rows)
    connection.execute(
        "CREATE TEMP TABLE reason_in (id bigint, rev int, code text, message text, pos int) ON COMMIT DROP"
    )
    with connection.cursor().copy("COPY reason_in (id, rev, code, message, pos) FROM STDIN") as copy:
        for pk, revision, _version, code, message, position in rows:
            copy.write_row((pk, revision, code, message, position))
    plain = _GUARDED.format(source="reason_in AS v") + " RETURNING o.job_id"
    return len(connection.execute(plain).fetchall())


# name: (table to create first, or None; the write)
VARIANTS: dict[str, tuple[str | None, Callable[[psycopg.Connection[Any], Sequence[Reason]], int]]] = {
    "job table (today): UPDATE … FROM json_to_recordset": (_JOB_POSITION, _job_table),
    "job table, code + position only (sentence kept elsewhere)": (_JOB_POSITION, lambda c, r: _job_table(c, _short(r))),
    "narrow table with FK: INSERT … FROM unnest … ON CONFLICT": (
        _NARROW.format(fk=" REFERENCES scheduling_job (id) DEFERRABLE INITIALLY DEFERRED"),
        _unnest,
    ),
    "narrow table with FK: COPY to a temp table, then merge": (
        _NARROW.format(fk=" REFERENCES scheduling_job (id) DEFERRABLE INITIALLY DEFERRED"),
        _copy,
    ),
    "narrow table, no FK: COPY, then merge": (_NARROW.format(fk=""), _copy),
    "narrow table, no FK: COPY, then a plain insert into the empty table (else merge)": (
        _NARROW.format(fk=""),
        _copy_plain_if_empty,
    ),
    "narrow table, no FK, code + position only: COPY, then merge": (
        _NARROW.format(fk=""),
        lambda c, r: _copy(c, _short(r)),
    ),
}


Write = Callable[[psycopg.Connection[Any], Sequence[Reason]], int]


def _timed(connection: psycopg.Connection[Any], write: Write, reasons: Sequence[Reason]) -> dict[str, float]:
    backend, here, wall = _backend_cpu(connection), time.process_time(), time.perf_counter()
    rows = write(connection, reasons)
    connection.commit()
    server = _backend_cpu(connection) - backend
    client = time.process_time() - here
    return {
        "rows": rows,
        "client": client,
        "server": server,
        "sum": client + server,
        "wall": time.perf_counter() - wall,
    }


def measure(
    url: str, template: str, reasons: list[tuple[int, str, str, int | None]], name: str, only: str = ""
) -> list[dict[str, Any]]:
    out = []
    for label, (table, write) in VARIANTS.items():
        if only and only not in label:
            continue
        connection = _copy_of(url, template, name)
        try:
            if table:
                connection.execute(table)
                connection.commit()
            first_rows = _as_seen(connection, reasons)
            first = _timed(connection, write, first_rows)
            moved = [
                (pk, code, message, None if p is None else p + 1)
                for k, (pk, code, message, p) in enumerate(reasons)
                if k % 14
            ]
            next_rows = _as_seen(connection, moved)
            later = _timed(connection, write, next_rows)
            sizes = connection.execute(
                "SELECT pg_relation_size('scheduling_job') / 8192, "
                "coalesce(pg_relation_size(to_regclass('reason_narrow')) / 8192, 0)"
            ).fetchone()
            pages = (int(sizes[0]), int(sizes[1])) if sizes else (0, 0)
        finally:
            connection.close()
        out.append({"variant": label, "first": first, "next": later, "job_pages": pages[0], "reason_pages": pages[1]})
        print(
            f"| {label} | {first['rows']:,} | {first['client']:.2f} + {first['server']:.2f} = **{first['sum']:.2f}** "
            f"| {later['rows']:,} | {later['client']:.2f} + {later['server']:.2f} = **{later['sum']:.2f}** "
            f"| {pages[0]:,} / {pages[1]:,} |",
            flush=True,
        )
    _drop(url, name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--postgres", required=True, help="postgres://… of a database on this server")
    parser.add_argument("--template", required=True, help="a template seeded by scale_s4.py --seed-only")
    parser.add_argument("--scratch", default=None, help="name of the copies (default: TEMPLATE_reasons)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--only", default="", help="the variants whose name contains this")
    args = parser.parse_args()
    scratch = args.scratch or f"{args.template}_reasons"
    print(f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    reasons = real_reasons(args.postgres, args.template, scratch)
    distinct = len({message for _pk, _code, message, _p in reasons})
    size = sum(len(message) for _pk, _code, message, _p in reasons)
    print(f"{len(reasons):,} reasons from one real cycle; {distinct:,} distinct sentences, {size / 1e6:.1f} MB of them")
    print("\n| variant | first: rows | client + PostgreSQL CPU, s | next: rows | client + PostgreSQL CPU, s ", end="")
    print("| pages: job / reason table |")
    print("|---|---|---|---|---|---|")
    results = [measure(args.postgres, args.template, reasons, scratch, args.only) for _ in range(args.rounds)]
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    if args.save:
        args.save.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
