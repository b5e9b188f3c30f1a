"""Benchmark: the Resource Quotas page (List and Overview) and the Quota page with its tabs.

Target (issue 10): under 200 ms median server time per page with 1,000 quotas (a tree),
1,000 nodes and 10,000 jobs, in a number of queries that does not grow with the cluster
(the same at 100 quotas as at 1,000). Server time is the request handled in-process by
Django's test client (routing, middleware, session, the quota tree and its status from the
scheduler's snapshot, the allocation history, templates), without a network. Then headless
Chromium loads /quotas/ (List and Overview) from a live server and reports first paint,
DOM interactive, and the moment both charts are drawn.

    python benchmarks/console_pages.py                      # SQLite (a throwaway database)
    python benchmarks/console_pages.py --database postgres  # a scratch database on $POSTGRES_SERVER
    python benchmarks/console_pages.py --no-browser --repeats 10

The cluster: roots of 80 GPUs, 9 children of 8 each, grandchildren of 0.8 GPU; one 8-GPU node
per quota; ten jobs per quota, of which one scheduling cycle admits what fits; and an hour of
allocation history (a sample per quota every two minutes), as a busy cluster leaves it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

TARGET_MS = 200.0
POSTGRES_SERVER = os.environ.get("POSTGRES_SERVER", "postgres://postgres@127.0.0.1:5432/postgres")
CHROMIUM = Path("/usr/bin/chromium")


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quotas", type=int, default=1000)
    parser.add_argument("--small", type=int, default=100, help="the size whose query counts must match")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium timing")
    return parser.parse_args()


ARGUMENTS = _arguments()
if ARGUMENTS.database == "postgres":
    from benchmarks.console_process import fresh_postgres

    os.environ["DATABASE_URL"] = fresh_postgres(POSTGRES_SERVER, "bench_console_pages")
else:
    os.environ.pop("DATABASE_URL", None)

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from quotas.models import GpuDevice, Node, Quota, ResourcePool  # noqa: E402
from scheduling.cycle import decide_and_commit  # noqa: E402
from scheduling.lock import CycleLease, issue_token  # noqa: E402
from scheduling.models import AllocationSample, Job  # noqa: E402
from workspaces.models import Workspace  # noqa: E402

JOBS_PER_QUOTA = 10
HISTORY_STEP = timedelta(minutes=2)


def clear() -> None:
    Job.objects.all().delete()  # placements and events go with them
    AllocationSample.objects.all().delete()
    Workspace.objects.all().delete()
    Quota.objects.filter(parent__parent__isnull=False).delete()  # leaves first: parents are protected
    Quota.objects.filter(parent__isnull=False).delete()
    Quota.objects.all().delete()
    GpuDevice.objects.all().delete()
    Node.objects.all().delete()


def build_cluster(quotas: int) -> dict[str, Any]:
    """The tree, the nodes and the jobs in bulk (this measures reads; the services' rules are
    tested elsewhere and this cluster satisfies them), then one real cycle and an hour of history."""
    clear()
    pool, _ = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)
    roots = max(1, quotas // 100)
    nodes = Node.objects.bulk_create(Node(pool=pool, name=f"gpu-{index}", gpus=8) for index in range(quotas))
    GpuDevice.objects.bulk_create(GpuDevice(node=node, index=index) for node in nodes for index in range(8))
    level1 = Quota.objects.bulk_create(Quota(pool=pool, name=f"dept-{index}", gpus=80) for index in range(roots))
    level2 = Quota.objects.bulk_create(
        Quota(pool=pool, name=f"team-{root.name}-{index}", parent=root, gpus=8) for root in level1 for index in range(9)
    )
    remaining = quotas - len(level1) - len(level2)
    level3 = Quota.objects.bulk_create(
        Quota(pool=pool, name=f"project-{index}", parent=level2[index % len(level2)], gpus=0.8)
        for index in range(remaining)
    )
    every = [*level1, *level2, *level3]
    workspace = Workspace.objects.create(name="bench")
    now = timezone.now()
    Job.objects.bulk_create(
        (
            Job(
                name=f"job-{quota.pk}-{index}",
                workspace=workspace,
                quota=quota,
                kind="training",
                gpus=1 if index % 3 else 0.5,
                priority=3,
                preemptible=True,
                submitted_at=now - timedelta(seconds=index),
            )
            for quota in every
            for index in range(JOBS_PER_QUOTA)
        ),
        batch_size=2000,
    )
    started = time.perf_counter()
    outcome = decide_and_commit(
        lease=CycleLease(token=issue_token(), holder="bench", backend="bench"), trigger="bench", now=now
    )
    cycle_ms = (time.perf_counter() - started) * 1000
    # An hour of history before the cycle's own samples: every quota moved every two minutes.
    samples = []
    for step in range(1, 31):
        at = now - HISTORY_STEP * step
        for position, quota in enumerate(every):
            allocated = float((position + step) % 9) * quota.gpus / 4
            samples.append(
                AllocationSample(
                    quota=quota,
                    at=at,
                    allocated=allocated,
                    guaranteed=quota.gpus,
                    fair_share=max(allocated, quota.gpus),
                )
            )
    AllocationSample.objects.bulk_create(samples, batch_size=5000)
    return {
        "quota": level1[0],
        "admitted": outcome.admitted,
        "cycle_ms": cycle_ms,
        "samples": AllocationSample.objects.count(),
        "jobs": Job.objects.count(),
    }


def pages(quota_id: int) -> list[tuple[str, str, dict[str, str]]]:
    tab = {"HX-Request": "true"}  # a tab's body as htmx swaps it in
    return [
        ("/quotas/ (List)", "/quotas/", {}),
        ("/quotas/?view=overview", "/quotas/?view=overview", {}),
        ("/quotas/{id}/ (Overview tab, full page)", f"/quotas/{quota_id}/", {}),
        ("/quotas/{id}/?tab=jobs (htmx)", f"/quotas/{quota_id}/?tab=jobs", tab),
        ("/quotas/{id}/?tab=monitoring (htmx)", f"/quotas/{quota_id}/?tab=monitoring", tab),
        ("/quotas/{id}/?tab=monitoring (full page)", f"/quotas/{quota_id}/?tab=monitoring", {}),
        ("/quotas/{id}/?tab=audit (htmx)", f"/quotas/{quota_id}/?tab=audit", tab),
    ]


def measure(client: Client, path: str, headers: dict[str, str], repeats: int) -> tuple[list[float], int]:
    assert client.get(path, headers=headers).status_code == 200  # warm (templates, URL resolver)
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = client.get(path, headers=headers)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:300]
    with CaptureQueriesContext(connection) as captured:
        client.get(path, headers=headers)
    return timings, len(captured)


def p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def browser_timing(client: Client, repeats: int) -> list[tuple[str, float, float, float]]:
    """(page, first contentful paint, DOM interactive, charts drawn) in ms from navigation start,
    medians over `repeats` cold loads (a new browser context each: nothing cached)."""
    from playwright.sync_api import sync_playwright
    from pytest_django.live_server_helper import LiveServer

    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's loop runs in this thread
    server = LiveServer("localhost:0")
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    results = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
            for label, path, charts in (
                ("/quotas/ (List)", "/quotas/", 0),
                ("/quotas/?view=overview", "/quotas/?view=overview", 2),
            ):
                paints, interactive, drawn = [], [], []
                for _ in range(repeats):
                    context = browser.new_context(viewport={"width": 1280, "height": 900})
                    context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": server.url}])
                    page = context.new_page()
                    page.goto(f"{server.url}{path}")
                    if charts:
                        page.wait_for_function(
                            f"document.querySelectorAll('[data-chart][data-ready=true]').length === {charts}",
                            timeout=60_000,
                        )
                    ready = page.evaluate("performance.now()") if charts else 0.0
                    page.wait_for_load_state("load")
                    timing = page.evaluate(
                        """() => {
                          const nav = performance.getEntriesByType('navigation')[0];
                          const paint = performance.getEntriesByName('first-contentful-paint')[0];
                          return [paint ? paint.startTime : 0, nav.domInteractive];
                        }"""
                    )
                    paints.append(timing[0])
                    interactive.append(timing[1])
                    drawn.append(ready or timing[1])
                    context.close()
                results.append(
                    (label, statistics.median(paints), statistics.median(interactive), statistics.median(drawn))
                )
            browser.close()
    finally:
        server.stop()
    return results


def main() -> None:
    setup_test_environment()
    # As in production: no query log, and static URLs without a collected manifest.
    settings.DEBUG = False
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    if connection.vendor != "sqlite":
        connection.settings_dict.setdefault("TEST", {})["NAME"] = "bench_console_pages_test"
    test_database = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        admin = get_user_model().objects.create_superuser("bench-admin", password="bench-password-1")
        client = Client()
        client.force_login(admin)
        print(f"database: {connection.vendor}")
        queries: dict[int, dict[str, int]] = {}
        rows: list[str] = []
        for size in (ARGUMENTS.small, ARGUMENTS.quotas):
            built = build_cluster(size)
            print(
                f"{size} quotas, {size} nodes, {built['jobs']} jobs ({built['admitted']} admitted by one cycle in "
                f"{built['cycle_ms']:.0f} ms), {built['samples']} allocation samples"
            )
            queries[size] = {}
            for label, path, headers in pages(built["quota"].pk):
                timings, count = measure(client, path, headers, ARGUMENTS.repeats)
                queries[size][label] = count
                median = statistics.median(timings)
                line = f"| {label} | {size} | {median:.0f} | {p95(timings):.0f} | {count} | {median / TARGET_MS:.2f} |"
                rows.append(line)
                print(line)
        constant = queries[ARGUMENTS.small] == queries[ARGUMENTS.quotas]
        print(f"queries the same at {ARGUMENTS.small} and {ARGUMENTS.quotas} quotas: {constant}")
        if not constant:
            for label in queries[ARGUMENTS.small]:
                print(f"  {label}: {queries[ARGUMENTS.small][label]} → {queries[ARGUMENTS.quotas][label]}")
        if not ARGUMENTS.no_browser and CHROMIUM.exists():
            for label, paint, interactive, drawn in browser_timing(client, repeats=5):
                print(
                    f"browser {label}: first contentful paint {paint:.0f} ms, DOM interactive {interactive:.0f} ms, "
                    f"charts drawn {drawn:.0f} ms (median of 5 cold loads)"
                )
    finally:
        connection.creation.destroy_test_db(test_database, verbosity=0)


if __name__ == "__main__":
    main()
