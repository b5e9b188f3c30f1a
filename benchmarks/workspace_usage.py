"""The Usage tab of a workspace over 30 days of events for 1,000 jobs.

Target (issue 11): under 300 ms per request. Runs on a throwaway test database (SQLite in
memory by default; PostgreSQL with DATABASE_URL):

    python benchmarks/workspace_usage.py [--jobs 1000] [--repeat 20]

The workspace has 4 quotas, shared with a second workspace whose 1,000 jobs weigh on the
guarantee split too. Each job is submitted, admitted, started and finished inside the last 30
days (1–8 GPUs, 1–12 hours); every tenth is evicted halfway, requeued and admitted again: about
5 events a job, 10,000 events in all. Prints the query count and the median and worst time of
GET /workspaces/{id}/usage/ (the whole page: the selector and the template) as a member.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, reset_queries  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from quotas.models import Quota, ResourcePool  # noqa: E402
from scheduling.models import Job, JobEvent, JobEventKind, JobState  # noqa: E402
from workspaces import services  # noqa: E402
from workspaces.models import Workspace  # noqa: E402


def populate(job_count: int) -> tuple[Workspace, object]:
    rng = random.Random(11)
    pool, _ = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)
    quotas = [Quota.objects.create(pool=pool, name=f"quota-{index}", gpus=32) for index in range(4)]
    users = get_user_model().objects
    member = users.create_user(username="member", password=None)
    own = services.create_workspace(actor=None, name="team-a", quotas=quotas)
    other = services.create_workspace(actor=None, name="team-b", quotas=quotas)
    services.add_member(actor=None, workspace=own, user=member, role="visitor")
    owners = [users.create_user(username=f"dev-{index}", password=None) for index in range(20)]
    now = timezone.now()
    jobs, timelines = [], []
    for index in range(2 * job_count):  # half are team-b's, on the same quotas
        start = now - timedelta(days=30) + timedelta(seconds=rng.uniform(0, 29 * 86400))
        hours = rng.uniform(1, 12)
        gpus = rng.choice([1, 2, 4, 8])
        jobs.append(
            Job(
                name=f"job-{index}",
                workspace=own if index % 2 == 0 else other,
                quota=quotas[index % 4],
                owner=owners[index % 20],
                kind="training",
                gpus=gpus,
                priority=3,
                preemptible=True,
                state=JobState.SUCCEEDED,
                submitted_at=start - timedelta(minutes=5),
                finished_at=start + timedelta(hours=hours),
            )
        )
        timelines.append((start, hours, gpus, index % 10 == 0))
    Job.objects.bulk_create(jobs, batch_size=2000)
    events = []
    for job, (start, hours, gpus, evicted) in zip(jobs, timelines, strict=True):
        admitted = f"1 replica(s), {gpus} GPUs on dgx-1"
        events += [
            JobEvent(job=job, kind=JobEventKind.SUBMITTED, at=start - timedelta(minutes=5)),
            JobEvent(job=job, kind=JobEventKind.ADMITTED, at=start, message=admitted),
            JobEvent(job=job, kind=JobEventKind.STARTED, at=start + timedelta(seconds=10)),
        ]
        if evicted:
            half = start + timedelta(hours=hours / 2)
            events += [
                JobEvent(job=job, kind=JobEventKind.EVICTED, at=half, rule="reclaim"),
                JobEvent(job=job, kind=JobEventKind.REQUEUED, at=half),
                JobEvent(job=job, kind=JobEventKind.ADMITTED, at=half + timedelta(minutes=10), message=admitted),
            ]
        events.append(JobEvent(job=job, kind=JobEventKind.FINISHED, at=start + timedelta(hours=hours)))
    JobEvent.objects.bulk_create(events, batch_size=5000)
    return own, member


def measure(client: Client, path: str, repeat: int) -> tuple[int, float, float]:
    reset_queries()
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    assert response.status_code == 200, response.status_code
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        client.get(path)
        timings.append((time.perf_counter() - started) * 1000)
    return len(queries), statistics.median(timings), max(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=20)
    arguments = parser.parse_args()
    setup_test_environment()
    settings.ALLOWED_HOSTS = ["testserver"]
    if connection.vendor != "sqlite":
        connection.settings_dict["TEST"]["NAME"] = "benchmark_workspace_usage"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        workspace, member = populate(arguments.jobs)
        client = Client()
        client.force_login(member)  # type: ignore[arg-type]
        count, median, worst = measure(client, f"/workspaces/{workspace.pk}/usage/", arguments.repeat)
        print(
            f"{arguments.jobs} jobs of the workspace (+{arguments.jobs} of another on its quotas), "
            f"{JobEvent.objects.count()} events over 30 days: GET usage tab: {count} queries, "
            f"median {median:.1f} ms, worst {worst:.1f} ms over {arguments.repeat} requests"
        )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
