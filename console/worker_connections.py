"""The worker keeps its database connections across tasks (issue 25).

Celery's Django fix-up closes every database connection at each task's start and end, and in a
prefork worker it closes the whole psycopg pool with them (celery/celery#10554, Celery 5.7): each
scheduling cycle and executor tick then opened a new PostgreSQL connection, a server process with
cold catalogue caches (0.11 a job in the drain benchmark). This fix-up is Celery's own, installed
through `Celery(fixups=...)`, with the task hooks replaced: a task's connections go back to the
process's pool at its end and come out of it again in the next task, as a web request's do
(Django's request signals, CONN_MAX_AGE 0). The pool stays open; psycopg's `max_idle` and
`max_lifetime` still retire its connections.

A kept connection must not carry a task's session state into the next task. The one session state
the console takes is the cycle's advisory lock (scheduling.lock); the cycle releases it, but a
release that could not run (an error between lock and release) would, on a kept connection, hold
it for good, and every later cycle would find the lock busy. So each task's end on PostgreSQL drops
every advisory lock its connection still holds, and a connection that cannot be cleared so (left
inside a transaction, or failing the statement) is closed outright, which the server's lock release
on disconnect then covers.

Everything else is the fix-up's as Celery ships it: the forked child's inherited connections and
pool are closed before its first task, and eagerly applied tasks are left alone.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

import celery.fixups.django as celery_fixup
from celery.fixups.django import DjangoFixup
from django.db import DatabaseError, InterfaceError

if TYPE_CHECKING:
    from celery import Celery, Task
    from django.db.backends.base.base import BaseDatabaseWrapper

# The fix-up's worker half: celery-types has no stub for it.
DjangoWorkerFixup: Any = celery_fixup.DjangoWorkerFixup  # type: ignore[attr-defined]

# Releases every session-level advisory lock of the connection; a no-op (one round trip) when none.
_DROP_SESSION_LOCKS = "SELECT pg_advisory_unlock_all()"


class TaskConnections(DjangoWorkerFixup):  # type: ignore[misc]  # an untyped base (above)
    """The fix-up's worker half, with connections handed back to the pool between tasks."""

    def on_task_prerun(self, sender: Task[Any, Any], **kwargs: Any) -> None:
        if not getattr(sender.request, "is_eager", False):
            self.hand_back_connections()

    def on_task_postrun(self, sender: Task[Any, Any], **kwargs: Any) -> None:
        if not getattr(sender.request, "is_eager", False):
            for connection in self._db.connections.all(initialized_only=True):
                drop_session_locks(connection)
            self.hand_back_connections()
            self.close_cache()

    def hand_back_connections(self) -> None:
        """What Django does around a request: a connection that errored and no longer answers is
        closed; one past CONN_MAX_AGE (0: any) goes back to the pool, or closes without one."""
        for connection in self._db.connections.all(initialized_only=True):
            connection.close_if_unusable_or_obsolete()


def drop_session_locks(connection: BaseDatabaseWrapper) -> None:
    """Release the advisory locks a task left on its PostgreSQL connection, or close it outright."""
    if connection.vendor != "postgresql" or connection.connection is None:
        return
    if not connection.in_atomic_block and connection.get_autocommit():
        try:
            with connection.cursor() as cursor:
                cursor.execute(_DROP_SESSION_LOCKS)
            return
        except (DatabaseError, InterfaceError):
            pass
    # Still inside a transaction, or the statement failed: the pool would keep this connection
    # (rolled back, its session locks still held). Closed here, the server drops them, and the
    # pool discards a closed connection handed back to it.
    with contextlib.suppress(Exception):  # the client's own close: nothing to do if it fails
        connection.connection.close()
    with contextlib.suppress(DatabaseError, InterfaceError):
        connection.close()


class KeptConnectionsFixup(DjangoFixup):
    """Celery's Django fix-up whose worker half is TaskConnections."""

    _worker_fixup: DjangoWorkerFixup | None

    @property
    def worker_fixup(self) -> DjangoWorkerFixup:
        if self._worker_fixup is None:
            self._worker_fixup = TaskConnections(self.app)
        return self._worker_fixup

    @worker_fixup.setter
    def worker_fixup(self, value: DjangoWorkerFixup) -> None:
        self._worker_fixup = value


def fixup(app: Celery) -> DjangoFixup | None:
    """Celery's fix-up entry point (`Celery(fixups=["console.worker_connections:fixup"])`)."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return None
    kept = KeptConnectionsFixup(app)
    kept.install()
    return kept
