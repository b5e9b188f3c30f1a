"""One scheduling cycle of S3 through the full path on PostgreSQL (target: 1 s).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test python benchmarks/runtime_cycle_s3.py

The scratch database is `bench_runtime_cycle`, or BENCH_SCRATCH_DATABASE when set (two sessions
on one server each name their own, or one drops the other's mid-run).

S3 (benchmarks/engine.py): 1,000 nodes x 8 GPUs, 1,110 quotas, 10,000 pending jobs; measured
twice: on an empty cluster (the first cycle admits thousands of jobs: the heaviest commit), and
as the engine benchmark has it, with 5,000 jobs already running. The rows are written in bulk
into a scratch database (not measured); then `scheduling.cycle.run_cycle` runs as the worker
runs it: the advisory lock, the snapshot (selectors.build_snapshot), the engine, the one
committed transaction of conditional updates, the executor. A second cycle shows the steady
state (nothing left to decide).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext, override_settings  # noqa: E402

from benchmarks.engine import cluster  # noqa: E402
from benchmarks.runtime_support import scratch_postgres, write_snapshot  # noqa: E402
from scheduling import engine  # noqa: E402
from scheduling.clock import get_clock  # noqa: E402
from scheduling.cycle import run_cycle  # noqa: E402
from scheduling.models import Job, JobState  # noqa: E402
from scheduling.selectors import build_snapshot  # noqa: E402

TARGET_MS = 1000.0
SCRATCH_DATABASE = os.environ.get("BENCH_SCRATCH_DATABASE", "bench_runtime_cycle")


def measure(label: str, running: int, pending: int) -> None:
    snapshot = cluster(running, pending, 1000)
    write_snapshot(snapshot)
    now = get_clock().now()
    started = time.perf_counter()
    with CaptureQueriesContext(connection) as queries:
        built, _ = build_snapshot(now)
    snapshot_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    result = engine.schedule(built)
    engine_ms = (time.perf_counter() - started) * 1000

    started, cpu_started = time.perf_counter(), time.process_time()
    first = run_cycle(trigger="benchmark")
    first_ms = (time.perf_counter() - started) * 1000
    first_cpu_ms = (time.process_time() - cpu_started) * 1000
    started, cpu_started = time.perf_counter(), time.process_time()
    second = run_cycle(trigger="benchmark")
    second_ms = (time.perf_counter() - started) * 1000
    second_cpu_ms = (time.process_time() - cpu_started) * 1000
    running_now = Job.objects.filter(state=JobState.RUNNING).count()
    print(
        f"\n{label}: {len(built.nodes)} nodes, {len(built.quotas)} quotas, {len(built.jobs)} jobs "
        f"({running} running, {pending} pending)"
    )
    print(
        f"  snapshot alone: {snapshot_ms:.0f} ms in {len(queries)} queries; engine alone: {engine_ms:.0f} ms "
        f"({len(result.decisions)} decisions)"
    )
    print(
        f"  first cycle: {first.duration_ms:.0f} ms snapshot+engine+commit, {first_ms:.0f} ms with lock and "
        f"executor; admitted {first.admitted}, evicted {first.evicted}, pending {first.pending}, "
        f"committed={first.committed} (target {TARGET_MS:.0f} ms, ratio {first.duration_ms / TARGET_MS:.2f})"
    )
    print(
        f"  second cycle (steady): {second.duration_ms:.0f} ms snapshot+engine+commit, {second_ms:.0f} ms in all; "
        f"{len(second.decisions)} decisions (ratio {second.duration_ms / TARGET_MS:.2f})"
    )
    # The CPU time of this process alone (not PostgreSQL's): steadier than wall time on a loaded machine.
    print(f"  CPU of this process, with lock and executor: first {first_cpu_ms:.0f} ms, second {second_cpu_ms:.0f} ms")
    print(f"  jobs running after: {running_now}")


def main() -> None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("Set DATABASE_URL to a PostgreSQL server (a scratch database is created next to it).")
    with override_settings(SCHEDULER_TRIGGER="none", SCHEDULER_PUBLISH_EVENTS=False, SCHEDULER_LOCK="postgres"):
        for label, running, pending in (("S3, empty cluster", 0, 10_000), ("S3 as the engine benchmark", 5000, 10_000)):
            with scratch_postgres(url, SCRATCH_DATABASE):
                measure(label, running, pending)


if __name__ == "__main__":
    main()
