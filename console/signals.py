"""Celery signal hooks: worker and beat start their heartbeat threads."""

from __future__ import annotations

from typing import Any

from celery.signals import beat_init, worker_ready

# console.health is imported by the handlers, not here: every process loads this module at
# start, and health's Redis client costs 35 ms of the start of those that never beat
# (`manage.py simulate`, the web process).


@worker_ready.connect
def start_worker_heartbeat(**kwargs: Any) -> None:
    from console.health import start_heartbeat_thread

    start_heartbeat_thread("worker")


@beat_init.connect
def start_beat_heartbeat(**kwargs: Any) -> None:
    from console.health import start_heartbeat_thread

    start_heartbeat_thread("beat")
