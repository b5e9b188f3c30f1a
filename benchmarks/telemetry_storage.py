"""Per-GPU telemetry storage (issue 12): N nodes × 8 GPUs sampled every 5 s on a moved clock,
downsampled and pruned every simulated minute as the beat task does.

    python benchmarks/telemetry_storage.py [--nodes 1000] [--hours 24] [--chart-repeat 30]
    python benchmarks/telemetry_storage.py --chart-only [--chart-repeat 30]

`--chart-only` writes a day of 1-minute averages for one 8-GPU job (bulk, no sampling) and times
its chart alone: seconds instead of the full run's minutes.

Runs on a throwaway test database (SQLite in memory by default; PostgreSQL with DATABASE_URL).
Every node is simulated: 60 % run one 8-GPU training job, 15 % two 4-GPU inference jobs, 10 %
eight 1-GPU notebooks, 15 % idle. Each tick is the beat sampler's work: the synthetic readings of
every GPU (two queries and the curves), then one checked bulk insert. Every 60 simulated seconds
`downsample_and_prune` runs, as beat runs it.

Prints: the cost of a sample batch (readings, record), of the downsampling; the rows and bytes
of each level at the end, and the bytes per node per day that a full retention holds; the
chart query of one 8-GPU job over 24 h at 1-minute resolution (selector and plotly figure).
Bytes: SQLite counts the pages in use (page_count - freelist_count) after the run, less those
before; PostgreSQL pg_total_relation_size (table, indexes and TOAST) after VACUUM FULL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

from quotas.models import Node, Quota, ResourcePool  # noqa: E402
from scheduling import bulk  # noqa: E402
from scheduling.clock import SimulatedClock, use_clock  # noqa: E402
from scheduling.models import Job, JobState, ReplicaPlacementRecord  # noqa: E402
from telemetry import charts, retention, selectors, services  # noqa: E402
from telemetry.models import GpuSample, Resolution  # noqa: E402
from workspaces.models import Workspace  # noqa: E402

START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
GPUS = 8


def populate(node_count: int) -> int:
    """The nodes and their running jobs; returns the id of an 8-GPU training job (the chart's)."""
    pool, _ = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)
    quota = Quota.objects.create(pool=pool, name="bench", gpus=node_count * GPUS)
    workspace = Workspace.objects.create(name="bench")
    owner = get_user_model().objects.create_user(username="bench", password=None)
    Node.objects.bulk_create(
        [Node(pool=pool, name=f"node-{index:04d}", gpus=GPUS) for index in range(node_count)], batch_size=2000
    )
    nodes = list(Node.objects.order_by("id"))
    plans: list[tuple[Node, str, float, list[list[int]]]] = []
    for index, node in enumerate(nodes):
        share = index % 20
        if share < 12:
            plans.append((node, "training", 8, [list(range(8))]))
        elif share < 15:
            plans.extend((node, "inference", 4, [devices]) for devices in (list(range(4)), list(range(4, 8))))
        elif share < 17:
            plans.extend((node, "notebook", 1, [[gpu]]) for gpu in range(8))
    started = START - timedelta(hours=1)
    common = {"workspace": workspace, "quota": quota, "owner": owner, "priority": 3, "preemptible": True}
    jobs = [
        Job(
            name=f"job-{index}",
            kind=kind,
            gpus=gpus,
            state=JobState.RUNNING,
            allocated_gpus=gpus,
            running_replicas=1,
            submitted_at=started,
            started_at=started,
            **common,
        )
        for index, (_node, kind, gpus, _devices) in enumerate(plans)
    ]
    Job.objects.bulk_create(jobs, batch_size=2000)
    ReplicaPlacementRecord.objects.bulk_create(
        [
            ReplicaPlacementRecord(job=job, node=node, devices=devices[0])
            for job, (node, _kind, _gpus, devices) in zip(jobs, plans, strict=True)
        ],
        batch_size=2000,
    )
    return int(jobs[0].pk)


def used_bytes() -> int:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_total_relation_size(%s)", [GpuSample._meta.db_table])
            return int(cursor.fetchone()[0])
        cursor.execute("PRAGMA page_count")
        pages = int(cursor.fetchone()[0])
        cursor.execute("PRAGMA freelist_count")
        free = int(cursor.fetchone()[0])
        cursor.execute("PRAGMA page_size")
        return (pages - free) * int(cursor.fetchone()[0])


