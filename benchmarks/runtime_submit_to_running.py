"""Submit-to-running on free capacity, through the API with a real Celery worker.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/0 \
        python benchmarks/runtime_submit_to_running.py [--jobs 200]

Targets: p50 at most 300 ms, p99 at most 1 s.

A scratch PostgreSQL database next to DATABASE_URL, a private Redis database (index 13 of the
REDIS_URL server) and a private Celery queue, so that a console running next to it is never
disturbed. A real worker process (`celery -A console worker --pool solo`) runs the cycles. Each
job is POSTed to /api/v1/jobs/ (DRF's full stack, token auth) by a platform admin; the clock
stops when the database shows it running (polled every 2 ms). The job is then cancelled over
the API, so the capacity stays free, and the next one follows 100 ms later.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

P50_TARGET_MS = 300.0
P99_TARGET_MS = 1000.0
DATABASE = "bench_runtime_submit"


def private_environment() -> dict[str, str]:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("Set DATABASE_URL to a PostgreSQL server (a scratch database is created next to it).")
    parts = urlsplit(url)
    redis = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    return {
        "DATABASE_URL": urlunsplit((parts.scheme, parts.netloc, f"/{DATABASE}", "", "")),
        "REDIS_URL": urlunsplit((redis.scheme, redis.netloc, "/13", "", "")),
        "CELERY_QUEUE": f"bench-submit-{uuid.uuid4().hex[:8]}",
        "CHANNELS_PREFIX": "bench-submit",
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "LOG_LEVEL": "WARNING",
    }


def server(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection to the `postgres` database of the server of `url`."""
    parts = urlsplit(url)
    return psycopg.connect(
        host=parts.hostname,
        port=parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password,
        dbname="postgres",
        autocommit=True,
    )


def recreate_database(url: str) -> None:
    with server(url) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{DATABASE}"')


def drop_database(url: str) -> None:
    with server(url) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    args = parser.parse_args()
    server_url = os.environ.get("DATABASE_URL", "")
    environment = private_environment()
    recreate_database(server_url)
    os.environ.update(environment)

    import django

    django.setup()
    from django.apps import apps
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test.utils import override_settings
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from quotas import services as quota_services
    from scheduling.cycle import ensure_fence
    from scheduling.lock import redis_client
    from scheduling.models import Job, JobState
    from workspaces import services as workspace_services

    with override_settings(MIGRATION_MODULES={app.label: None for app in apps.get_app_configs()}):
        call_command("migrate", run_syncdb=True, verbosity=0, interactive=False)
    ensure_fence()
    redis_client().flushdb()
    admin = get_user_model().objects.create_superuser(username="bench", email="", password=None)
    for number in range(1, 51):
        quota_services.create_node(actor=admin, name=f"node-{number}", gpus=8)
    team = quota_services.create_quota(actor=admin, name="team", gpus=400)
    workspace_services.create_workspace(actor=admin, name="lab", quotas=[team])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=admin).key}")

    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "console",
            "worker",
            "--pool",
            "solo",
            "-Q",
            environment["CELERY_QUEUE"],
            "--loglevel",
            "WARNING",
        ],
        cwd=ROOT,
        env={**os.environ, **environment},
    )
    try:
        latencies: list[float] = []
        posts: list[float] = []
        for number in range(args.jobs + 5):  # the first five warm the worker up
            body = {"name": f"job-{number}", "workspace": "lab", "quota": "team", "kind": "training", "gpus": 1}
            started = time.perf_counter()
            response = client.post("/api/v1/jobs/", body, format="json")
            posted = time.perf_counter()
            if response.status_code != 201:
                sys.exit(f"submit refused: {response.status_code} {response.content!r}")
            job_id = response.json()["id"]
            deadline = started + 30
            while Job.objects.filter(pk=job_id).values_list("state", flat=True).get() != JobState.RUNNING:
                if time.perf_counter() > deadline:
                    sys.exit(f"job {job_id} was not running after 30 s: is the worker up?")
                time.sleep(0.002)
            running = time.perf_counter()
            if number >= 5:
                latencies.append((running - started) * 1000)
                posts.append((posted - started) * 1000)
            client.post(f"/api/v1/jobs/{job_id}/cancel/")
            time.sleep(0.1)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        from django.db import connections

        connections.close_all()
        drop_database(server_url)

    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
    print(
        f"submit-to-running over {len(latencies)} jobs: p50 {p50:.0f} ms (target {P50_TARGET_MS:.0f}, "
        f"ratio {p50 / P50_TARGET_MS:.2f}), p99 {p99:.0f} ms (target {P99_TARGET_MS:.0f}, "
        f"ratio {p99 / P99_TARGET_MS:.2f}), max {latencies[-1]:.0f} ms"
    )
    print(f"  of which the POST itself (validation, commit, trigger): p50 {statistics.median(posts):.0f} ms")


if __name__ == "__main__":
    main()
