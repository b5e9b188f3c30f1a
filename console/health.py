"""Liveness of the parts the console needs: database, Redis, a Celery worker and beat.

Worker and beat each write a heartbeat key into Redis from a background thread (see
`console.signals`); /healthz reads their age.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Final

import redis
from django.conf import settings
from django.db import connection

HEARTBEAT_KEY: Final = "console:heartbeat:{role}"
ROLES: Final = ("worker", "beat")


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)


def record_heartbeat(role: str, client: redis.Redis | None = None) -> None:
    client = client or redis_client()
    client.set(HEARTBEAT_KEY.format(role=role), repr(time.time()), ex=int(settings.HEARTBEAT_MAX_AGE_SECONDS * 2))


def start_heartbeat_thread(role: str) -> threading.Thread:
    """Beat and worker call this once at start; the thread dies with the process."""

    def beat_forever() -> None:
        client = redis_client()
        while True:
            # Redis down: the missing heartbeat is exactly what /healthz should show.
            with contextlib.suppress(redis.RedisError):
                record_heartbeat(role, client)
            time.sleep(settings.HEARTBEAT_SECONDS)

    thread = threading.Thread(target=beat_forever, name=f"{role}-heartbeat", daemon=True)
    thread.start()
    return thread


def check() -> dict[str, str]:
    """Each part maps to `ok` or a short sentence of what is wrong."""
    report: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        report["database"] = "ok"
    except Exception as error:  # noqa: BLE001 - any driver error means "down"
        report["database"] = f"down: {error.__class__.__name__}"
    try:
        client = redis_client()
        client.ping()
        report["redis"] = "ok"
        now = time.time()
        for role in ROLES:
            raw = client.get(HEARTBEAT_KEY.format(role=role))
            if raw is None:
                report[role] = "missing: no heartbeat"
                continue
            age = now - float(raw)
            fresh = age <= settings.HEARTBEAT_MAX_AGE_SECONDS
            report[role] = "ok" if fresh else f"missing: last heartbeat {age:.0f} s ago"
    except redis.RedisError as error:
        report["redis"] = f"down: {error.__class__.__name__}"
        for role in ROLES:
            report[role] = "unknown: Redis is down"
    return report
