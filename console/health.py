"""Liveness of the parts the console needs: database, Redis, a Celery worker and beat.

Worker and beat each write a heartbeat key into Redis from a background thread (see
`console.signals`); /healthz reads their age. The launcher also writes an outage note when it
sees one of them exit, so /healthz turns red at once instead of a minute later, and stays red
until the restarted process writes a heartbeat newer than the note.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Final

import redis
from django.conf import settings
from django.db import connection

HEARTBEAT_KEY: Final = "console:heartbeat:{role}"
OUTAGE_KEY: Final = "console:outage:{role}"
ROLES: Final = ("worker", "beat")


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)


def record_heartbeat(role: str, client: redis.Redis | None = None) -> None:
    client = client or redis_client()
    client.set(HEARTBEAT_KEY.format(role=role), repr(time.time()), ex=int(settings.HEARTBEAT_MAX_AGE_SECONDS * 2))


def record_outage(role: str, sentence: str, client: redis.Redis | None = None) -> None:
    """Say why `role` is down; /healthz shows it until a heartbeat newer than this note arrives."""
    client = client or redis_client()
    note = json.dumps({"at": time.time(), "sentence": sentence})
    # Expires with the heartbeat: if nobody restarts the process, "no heartbeat" is the truth left.
    client.set(OUTAGE_KEY.format(role=role), note, ex=int(settings.HEARTBEAT_MAX_AGE_SECONDS * 2))


def _role_state(heartbeat: bytes | str | None, outage: bytes | str | None, now: float) -> str:
    beat_at = float(heartbeat) if heartbeat is not None else None
    if outage is not None:
        note = json.loads(outage)
        if beat_at is None or beat_at <= note["at"]:
            return f"missing: {note['sentence']}"
    if beat_at is None:
        return "missing: no heartbeat"
    age = now - beat_at
    return "ok" if age <= settings.HEARTBEAT_MAX_AGE_SECONDS else f"missing: last heartbeat {age:.0f} s ago"


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
            heartbeat, outage = client.mget([HEARTBEAT_KEY.format(role=role), OUTAGE_KEY.format(role=role)])
            report[role] = _role_state(heartbeat, outage, now)
    except redis.RedisError as error:
        report["redis"] = f"down: {error.__class__.__name__}"
        for role in ROLES:
            report[role] = "unknown: Redis is down"
    return report
