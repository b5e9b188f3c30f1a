"""The Django project: settings, URLs, ASGI, the Celery app and the process launcher."""

from console.celery import app as celery_app

__all__ = ["celery_app"]
