"""What a new PostgreSQL connection per task cost the worker and the server (issue 25, the drain).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/hN REDIS_URL=redis://127.0.0.1:6379/N \
        python benchmarks/worker_connection_cost.py [--rounds 30]

The drain benchmark (slurm_drain.py) samples the PostgreSQL backends of its database every two
seconds, so a backend that lives through one task only (Celery's own Django fix-up: a new pool,
and so new connections, for every task) is mostly never seen, and its CPU is left out of the
"postgres" figure. Here the two ways are run side by side in one process, on a scratch database
with a cluster of 64 agent nodes and 2,000 pending jobs: the worker's two tasks (a scheduling
cycle, an executor tick) with, before each, what Celery's fix-up does in a prefork child
(close the connections and the pool: "per task"), or what console.worker_connections does
(hand the connection back to the pool, which stays open: "kept"). The CPU of every backend of the
scratch database is read from /proc/<pid>/schedstat (nanoseconds) just before the connections
are closed, and this process's own from time.process_time (the pool's threads included). Not
counted: the postmaster's fork of each backend, and a backend's exit.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.console_process import drop_postgres, fresh_postgres  # noqa: E402

NODES = 64
GPUS = 8
PENDING = 2000


def backend_cpu(admin: object, database: str, exclude: int) -> dict[int, float]:
    """CPU seconds so far of each backend of `database` (but `exclude`, the admin's own)."""
    rows = admin.execute(  # type: ignore[attr-defined]
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> %s", [database, exclude]
    ).fetchall()
    spent: dict[int, float] = {}
    for (pid,) in rows:
        try:
            spent[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError):
            continue
    return spent


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30, help="tasks per block (a cycle and a tick each)")
    parser.add_argument("--blocks", type=int, default=2, help="alternating per-task / kept blocks of each")
    args = parser.parse_args()
    server = os.environ["DATABASE_URL"]
    database = f"worker_connection_cost_{os.getpid()}"
    url = fresh_postgres(server, database)
    os.environ.update(
        {"DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "console.settings", "SCHEDULER_TRIGGER": "none",
         "LOG_LEVEL": "WARNING", "SCHEDULER_EXECUTOR": "simulated"}
    )  # fmt: skip
    try:
        return measure(args, url, database)
    finally:
        drop_postgres(url)


def measure(args: argparse.Namespace, url: str, database: str) -> int:
    import django
    import psycopg

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection, connections
    from django.db.backends.postgresql.base import DatabaseWrapper as PostgresWrapper

    call_command("migrate", verbosity=0)
    from benchmarks.slurm_drain import console_world, submit
    from quotas.models import NodeExecutor, ResourcePool
    from quotas.services import create_node
    from scheduling.tasks import executor_tick, run_scheduling_cycle

    def close_pool() -> None:
        """What Celery's fix-up does after closing the connections in a prefork child."""
        cast(PostgresWrapper, connection).close_pool()  # type: ignore[attr-defined]  # not in django-stubs

    root = get_user_model().objects.create_superuser(username="inventory", email="", password=None)
    pool = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)[0]
    for number in range(NODES):
        create_node(
            actor=root, name=f"n{number:03d}", gpus=GPUS, cpu=16, memory_gib=64, executor=NodeExecutor.AGENT, pool=pool
        )
    world = console_world(pool.name, NODES)
    submit(world, "filler", NODES, GPUS, "sleep 1000")
    run_scheduling_cycle("event")  # the fillers take every GPU: the queue below stays pending
    submit(world, "drain", PENDING, 1, "true")

    admin = psycopg.connect(url, autocommit=True)
    admin_pid = int(admin.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
    results: dict[str, list[tuple[float, float, int]]] = {"per task": [], "kept": []}
    for _block in range(args.blocks):
        for way in ("per task", "kept"):
            connections.close_all()
            close_pool()
            kept_before: dict[int, float] = {}
            seen: set[int] = set()
            for _round in range(args.rounds):
                if way == "per task":
                    # Celery's fix-up in a prefork child, at a task's start (and the last one's end).
                    connections.close_all()
                    close_pool()
                    kept_before = {}
                else:
                    connection.close_if_unusable_or_obsolete()  # back to the pool, which stays open
                began = time.process_time()
                run_scheduling_cycle("event")
                executor_tick()
                worker = time.process_time() - began
                now = backend_cpu(admin, database, admin_pid)
                seen.update(now)
                server = sum(spent - kept_before.get(pid, 0.0) for pid, spent in now.items())
                kept_before = now
                results[way].append((worker, server, len(now)))
            print(f"{way}: {len(seen)} backends over {args.rounds} rounds", flush=True)
    connections.close_all()
    close_pool()
    admin.close()
    for way, rows in results.items():
        worker = statistics.median(row[0] for row in rows) * 1000
        server = statistics.median(row[1] for row in rows) * 1000
        print(
            f"{way}: a cycle and a tick, medians over {len(rows)}: worker {worker:.2f} ms CPU, "
            f"its PostgreSQL backends {server:.2f} ms CPU"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
