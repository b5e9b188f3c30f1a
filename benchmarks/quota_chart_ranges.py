"""The quota charts' time switch (issue 12): the Overview's stacked area and the Monitoring tab
at 1 h, 24 h and 7 d over a full allocation history.

    python benchmarks/quota_chart_ranges.py [--quotas 12] [--every 15] [--days 7] [--repeat 5]

Runs on a throwaway test database (SQLite in memory by default; PostgreSQL with DATABASE_URL).
`--quotas` root quotas, each with a sample every `--every` seconds for `--days` days, bulk
inserted (12 × every 15 s × 7 d = 483,840 rows, about SCHEDULER_ALLOCATION_HISTORY_MAX_ROWS).

Prints, per range: the CPU time (time.process_time, this process: Python and SQLite; PostgreSQL's
own work is outside it) and the wall time of `quota_overview` (tree rows already read) and of
`quota_monitoring`, median of `--repeat`; the points per series and the figure's JSON size.
"""

from __future__ import annotations

import argparse
import json
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

from quotas import selectors as quota_selectors  # noqa: E402
from quotas.models import Quota, ResourcePool  # noqa: E402
from scheduling import bulk, quota_charts  # noqa: E402
from scheduling.allocation_history import CHART_RANGES  # noqa: E402
from scheduling.models import AllocationSample  # noqa: E402

NOW = datetime(2026, 3, 9, 0, 0, tzinfo=UTC)


def populate(quotas: int, every: float, days: float) -> int:
    pool, _ = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)
    created = [
        Quota.objects.create(pool=pool, name=f"team-{index:02d}", gpus=8 * (index + 1)) for index in range(quotas)
    ]
    steps = int(days * 86_400 / every)
    rows = 0
    for quota in created:
        batch = [
            (quota.pk, NOW - timedelta(seconds=every * (steps - step)), float(step % 17), float(quota.gpus), 9.0)
            for step in range(steps)
        ]
        for start in range(0, len(batch), 5000):
            bulk.insert(
                AllocationSample,
                ("quota_id", "at", "allocated", "guaranteed", "fair_share"),
                batch[start : start + 5000],
            )
        rows += len(batch)
    return rows


def timed(repeat: int, work):  # type: ignore[no-untyped-def]
    cpu, wall, result = [], [], None
    for _ in range(repeat):
        started_cpu, started_wall = time.process_time(), time.perf_counter()
        result = work()
        cpu.append(time.process_time() - started_cpu)
        wall.append(time.perf_counter() - started_wall)
    return statistics.median(cpu) * 1000, statistics.median(wall) * 1000, result


def run(arguments: argparse.Namespace) -> None:
    rows = populate(arguments.quotas, arguments.every, arguments.days)
    admin = get_user_model().objects.create_user(username="bench-admin", password=None, is_superuser=True)
    tree = quota_selectors.quota_tree_rows(user=admin)
    first = Quota.objects.order_by("id").first()
    assert first is not None
    print(f"{connection.vendor}: {rows:,} allocation samples, {arguments.quotas} quotas")
    print("range | overview CPU / wall ms | points per series | figure bytes | monitoring CPU / wall ms | points")
    for span in [entry for entry in CHART_RANGES if entry.key in arguments.ranges]:
        cpu, wall, overview = timed(
            arguments.repeat, lambda span=span: quota_charts.quota_overview(rows=tree, now=NOW, span=span)
        )
        area = overview["allocation"]
        assert area is not None
        points = max(len(trace["x"]) for trace in area["data"])
        size = len(json.dumps(area))
        m_cpu, m_wall, monitoring = timed(
            arguments.repeat, lambda span=span: quota_charts.quota_monitoring(quota_id=first.pk, now=NOW, span=span)
        )
        assert monitoring is not None
        m_points = max(len(trace["x"]) for trace in monitoring["data"])
        print(f"{span.label} | {cpu:.0f} / {wall:.0f} | {points} | {size:,} | {m_cpu:.0f} / {m_wall:.0f} | {m_points}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quotas", type=int, default=12)
    parser.add_argument("--every", type=float, default=15.0)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ranges", nargs="*", default=[entry.key for entry in CHART_RANGES])
    parser.add_argument("--profile", action="store_true")
    arguments = parser.parse_args()
    setup_test_environment()
    settings.SCHEDULER_PUBLISH_EVENTS = False
    if connection.vendor != "sqlite":
        connection.settings_dict["TEST"]["NAME"] = "benchmark_quota_chart_ranges_charts"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        if arguments.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.runcall(run, arguments)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        else:
            run(arguments)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