def vacuum() -> None:
    """PostgreSQL keeps a deleted row's space for reuse (plain VACUUM); FULL rewrites the table
    and its indexes, so the size counts live rows only. In service autovacuum runs instead, and
    the table holds about one pruning's worth of reusable space on top (see docs/telemetry.md)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM FULL {GpuSample._meta.db_table}")


def run(arguments: argparse.Namespace) -> None:
    job_id = populate(arguments.nodes)
    vacuum()
    before = used_bytes()
    clock = SimulatedClock(START)
    ticks = int(arguments.hours * 3600 / arguments.every)
    readings_ms: list[float] = []
    record_ms: list[float] = []
    downsample_ms: list[float] = []
    wall = time.perf_counter()
    with use_clock(clock):
        for tick in range(ticks):
            at = clock.now()
            started = time.perf_counter()
            batch = services.simulated_readings(at=at)
            middle = time.perf_counter()
            services._record(batch, at=at)
            ended = time.perf_counter()
            readings_ms.append((middle - started) * 1000)
            record_ms.append((ended - middle) * 1000)
            clock.advance(arguments.every)
            if (tick + 1) % int(60 / arguments.every) == 0:
                started = time.perf_counter()
                retention.downsample_and_prune(now=clock.now())
                downsample_ms.append((time.perf_counter() - started) * 1000)
            if arguments.progress and tick % 720 == 0:
                print(f"  {tick / 720:.0f} h simulated, {time.perf_counter() - wall:.0f} s", flush=True)
    elapsed = time.perf_counter() - wall
    samples = arguments.nodes * GPUS
    print(f"{arguments.nodes} nodes × {GPUS} GPUs = {samples} samples a batch, every {arguments.every:g} s, "
          f"{arguments.hours:g} h simulated ({ticks} batches) in {elapsed:.0f} s; {connection.vendor}")  # fmt: skip
    print(
        f"batch: readings median {statistics.median(readings_ms):.1f} ms, record (check + insert) median "
        f"{statistics.median(record_ms):.1f} ms, p95 {sorted(record_ms)[int(0.95 * len(record_ms))]:.1f} ms, "
        f"max {max(record_ms):.1f} ms; per sample {statistics.median(record_ms) * 1000 / samples:.2f} µs"
    )
    if downsample_ms:
        print(
            f"downsample_and_prune every simulated minute: median {statistics.median(downsample_ms):.1f} ms, "
            f"max {max(downsample_ms):.1f} ms ({len(downsample_ms)} runs)"
        )
    now = clock.now()
    since = max(START, now - timedelta(hours=24))
    timings = []
    for _ in range(arguments.chart_repeat):
        started = time.perf_counter()
        level, series = selectors.job_gpu_history(job_id=job_id, since=since, now=now)
        charts.job_gpu_figure(series)
        timings.append((time.perf_counter() - started) * 1000)
    points = sum(len(entry.at) for entry in series)
    print(
        f"chart of an 8-GPU job over {(now - since).total_seconds() / 3600:.1f} h at level {level} "
        f"({points} points, selector and figure): median {statistics.median(timings):.1f} ms, "
        f"max {max(timings):.1f} ms"
    )
    storage(arguments, before)


def storage(arguments: argparse.Namespace, before: int) -> None:
    """Bytes of the raw level and of the averaged levels, apart: the raw rows carry one index
    more (the partial one), so they are measured, deleted, and the rest measured again."""
    rows = {level: GpuSample.objects.filter(resolution=level).count() for level in Resolution.values}
    vacuum()
    total = used_bytes() - before
    GpuSample.objects.filter(resolution=Resolution.RAW).delete()
    vacuum()
    averaged = used_bytes() - before
    averaged_rows = rows[Resolution.MINUTE] + rows[Resolution.HOUR]
    per_raw = (total - averaged) / max(rows[Resolution.RAW], 1)
    per_averaged = averaged / averaged_rows if averaged_rows else float("nan")
    print(
        f"rows after pruning: raw {rows[Resolution.RAW]}, 1-minute {rows[Resolution.MINUTE]}, "
        f"1-hour {rows[Resolution.HOUR]}; {total / 1e6:.1f} MB in all (table and indexes): "
        f"{per_raw:.0f} bytes a raw row, {per_averaged:.0f} bytes an averaged row"
    )
    kept = selectors.retention()
    raw_rows = GPUS * kept[Resolution.RAW].total_seconds() / arguments.every
    minute_rows = GPUS * kept[Resolution.MINUTE].total_seconds() / 60
    hour_rows = GPUS * kept[Resolution.HOUR].total_seconds() / 3600
    per_day = GPUS * (1440 + 24) * per_averaged
    full = raw_rows * per_raw + (minute_rows + hour_rows) * per_averaged
    print(
        f"per node ({GPUS} GPUs): {per_day / 1e3:.0f} kB a day kept (1,440 minute + 24 hour rows a GPU); "
        f"the last hour's samples {raw_rows * per_raw / 1e6:.2f} MB; a full retention (1 h raw, 7 d minutes, "
        f"90 d hours) {full / 1e6:.1f} MB a node, {full * arguments.nodes / 1e9:.2f} GB for {arguments.nodes} nodes"
    )


def chart_only(arguments: argparse.Namespace) -> None:
    job_id = populate(1)
    node_id = Node.objects.get().pk
    now = START + timedelta(days=1)
    rows = [
        (node_id, gpu, job_id, Resolution.MINUTE, now - timedelta(minutes=minute), 90.0, 70_000, 81_920)
        for minute in range(1, 1441)
        for gpu in range(GPUS)
    ]
    bulk.insert(GpuSample, services._COLUMNS, rows)
    timings = []
    for _ in range(arguments.chart_repeat):
        started = time.perf_counter()
        level, series = selectors.job_gpu_history(job_id=job_id, since=now - timedelta(hours=24), now=now)
        charts.job_gpu_figure(series)
        timings.append((time.perf_counter() - started) * 1000)
    print(
        f"chart of an 8-GPU job over 24 h at level {level} ({sum(len(entry.at) for entry in series)} points, "
        f"selector and figure; {connection.vendor}): median {statistics.median(timings):.1f} ms, "
        f"max {max(timings):.1f} ms over {arguments.chart_repeat}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--chart-repeat", type=int, default=30)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--chart-only", action="store_true")
    arguments = parser.parse_args()
    setup_test_environment()
    settings.SCHEDULER_PUBLISH_EVENTS = False  # storage alone; the live fan-out is measured elsewhere
    if connection.vendor != "sqlite":
        connection.settings_dict["TEST"]["NAME"] = "benchmark_telemetry_storage"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        chart_only(arguments) if arguments.chart_only else run(arguments)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
