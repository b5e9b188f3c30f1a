"""Benchmark: the quota list API with 1,000 quotas in a 3-level tree, status included.

Target (issue 3): under 200 ms server time for the whole list, with a number of queries that
does not grow with the quotas. Server time is the request handled in-process by Django's test
client (URL routing, middleware, authentication, queryset, the scheduler's status provider,
serialisation, JSON rendering), without a network.

    python benchmarks/quota_list.py                 # SQLite (a throwaway test database)
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test python benchmarks/quota_list.py

It runs on a throwaway database (in memory for SQLite, bench_quota_list on PostgreSQL), never
on the console's own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from quotas import services  # noqa: E402
from quotas.models import GpuDevice, Node, Quota, ResourcePool  # noqa: E402

TARGET_MS = 200.0


def build_tree(quotas: int) -> None:
    """Roots of 80 GPUs, 9 children of 8 each, and grandchildren of 0.8 GPU each, `quotas` in all.

    Written level by level with bulk_create: this measures reads. The rules are the services'
    business and are tested there; the tree built here satisfies them.
    """
    # Leaves first: a parent is protected while it has children.
    Quota.objects.filter(parent__parent__isnull=False).delete()
    Quota.objects.filter(parent__isnull=False).delete()
    Quota.objects.all().delete()
    GpuDevice.objects.all().delete()
    Node.objects.all().delete()
    pool, _ = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)
    roots = max(1, quotas // 100)
    nodes = Node.objects.bulk_create(Node(pool=pool, name=f"gpu-{index}", gpus=8) for index in range(roots * 10))
    GpuDevice.objects.bulk_create(GpuDevice(node=node, index=index) for node in nodes for index in range(8))
    level1 = Quota.objects.bulk_create(Quota(pool=pool, name=f"dept-{index}", gpus=80) for index in range(roots))
    level2 = Quota.objects.bulk_create(
        Quota(pool=pool, name=f"team-{root.name}-{index}", parent=root, gpus=8) for root in level1 for index in range(9)
    )
    remaining = quotas - len(level1) - len(level2)
    Quota.objects.bulk_create(
        Quota(pool=pool, name=f"project-{index}", parent=level2[index % len(level2)], gpus=0.8)
        for index in range(remaining)
    )


def measure(client: APIClient, path: str, repeats: int) -> tuple[list[float], int, int]:
    """Milliseconds per request, the number of queries of one request, and the rows returned."""
    client.get(path)  # warm caches (URL resolver, serializer fields)
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(path)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:300]
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    return timings, len(captured), len(response.json()["results"])


def measure_write(repeats: int) -> list[float]:
    """A scale of one grandchild, the whole rule check under the pool's locks, in a 1,000-quota tree."""
    quota = Quota.objects.filter(name="project-0").get()
    timings = []
    for step in range(repeats):
        started = time.perf_counter()
        services.scale_quota(actor=None, quota=quota, gpus=0.5 if step % 2 else 0.8)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quotas", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=30)
    arguments = parser.parse_args()

    setup_test_environment()
    if connection.vendor != "sqlite":
        # Its own name, so it never clobbers the test database of a pytest run beside it.
        connection.settings_dict.setdefault("TEST", {})["NAME"] = "bench_quota_list"
    test_database = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        admin = get_user_model().objects.create_superuser("bench-admin", password="bench-password-1")
        client = APIClient()
        client.force_authenticate(admin)
        path = f"/api/v1/quotas/?limit={arguments.quotas}"
        print(f"database: {connection.vendor} ({test_database})")
        queries_by_size = {}
        for size in (100, arguments.quotas):
            build_tree(size)
            timings, queries, rows = measure(client, path, arguments.repeats)
            queries_by_size[size] = queries
            median = statistics.median(timings)
            p95 = sorted(timings)[int(0.95 * (len(timings) - 1))]
            print(
                f"GET {path} with {size} quotas: {rows} rows, median {median:.1f} ms, p95 {p95:.1f} ms, "
                f"{queries} queries; target < {TARGET_MS:.0f} ms → {median / TARGET_MS:.2f} of the target"
            )
        page = "/api/v1/quotas/"
        timings, queries, rows = measure(client, page, arguments.repeats)
        print(
            f"GET {page} (default page, {rows} rows) with {arguments.quotas} quotas: "
            f"median {statistics.median(timings):.1f} ms, {queries} queries"
        )
        writes = measure_write(arguments.repeats)
        print(f"scale_quota in a {arguments.quotas}-quota tree: median {statistics.median(writes):.1f} ms")
        constant = len(set(queries_by_size.values())) == 1
        print(f"queries constant across sizes: {constant} ({queries_by_size})")
    finally:
        connection.creation.destroy_test_db(test_database, verbosity=0)


if __name__ == "__main__":
    main()
