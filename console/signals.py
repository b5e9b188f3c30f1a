"""Celery signal hooks: worker and beat start their heartbeat threads."""

from __future__ import annotations

from typing import Any

from celery.signals import beat_init, worker_ready

from console.health import start_heartbeat_thread


@worker_ready.connect
def start_worker_heartbeat(**kwargs: Any) -> None:
    start_heartbeat_thread("worker")


@beat_init.connect
def start_beat_heartbeat(**kwargs: Any) -> None:
    start_heartbeat_thread("beat")
