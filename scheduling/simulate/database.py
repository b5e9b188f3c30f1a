"""The private database a simulation plays on: the console's own is never opened."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from uuid import uuid4

from django.apps import apps
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.utils import ConnectionHandler
from django.test.utils import override_settings

from scheduling import snapshot_moves
from scheduling.cycle import ensure_fence


@contextmanager
def throwaway_database() -> Iterator[None]:
    """Point the default connection at a private in-memory SQLite database for the block.

    The console's own database (SQLite file or PostgreSQL) is never opened. Cycle triggers
    are off (the runner converges after each step itself) and no websocket event is
    published, so neither the console's worker nor its live pages hear of simulated jobs.
    """
    alias = DEFAULT_DB_ALIAS
    previous_settings = connections.settings[alias]
    previous_connection = connections[alias]
    private = ConnectionHandler().configure_settings(
        {
            alias: {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": f"file:simulate-{uuid4().hex}?mode=memory&cache=shared",
            }
        }
    )[alias]
    connections.settings[alias] = private
    connection = connections.create_connection(alias)
    connections[alias] = connection
    try:
        # DEBUG off: with it on (the development default), Django's cursor kept every statement of
        # the run and read each back with its parameters quoted by SQLite (last_executed_query), a
        # query of its own per 999 values: a burst's insert of 1,000 jobs (33,000 values) took
        # twice as long. Nothing reads the log of a connection thrown away at the end.
        with override_settings(SCHEDULER_TRIGGER="none", SCHEDULER_PUBLISH_EVENTS=False, DEBUG=False):
            # Tables straight from the models, as Django's test runner does with MIGRATE off:
            # 0.3 s instead of ~3 s of rendering every migration's state. post_migrate still
            # runs (content types, permissions); the one data migration (the fence row) is
            # ensure_fence's to repeat.
            with override_settings(MIGRATION_MODULES={app.label: None for app in apps.get_app_configs()}):
                call_command("migrate", database=alias, run_syncdb=True, verbosity=0, interactive=False)
            ensure_fence()
            # Every write is this process's: the snapshot reads only the jobs that moved.
            snapshot_moves.track_moves()
            yield
    finally:
        snapshot_moves.stop_tracking(drop=False)  # the database goes with its log
        connection.close()
        connections[alias] = previous_connection
        connections.settings[alias] = previous_settings
