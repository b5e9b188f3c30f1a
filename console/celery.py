"""The Celery app: worker and beat read their settings from Django's (CELERY_*)."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

# Celery's Django fix-up, with the worker's connections kept across tasks (console.worker_connections).
app = Celery("console", fixups=["console.worker_connections:fixup"])
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _yield_to_the_web(**kwargs: Any) -> None:
    """The worker's processes (the cycles, telemetry) run at WORKER_NICENESS (5): on a machine
    that runs everything (`bin/run`), the web processes answer people and agents first, and the
    cycles take the cores they leave. Where the worker has its own machine this changes nothing."""
    from django.conf import settings

    os.nice(settings.WORKER_NICENESS)
