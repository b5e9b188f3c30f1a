"""A task for tests/scheduling/test_worker_connections.py, loaded into a real worker with
`celery worker --include tests.scheduling.worker_probe`: it tells the test which PostgreSQL backend
served it, and can leave the cycle's advisory lock held as a task that failed to release it would."""

from __future__ import annotations

from celery import shared_task
from django.db import connection

from scheduling.lock import ADVISORY_KEY, redis_client


@shared_task(name="tests.scheduling.report_backend", ignore_result=True)
def report_backend(answer_key: str, leave_cycle_lock_held: bool = False) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
        if leave_cycle_lock_held:
            cursor.execute("SELECT pg_advisory_lock(%s)", [ADVISORY_KEY])
    redis_client().rpush(answer_key, backend)
