"""End to end through a REAL Celery worker on Redis: submit over the API, the trigger queues a
cycle task, the worker runs it, commits, and the simulated executor starts the job."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
from celery.contrib.testing.worker import start_worker
from django.contrib.auth.models import AbstractUser
from django.db import connection, connections
from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper
from rest_framework.test import APIClient

from console.celery import app
from scheduling import triggers
from scheduling.models import Job, JobState
from tests.scheduling.conftest import build_cluster
from workspaces import services as workspace_services

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@app.task(name="tests.scheduling.close_connections")
def close_connections() -> None:
    """The worker thread's connections must go before the test database is dropped."""
    connections.close_all()


@pytest.fixture
def worker(settings: Any) -> Iterator[str]:
    if connection.vendor == "sqlite" and cast(SQLiteDatabaseWrapper, connection).is_in_memory_db():
        pytest.skip(
            "in-memory SQLite shares one cache across threads with table locks that fail instead of waiting; "
            "this test runs on PostgreSQL (or a file-based SQLite test database)"
        )
    queue = f"runtime-test-{uuid.uuid4().hex[:8]}"
    settings.SCHEDULER_TRIGGER = "celery"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    try:
        with start_worker(app, pool="solo", concurrency=1, perform_ping_check=False, queues=[queue]):
            yield queue
            close_connections.apply_async(queue=queue)
            time.sleep(0.2)
    finally:
        app.conf.task_default_queue = previous


def wait_for(predicate: Any, timeout: float = 15.0) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if predicate():
            return time.perf_counter() - started
        time.sleep(0.005)
    raise AssertionError(f"not within {timeout} s")


def test_a_job_submitted_over_the_api_is_run_by_the_worker(worker: str, make_user: Any) -> None:
    cluster = build_cluster()
    owner: AbstractUser = make_user("wanda")
    workspace_services.add_member(actor=None, workspace=cluster.workspace, user=owner, role="developer")
    client = APIClient()
    client.force_authenticate(owner)
    body = {"name": "train", "workspace": "lab", "quota": "team-a", "kind": "training", "gpus": 4}
    submitted = time.perf_counter()
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201
    job_id = response.json()["id"]
    wait_for(lambda: Job.objects.get(pk=job_id).state == JobState.RUNNING)
    elapsed = time.perf_counter() - submitted
    wait_for(lambda: Job.objects.get(pk=job_id).events.filter(kind="started").exists())
    print(f"submit-to-running through a real worker: {elapsed * 1000:.0f} ms")

    # A burst of submissions queues few cycles (coalesced), and all of them end up placed.
    for number in range(10):
        assert (
            client.post("/api/v1/jobs/", {**body, "name": f"burst-{number}", "gpus": 1}, format="json").status_code
            == 201
        )
    wait_for(lambda: Job.objects.filter(state=JobState.RUNNING).count() == 11)
    client.post(f"/api/v1/jobs/{job_id}/cancel/")
    wait_for(lambda: Job.objects.get(pk=job_id).state == JobState.CANCELLED)


def test_a_manual_cycle_is_run_by_the_worker_and_answered_with_its_decisions(
    worker: str, platform_admin: AbstractUser, settings: Any
) -> None:
    settings.SCHEDULER_API_LOCK_WAIT_SECONDS = 10.0  # a loaded CI machine: the worker's cycle must land
    cluster = build_cluster()
    with triggers.paused():
        cluster.submit("waiting", gpus=2)
    client = APIClient()
    client.force_authenticate(platform_admin)
    answer = client.post("/api/v1/scheduler/cycle/").json()
    assert (answer["ran"], answer["committed"], answer["queued"]) == (True, True, False)
    assert [(decision["kind"], decision["job"]) for decision in answer["decisions"]] == [("admit", "waiting")]
    assert Job.objects.get(name="waiting").state == JobState.RUNNING


def test_a_broker_outage_never_fails_a_submission(cluster_settings_redis_down: None, make_user: Any) -> None:
    cluster = build_cluster()
    owner: AbstractUser = make_user("bob")
    workspace_services.add_member(actor=None, workspace=cluster.workspace, user=owner, role="developer")
    client = APIClient()
    client.force_authenticate(owner)
    body = {"name": "train", "workspace": "lab", "quota": "team-a", "kind": "training", "gpus": 4}
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201
    assert Job.objects.get(pk=response.json()["id"]).state == JobState.PENDING
    assert triggers.request_cycle("again") is False


@pytest.fixture
def cluster_settings_redis_down(settings: Any) -> Iterator[None]:
    settings.SCHEDULER_TRIGGER = "celery"
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    yield


@pytest.mark.django_db
def test_a_burst_of_requests_queues_one_cycle_until_the_task_starts(settings: Any) -> None:
    import redis

    settings.SCHEDULER_TRIGGER = "celery"
    # The request key lives twice the beat period: long enough for a slow machine's 1,000 calls.
    settings.SCHEDULER_BEAT_SECONDS = 120
    queue = f"runtime-burst-{uuid.uuid4().hex[:8]}"
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    broker = redis.Redis.from_url(app.conf.broker_url)
    try:
        queued = [triggers.request_cycle("submit") for _ in range(1000)]
        assert queued.count(True) == 1
        assert broker.llen(queue) == 1
        triggers.clear_request()  # what the task does first
        assert triggers.request_cycle("finish") is True
        assert broker.llen(queue) == 2
    finally:
        app.conf.task_default_queue = previous
        broker.delete(queue)
        triggers.clear_request()
