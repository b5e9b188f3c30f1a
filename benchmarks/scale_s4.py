"""S4 = 10 × S3 (issue 26): the engine cycle and the full cycle on PostgreSQL at 1×, 2×, 5× and 10× S3.

Size k: 1,000·k nodes × 8 GPUs; a quota tree of 10 roots × 10 children × g leaves with
g = round(11.1·k − 1.1) (1,110 quotas at 1×, 2,210 at 2×, 5,510 at 5×, 11,110 at 10×); 5,000·k
running jobs placed first fit and 10,000·k pending jobs of 1–8 GPUs, on random leaves
(benchmarks/engine.py's `cluster`, its jobs spread over the larger tree). Targets at 10×: engine
cycle CPU median ≤ 1 s, peak memory < 1 GB, full cycle on PostgreSQL (snapshot, engine, commit) ≤ 3 s.

Every measurement runs in a process of its own under a memory cap (`prlimit --as`), so that its
peak RSS (getrusage) is its own; with --before TREE, each runs for the tree at the commit before
and for this tree, alternating, in the same run (an A/B on a shared machine):

    git worktree add /tmp/before <commit before>   # or: git archive <commit> | tar -x -C /tmp/before
    nice -n 10 .venv/bin/python benchmarks/scale_s4.py --scale 1,2,5,10 --before /tmp/before \\
        [--postgres postgres://postgres@127.0.0.1:5432/DB] [--throughput-scale 5]

Without --postgres only the engine runs (no database needed). Its CPU is given twice: with the
collector on, as before; and with it paused as `scheduling.cycle` runs the engine (the collection
of what the cycle left, right after it, counted in). --throughput-scale without --postgres: the
engine alone on an empty cluster of that size (pending jobs only), pods placed per CPU second.

With --postgres, each size is seeded once in bulk into a template database (not measured), and
each tree's cycle runs on a fresh copy of it: `scheduling.cycle.run_cycle` as the worker runs it,
its snapshot, engine and commit timed apart, and the job rows each cycle updated (of them HOT).
Each tree seeds its own template with its own code (`--before`'s as PREFIX_before_seedK): the
seed builds the tables without migrations and makes the storage settings they make itself (the
job table's fillfactor), so how the rows lie on their pages is part of what is compared.
--throughput-scale adds the first cycle on an empty cluster of that size (pending jobs only): the
pods placed per second, the figure kube-scheduler (~680 pods/s at 5,000 nodes) and YuniKorn
(~410 at 4,000) publish.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import itertools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
ENGINE_TARGET_S = 1.0
MEMORY_TARGET_MB = 1024.0
CYCLE_TARGET_S = 3.0


def leaves_per_child(scale: int) -> int:
    return round(11.1 * scale - 1.1)


def scaled_cluster(scale: int, *, running: bool = True) -> Any:
    """S3 × scale (see the module's docstring), built with the measured tree's engine types."""
    from benchmarks.engine import cluster, quota_tree

    snapshot = cluster(5000 * scale if running else 0, 10_000 * scale, 1000 * scale)
    quotas = quota_tree(10, 10, leaves_per_child(scale), 8000 * scale)
    leaves = [quota.name for quota in quotas if quota.name.count(".") == 2]
    rng = random.Random(26)
    jobs = tuple(replace(job, quota=rng.choice(leaves)) for job in snapshot.jobs)
    return replace(snapshot, quotas=quotas, jobs=jobs)


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_engine(scale: int, reps: int, traced: bool) -> dict[str, Any]:
    from scheduling.engine import schedule

    snapshot = scaled_cluster(scale)
    snapshot_rss = max_rss_mb()
    result = schedule(snapshot)  # warm
    cpu, wall, paused = [], [], []
    for _ in range(reps):
        gc.collect()
        started, cpu_started = time.perf_counter(), time.process_time()
        schedule(snapshot)
        cpu.append(time.process_time() - cpu_started)
        wall.append(time.perf_counter() - started)
    for _ in range(reps):
        # As the worker runs it: scheduling.cycle pauses the collector for the engine and the
        # commit (scheduling/gc_pauses.py); what the cycle left is collected when it runs again,
        # here at once and counted in (a young-generation pass).
        gc.collect()
        cpu_started = time.process_time()
        gc.disable()
        try:
            schedule(snapshot)
        finally:
            gc.enable()
        gc.collect(0)
        paused.append(time.process_time() - cpu_started)
    out: dict[str, Any] = {
        "nodes": len(snapshot.nodes),
        "quotas": len(snapshot.quotas),
        "jobs": len(snapshot.jobs),
        "decisions": len(result.decisions),
        "admitted": sum(1 for decision in result.decisions if type(decision).__name__ == "Admit"),
        "cpu": cpu,
        "wall": wall,
        "paused": paused,
        "snapshot_rss_mb": snapshot_rss,
        "peak_rss_mb": max_rss_mb(),
    }
    if traced:
        del result
        gc.collect()
        tracemalloc.start()
        schedule(snapshot)
        out["cycle_traced_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        # The work done, apart from the machine: Python function calls in one cycle. CPU time per
        # call rises with the size (the working set outgrows the caches); the count does not.
        import cProfile
        import pstats

        with cProfile.Profile() as profile:
            schedule(snapshot)
        out["calls"] = getattr(pstats.Stats(profile), "total_calls")  # noqa: B009 (not in the stubs)
    return out


def child_throughput(scale: int, reps: int) -> dict[str, Any]:
    """The engine's first cycle on an empty cluster of the size: every pending job it places."""
    from scheduling.engine import schedule

    snapshot = scaled_cluster(scale, running=False)
    result = schedule(snapshot)  # warm
    cpu = []
    for _ in range(reps):
        gc.collect()
        cpu_started = time.process_time()
        schedule(snapshot)
        cpu.append(time.process_time() - cpu_started)
    admitted = sum(1 for decision in result.decisions if type(decision).__name__ == "Admit")
    return {"admitted": admitted, "cpu": statistics.median(cpu), "jobs": len(snapshot.jobs)}


def _django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()


def _use_database(url: str, name: str) -> None:
    """The default connection, pointed at database `name` on the server of `url`."""
    from django.db import DEFAULT_DB_ALIAS, connections
    from django.db.utils import ConnectionHandler

    from benchmarks.runtime_support import _url_settings

    settings_dict = ConnectionHandler().configure_settings({DEFAULT_DB_ALIAS: _url_settings(url)})[DEFAULT_DB_ALIAS]
    settings_dict["NAME"] = name
    connections.settings[DEFAULT_DB_ALIAS] = settings_dict
    connections[DEFAULT_DB_ALIAS] = connections.create_connection(DEFAULT_DB_ALIAS)


def child_seed(url: str, scale: int, template: str, running: bool) -> dict[str, Any]:
    """Writes the size into database `template`, created anew: set-up, not measured."""
    _django(url)
    import psycopg
    from django.apps import apps
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import override_settings

    from benchmarks.runtime_support import write_snapshot
    from scheduling.cycle import ensure_fence

    started = time.perf_counter()
    with psycopg.connect(dbname="postgres", autocommit=True, **_admin_plain(url)) as server:
        exists = server.execute("SELECT 1 FROM pg_database WHERE datname = %s", [template]).fetchone()
        if exists and os.environ.get("SCALE_S4_KEEP_SEED"):  # while profiling: the same seed again
            return {"seconds": 0.0, "jobs": 0}
        server.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
        server.execute(f'CREATE DATABASE "{template}"')
    _use_database(url, template)
    with override_settings(MIGRATION_MODULES={app.label: None for app in apps.get_app_configs()}):
        call_command("migrate", run_syncdb=True, verbosity=0, interactive=False)
    # The tables are built without the migrations (faster): the storage setting they make is made
    # here, before the rows go in, so that the bulk insert leaves each page the room it leaves.
    room = importlib.import_module("scheduling.migrations.0008_job_fillfactor")
    with connection.schema_editor() as editor:
        room.leave_room(apps, editor)
    ensure_fence()
    write_snapshot(scaled_cluster(scale, running=running))
    connection.close()
    return {"seconds": time.perf_counter() - started}


def child_cycle(url: str, template: str, run_db: str) -> dict[str, Any]:
    """One cycle through run_cycle on a fresh copy of `template`, its parts timed apart."""
    _django(url)
    import psycopg
    from django.db import connection
    from django.test.utils import CaptureQueriesContext, override_settings

    from scheduling import cycle, engine
    from scheduling.commit import _Commit

    admin = _admin_plain(url)
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as server:
        server.execute(f'DROP DATABASE IF EXISTS "{run_db}" WITH (FORCE)')
        server.execute(f'CREATE DATABASE "{run_db}" TEMPLATE "{template}"')
    _use_database(url, run_db)
    parts: dict[str, list[float]] = {}
    read: list[int] = []  # job rows each cycle's snapshot read in full (a running worker's: those that moved)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = Path(f"/proc/{cursor.fetchone()[0]}/stat")

    def server_cpu() -> float:
        """CPU seconds of this connection's PostgreSQL backend (same machine): utime + stime."""
        fields = backend.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def job_table() -> dict[str, int]:
        """Job rows updated so far on this database (of them HOT: on their own page, no index
        entry), and the table's pages. This connection's counts are flushed to the statistics first."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT n_tup_upd, n_tup_hot_upd, pg_relation_size(relid) / 8192 FROM pg_stat_user_tables "
                "WHERE relname = 'scheduling_job'"
            )
            updated, hot, pages = cursor.fetchone()
        return {"updated": updated, "hot": hot, "pages": pages}

    tables = [job_table()]

    def timed(name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started, cpu_started, server_started = time.perf_counter(), time.process_time(), server_cpu()
            try:
                answer = function(*args, **kwargs)
                if name == "snapshot":
                    read.append(getattr(answer[1], "jobs_read", len(answer[1].jobs)))
                return answer
            finally:
                parts[name] = [
                    time.perf_counter() - started,
                    time.process_time() - cpu_started,
                    server_cpu() - server_started,
                ]

        return wrapper

    # Wrapped, not replaced: the cycle runs its own code, each part timed on the way through.
    setattr(cycle, "build_snapshot", timed("snapshot", getattr(cycle, "build_snapshot")))  # noqa: B009, B010
    setattr(engine, "schedule", timed("engine", engine.schedule))  # noqa: B010
    setattr(_Commit, "apply", timed("commit", _Commit.apply))  # noqa: B010
    try:
        with override_settings(SCHEDULER_TRIGGER="none", SCHEDULER_PUBLISH_EVENTS=False, SCHEDULER_LOCK="postgres"):
            with CaptureQueriesContext(connection) as queries:
                cpu_started = time.process_time()
                if os.environ.get("SCALE_S4_PROFILE"):  # a cProfile of the cycle, to find where its time goes
                    import cProfile

                    with cProfile.Profile() as profile:
                        outcome = cycle.run_cycle(trigger="benchmark")
                    profile.dump_stats(os.environ["SCALE_S4_PROFILE"])
                else:
                    outcome = cycle.run_cycle(trigger="benchmark")
                cpu = time.process_time() - cpu_started
            first_parts = dict(parts)
            tables.append(job_table())
            steady_outcome = cycle.run_cycle(trigger="benchmark")  # the next cycle: little left to decide
            next_parts = dict(parts)
            tables.append(job_table())
            later_outcome = cycle.run_cycle(trigger="benchmark")  # the one after: the first cycle's reasons settled
            tables.append(job_table())
    finally:
        connection.close()
        with psycopg.connect(dbname="postgres", autocommit=True, **admin) as server:
            server.execute(f'DROP DATABASE IF EXISTS "{run_db}" WITH (FORCE)')
    return {
        "duration_s": outcome.duration_ms / 1000,
        "committed": outcome.committed,
        "admitted": outcome.admitted,
        "evicted": outcome.evicted,
        "pending": outcome.pending,
        "queries": len(queries),
        "cpu_with_executor_s": cpu,
        "parts": first_parts,
        "steady": {"duration_s": steady_outcome.duration_ms / 1000, "parts": next_parts},
        "later": {"duration_s": later_outcome.duration_ms / 1000, "parts": parts},
        "jobs_read": read,
        "job_updates": [
            {"updated": after["updated"] - before["updated"], "hot": after["hot"] - before["hot"]}
            for before, after in itertools.pairwise(tables)
        ],
        "job_pages": [table["pages"] for table in tables],
        "peak_rss_mb": max_rss_mb(),
    }


def run_child(tree: Path, cap: int, *args: str) -> dict[str, Any]:
    command = ["prlimit", f"--as={cap}", sys.executable, str(Path(__file__).resolve()), "--tree", str(tree), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def engine_rows(
    trees: dict[str, Path], scales: list[int], reps: int, cap: int, *, rounds: int, traced_before: bool
) -> dict[tuple[str, int], Any]:
    rows: dict[tuple[str, int], Any] = {}
    for scale in scales:
        for round_number in range(rounds):  # A B, then B A: neither tree always runs first
            order = list(trees) if round_number % 2 == 0 else list(reversed(trees))
            for label in order:
                got = run_child(trees[label], cap, "--child", "engine", "--scale", str(scale), "--reps", str(reps))
                if round_number == 0:
                    # The allocations and calls of one cycle: of this tree only when the machine is
                    # short of time (`--traced-before` adds the tree before).
                    if label != "before" or traced_before:
                        got_traced = run_child(trees[label], cap, "--child", "traced", "--scale", str(scale))
                        got["cycle_traced_mb"] = got_traced["cycle_traced_mb"]
                        got["calls"] = got_traced["calls"]
                    rows[(label, scale)] = got
                else:
                    kept = rows[(label, scale)]
                    kept["cpu"] += got["cpu"]
                    kept["wall"] += got["wall"]
                    kept["paused"] = kept.get("paused", []) + got.get("paused", [])
                    kept["peak_rss_mb"] = max(kept["peak_rss_mb"], got["peak_rss_mb"])
                print(f"  engine {label} {scale}x round {round_number + 1}: {got['cpu']}", file=sys.stderr)
    return rows


def cycle_rows(
    trees: dict[str, Path], scales: list[int], url: str, cap: int, *, prefix: str
) -> dict[tuple[str, int], Any]:
    rows: dict[tuple[str, int], Any] = {}
    for scale in scales:
        # Each tree seeds its own template with its own code: how the tables are stored (the job
        # table's fillfactor, for one) is part of what is compared.
        templates = {label: _template(prefix, label, scale) for label in trees}
        for label, tree in trees.items():
            command = ["--child", "seed", "--scale", str(scale), "--url", url, "--template", templates[label]]
            seeded = run_child(tree, cap, *command)
            print(f"  seeded {label} {scale}x in {seeded['seconds']:.0f} s", file=sys.stderr)
        for label, tree in trees.items():
            got = run_child(
                tree, cap, "--child", "cycle", "--url", url, "--template", templates[label], "--run-db", f"{prefix}_run"
            )
            rows[(label, scale)] = got
            print(f"  cycle {label} {scale}x: {got['duration_s']:.2f} s {got['parts']}", file=sys.stderr)
        if not os.environ.get("SCALE_S4_KEEP_SEED"):
            for template in templates.values():
                _drop(url, template)
    return rows


def _template(prefix: str, label: str, scale: int) -> str:
    """The seeded database of a size: this tree's as `--seed-only` names it, the tree before's apart."""
    return f"{prefix}_before_seed{scale}" if label == "before" else f"{prefix}_seed{scale}"


def _drop(url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(dbname="postgres", autocommit=True, **_admin_plain(url)) as server:
        server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin_plain(url: str) -> dict[str, Any]:
    from urllib.parse import urlparse

    parsed = urlparse(url)
    return {
        "host": parsed.hostname or "127.0.0.1",
        "port": parsed.port or 5432,
        "user": parsed.username or "postgres",
        "password": parsed.password,
    }


def _ratio(value: float, target: float) -> str:
    return f"{value:.2f} ({value / target:.2f})"


def report(
    engine: dict[tuple[str, int], Any], cycles: dict[tuple[str, int], Any], trees: list[str], scales: list[int]
) -> None:
    """Markdown tables: the engine per size and tree, then the full cycle on PostgreSQL."""
    if engine:
        print(
            "\n| size | tree | nodes / quotas / jobs | engine CPU median, s (÷ 1 s) | collector paused, s (÷ 1 s) | "
            "per 1× of size, s | Python calls per cycle, M (per 1×) | peak RSS, MB (÷ 1 GB) | "
            "a cycle's allocations, MB | decisions |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
    for scale in scales:
        for label in trees:
            row = engine.get((label, scale))
            if row is None:
                continue
            cpu = statistics.median(row["cpu"])
            paused = _ratio(statistics.median(row["paused"]), ENGINE_TARGET_S) if row.get("paused") else "—"
            calls = row.get("calls", 0) / 1e6
            print(
                f"| {scale}× | {label} | {row['nodes']:,} / {row['quotas']:,} / {row['jobs']:,} "
                f"| {_ratio(cpu, ENGINE_TARGET_S)} | {paused} | {cpu / scale:.3f} | {calls:.2f} ({calls / scale:.2f}) "
                f"| {row['peak_rss_mb']:.0f} ({row['peak_rss_mb'] / MEMORY_TARGET_MB:.2f}) "
                f"| {row.get('cycle_traced_mb', 0):.0f} | {row['decisions']} ({row['admitted']} admitted) |"
            )
    if cycles:
        print(
            "\n| size | tree | cycle | snapshot + engine + commit, wall s (÷ 3 s) | CPU of this process, s: "
            "snapshot + engine + commit | CPU of PostgreSQL, s | queries (first cycle, with executor) "
            "| job rows the snapshot read | job rows updated (HOT) | job table pages after | peak RSS, MB |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
    for scale in scales:
        for label in trees:
            full = cycles.get((label, scale))
            if full is None:
                continue
            later = (("third", full["later"]),) if "later" in full else ()
            for number, (name, part) in enumerate((("first", full), ("next", full["steady"]), *later)):
                parts = part["parts"]
                process = [parts[step][1] for step in ("snapshot", "engine", "commit")]
                server = [parts[step][2] for step in ("snapshot", "engine", "commit")]
                print(
                    f"| {scale}× | {label} | {name} | {_ratio(part['duration_s'], CYCLE_TARGET_S)} "
                    f"| {sum(process):.2f} = {' + '.join(f'{value:.2f}' for value in process)} "
                    f"| {sum(server):.2f} | {full['queries'] if name == 'first' else '—'} "
                    f"| {full['jobs_read'][number] if 'jobs_read' in full else '—'} "
                    f"| {_updates(full, number)} "
                    f"| {full['job_pages'][number + 1] if 'job_pages' in full else '—'} "
                    f"| {full['peak_rss_mb']:.0f} |"
                )
    if cycles:
        print(
            "\nfirst: the first cycle of a fresh process on the seeded database (every pending job's reason "
            "written); next: the cycle after it, in the same process (engine jobs reused, as a worker runs); "
            "third: the one after that (the first cycle's reasons settled)."
        )


def _updates(full: dict[str, Any], number: int) -> str:
    """Job rows a cycle updated, and of them HOT (a tree before these figures were kept: —)."""
    if "job_updates" not in full:
        return "—"
    counts = full["job_updates"][number]
    return f"{counts['updated']:,} ({counts['hot']:,})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="1,2,5,10")
    parser.add_argument("--reps", type=int, default=3, help="timed cycles per process (two processes per tree)")
    parser.add_argument("--before", type=Path, help="a tree at the commit before, measured beside this one")
    parser.add_argument("--postgres", default="", help="server URL; its database part is not used")
    parser.add_argument("--db-prefix", default="h8_s4")
    parser.add_argument("--throughput-scale", type=int, default=0)
    parser.add_argument("--memory-cap", type=int, default=3_000_000_000, help="bytes of address space per process")
    parser.add_argument("--skip-engine", action="store_true")
    parser.add_argument("--rounds", type=int, default=2, help="processes per tree and size, alternating the order")
    parser.add_argument("--traced-before", action="store_true", help="allocations and calls of the tree before too")
    parser.add_argument("--save", type=Path, help="write the raw figures here as JSON")
    parser.add_argument("--seed-only", action="store_true", help="write the template databases and stop")
    parser.add_argument("--tree", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--template", help=argparse.SUPPRESS)
    parser.add_argument("--run-db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, str(args.tree))
        os.chdir(args.tree)
        scale = int(args.scale) if "," not in args.scale else 0
        if args.child == "engine":
            out = child_engine(scale, args.reps, traced=False)
        elif args.child == "throughput":
            out = child_throughput(scale, args.reps)
        elif args.child == "traced":
            out = child_engine(scale, 0, traced=True)
        elif args.child in ("seed", "seed-empty"):
            out = child_seed(args.url, scale, args.template, running=args.child == "seed")
        else:
            out = child_cycle(args.url, args.template, args.run_db)
        print(json.dumps(out))
        return
    scales = [int(part) for part in args.scale.split(",")]
    if args.seed_only:  # kept for later runs with SCALE_S4_KEEP_SEED=1 (set-up takes minutes at 10×)
        for scale in scales:
            for child, template in (
                ("seed", f"{args.db_prefix}_seed{scale}"),
                ("seed-empty", f"{args.db_prefix}_empty{scale}"),
            ):
                if child == "seed-empty" and scale != args.throughput_scale:
                    continue
                command = ["--child", child, "--scale", str(scale), "--url", args.postgres, "--template", template]
                print(child, scale, run_child(HERE, args.memory_cap, *command), file=sys.stderr)
        return
    trees = {"before": args.before.resolve(), "after": HERE} if args.before else {"this": HERE}
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"Python {sys.version.split()[0]}; load average {load} at the start", file=sys.stderr)
    engine = (
        {}
        if args.skip_engine
        else engine_rows(
            trees, scales, args.reps, args.memory_cap, rounds=args.rounds, traced_before=args.traced_before
        )
    )
    cycles = {}
    if args.postgres:
        cycles = cycle_rows(trees, scales, args.postgres, args.memory_cap, prefix=args.db_prefix)
    if args.save:  # the raw figures, for the record
        rows = {"engine": engine, "cycles": cycles}
        flat = {part: {f"{label} {scale}": row for (label, scale), row in got.items()} for part, got in rows.items()}
        args.save.write_text(json.dumps(flat, indent=1))
    report(engine, cycles, list(trees), scales)
    if args.postgres and args.throughput_scale:
        throughput(trees, args.throughput_scale, args.postgres, args.memory_cap, args.db_prefix)
    elif args.throughput_scale:
        scale = args.throughput_scale
        print(f"\nEmpty cluster of {1000 * scale:,} nodes, {10_000 * scale:,} pending jobs: the engine's first cycle")
        for label, tree in trees.items():
            command = ["--child", "throughput", "--scale", str(scale), "--reps", str(args.reps)]
            got = run_child(tree, args.memory_cap, *command)
            print(
                f"- {label}: {got['admitted']:,} placed in {got['cpu']:.2f} s CPU (median), "
                f"{got['admitted'] / got['cpu']:,.0f} pods per CPU second of the engine"
            )
    print(f"\nload average {Path('/proc/loadavg').read_text().split()[0]} at the end")


def throughput(trees: dict[str, Path], scale: int, url: str, cap: int, prefix: str) -> None:
    here = next(iter(reversed(trees.values())))
    template = f"{prefix}_empty{scale}"
    run_child(here, cap, "--child", "seed-empty", "--scale", str(scale), "--url", url, "--template", template)
    print(f"\nEmpty cluster of {1000 * scale:,} nodes, {10_000 * scale:,} pending jobs: its first cycle")
    for label, tree in trees.items():
        command = ["--child", "cycle", "--url", url, "--template", template, "--run-db", f"{prefix}_run"]
        got = run_child(tree, cap, *command)
        parts = got["parts"]
        steps = ("snapshot", "engine", "commit")
        cpu = sum(parts[step][1] + parts[step][2] for step in steps)  # this process and PostgreSQL
        placed = got["admitted"]
        print(
            f"- {label}: {placed:,} placed; wall {got['duration_s']:.2f} s ({placed / got['duration_s']:,.0f} pods/s); "
            f"CPU {cpu:.2f} s, this process and PostgreSQL ({placed / cpu:,.0f} pods per CPU second); "
            f"engine alone {parts['engine'][1]:.2f} s CPU ({placed / parts['engine'][1]:,.0f} pods/s)"
        )
    _drop(url, template)


if __name__ == "__main__":
    main()
