"""Listing jobs as a member of one workspace among 100 workspaces holding 10,000 jobs.

Target (issue 6): a constant number of queries, under 200 ms per request. Runs on a throwaway
test database (SQLite in memory by default; PostgreSQL with DATABASE_URL):

    python benchmarks/job_list.py [--workspaces 100] [--jobs 10000] [--repeat 20]

Prints the query count at 1,000 and at 10,000 jobs (it must not change), and the median and
worst time of GET /api/v1/jobs/ (first page) and GET /api/v1/jobs/?workspace=… as the member.
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
from django.contrib.auth.models import User  # noqa: E402
from django.db import connection, reset_queries  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from quotas.models import Quota, ResourcePool  # noqa: E402
from scheduling.models import Job  # noqa: E402
from workspaces import services  # noqa: E402
from workspaces.models import Workspace  # noqa: E402


def populate(workspace_count: int) -> tuple[User, list[tuple[Workspace, Quota, User]]]:
    pool, _ = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)
    root = Quota.objects.create(pool=pool, name="root", gpus=10_000)
    users = get_user_model().objects
    member = users.create_user(username="member", password=None)
    owners = [users.create_user(username=f"owner-{index}", password=None) for index in range(workspace_count)]
    workspaces = []
    for index in range(workspace_count):
        quota = Quota.objects.create(pool=pool, name=f"quota-{index}", gpus=100, parent=root)
        workspace = services.create_workspace(actor=None, name=f"workspace-{index}", quotas=[quota])
        services.add_member(actor=None, workspace=workspace, user=owners[index], role="developer")
        workspaces.append((workspace, quota, owners[index]))
    services.add_member(actor=None, workspace=workspaces[0][0], user=member, role="developer")
    return member, workspaces


def add_jobs(workspaces: list[tuple[Workspace, Quota, User]], job_count: int) -> None:
    """Jobs spread round-robin over the workspaces, each owned by that workspace's developer."""
    now = timezone.now()
    start = Job.objects.count()
    workspace_count = len(workspaces)
    jobs = []
    for index in range(start, start + job_count):
        workspace, quota, owner = workspaces[index % workspace_count]
        jobs.append(
            Job(
                name=f"job-{index}",
                workspace=workspace,
                quota=quota,
                owner=owner,
                kind="training",
                gpus=1,
                priority=3,
                preemptible=True,
                submitted_at=now,
            )
        )
    Job.objects.bulk_create(jobs, batch_size=2000)


def measure(client: APIClient, path: str, repeat: int) -> tuple[int, float, float, int]:
    reset_queries()  # each request resets the log (DEBUG), which would hide the capture's start
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    assert response.status_code == 200, response.content
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.get(path)
        timings.append((time.perf_counter() - started) * 1000)
    return len(queries), statistics.median(timings), max(timings), response.json()["count"]


def run(workspace_count: int, job_counts: list[int], repeat: int) -> None:
    member, workspaces = populate(workspace_count)
    workspace_name = workspaces[0][0].name
    client = APIClient()
    client.force_authenticate(user=member)
    for job_count in job_counts:
        add_jobs(workspaces, job_count - Job.objects.count())
        report(client, workspace_count, workspace_name, repeat)


def report(client: APIClient, workspace_count: int, workspace_name: str, repeat: int) -> None:
    for label, path in (("jobs/", "/api/v1/jobs/"), ("jobs/?workspace=", f"/api/v1/jobs/?workspace={workspace_name}")):
        count, median, worst, visible = measure(client, path, repeat)
        print(
            f"{workspace_count} workspaces, {Job.objects.count()} jobs: GET {label}: {visible} visible, "
            f"{count} queries, median {median:.1f} ms, worst {worst:.1f} ms over {repeat} requests"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspaces", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    arguments = parser.parse_args()
    setup_test_environment()
    if connection.vendor != "sqlite":
        # A name of its own, so it never clobbers the test database a pytest run may be using.
        connection.settings_dict["TEST"]["NAME"] = "benchmark_job_list"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        run(arguments.workspaces, [arguments.jobs // 10, arguments.jobs], arguments.repeat)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
