"""Migration tests' shared steps: migrate the test database to a target, and the fixture that
brings it back to the latest schema (the tests after a migration test on the same xdist worker
share its database; a later migration's columns were missing there once)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

Target = list[tuple[str, str]]


def migrate(target: Target) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor


@pytest.fixture
def back_to_the_latest_schema() -> Iterator[None]:
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    migrate(executor.loader.graph.leaf_nodes())
