"""The worker keeps its PostgreSQL connections across tasks (console.worker_connections), in a
REAL prefork worker on Redis and PostgreSQL; and a kept connection carries no advisory lock from one
task into the next."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connection, transaction

from console.celery import app
from console.worker_connections import drop_session_locks
from scheduling.lock import ADVISORY_KEY, redis_client

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL connections and advisory locks; the suite runs on SQLite here")


@pytest.fixture
def prefork_worker(postgres: None) -> Iterator[str]:
    """`celery worker --pool prefork` as bin/run starts it (one child), on the test database."""
    database = connection.settings_dict
    queue = f"connections-test-{uuid.uuid4().hex[:8]}"
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": (
            f"postgres://{database['USER']}:{database['PASSWORD']}@{database['HOST'] or '127.0.0.1'}:"
            f"{database['PORT'] or 5432}/{database['NAME']}"
        ),
        "REDIS_URL": settings.REDIS_URL,
        "CELERY_QUEUE": queue,
        "CELERY_SKIP_CHECKS": "1",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "console", "worker", "--pool", "prefork", "--concurrency", "1",
         "--include", "tests.scheduling.worker_probe", "--queues", queue, "--hostname", f"{queue}@%h",
         "--loglevel", "WARNING", "--without-mingle", "--without-gossip", "--without-heartbeat"],
        cwd=ROOT, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        yield queue
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        redis_client().delete(queue)


def served_by(queue: str, *, leave_cycle_lock_held: bool = False) -> int:
    """Run the probe task in the worker; the backend pid that served it."""
    answer_key = f"{queue}:answer"
    app.send_task(
        "tests.scheduling.report_backend", args=[answer_key, leave_cycle_lock_held], queue=queue, ignore_result=True
    )
    # A client whose socket waits as long as the BLPOP: the shared one times out after 2 s, and
    # redis-py's own default (5 s) ended a full run's wait for the worker's first task early.
    answer = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=75).blpop([answer_key], timeout=60)
    assert answer is not None, "the worker ran no task within 60 s"
    return int(answer[1])


def cycle_lock_is_free() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_KEY])
        free = bool(cursor.fetchone()[0])
        if free:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_KEY])
    return free


def test_the_prefork_worker_serves_its_tasks_on_one_kept_connection(prefork_worker: str) -> None:
    # Celery's own fix-up closed the child's pool at each task's end: a new backend every task.
    # Kept, the pool holds two at most here (its opening fills one while the first task asks for
    # another), and hands them out in turn.
    backends = [served_by(prefork_worker) for _ in range(6)]
    assert len(set(backends)) <= 2, f"a new PostgreSQL connection per task: backends {backends}"

    # A task that ends holding the cycle's session lock does not hand it to the next task, nor keep
    # every other cycle out: its end releases the lock, and the connection is kept all the same.
    # (The answer comes from inside the task: the next task's answer says the first one ended.)
    later = [served_by(prefork_worker, leave_cycle_lock_held=True), served_by(prefork_worker)]
    assert cycle_lock_is_free()
    later += [served_by(prefork_worker) for _ in range(2)]
    assert set(later) <= set(backends), f"backends {backends}, then {later}"


def test_a_connection_left_inside_a_transaction_is_closed_with_its_locks(postgres: None) -> None:
    outcome: dict[str, Any] = {}

    def task_that_ends_inside_a_transaction() -> None:
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_KEY])
                outcome["held"] = not cycle_lock_is_free_elsewhere()
                drop_session_locks(connection)
                outcome["closed"] = connection.connection is None
        finally:
            connection.close()

    thread = threading.Thread(target=task_that_ends_inside_a_transaction)
    thread.start()
    thread.join(timeout=30)
    assert outcome == {"held": True, "closed": True}
    # The server drops a closed connection's locks when its backend has read the goodbye: soon.
    deadline = time.monotonic() + 10
    while not cycle_lock_is_free():
        assert time.monotonic() < deadline, "the closed connection's lock is still held"
        time.sleep(0.01)


def cycle_lock_is_free_elsewhere() -> bool:
    """Asked on another connection than this thread's (the lock is re-entrant for its holder)."""
    answer: list[bool] = []

    def ask() -> None:
        answer.append(cycle_lock_is_free())
        connection.close()

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join(timeout=30)
    return answer == [True]
