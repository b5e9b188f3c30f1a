"""`utilities.inserts.create_all` writes the rows `bulk_create` writes, and gives each object its id
in order, however many statements the rows take (as many values a statement as the SQLite
connection allows: lowered here to the oldest builds' 999, so that the rows take three)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from quotas.models import AuditRecord
from utilities import inserts


def records(count: int) -> list[AuditRecord]:
    # Values of every kind a field prepares: a str, an int for a text column, JSON and its absence.
    return [
        AuditRecord(
            action="job.submit",
            object_type="job",
            object_id=number,  # an int, as a careless caller gives it
            object_repr=f"job {number}",
            before=None,
            after={"gpus": number, "tags": ["a", number]},
        )
        for number in range(count)
    ]


def stored() -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT action, object_type, object_id, object_repr, before, after FROM quotas_auditrecord")
        return sorted(cursor.fetchall(), key=repr)


@pytest.fixture
def old_sqlite_limit(db: None) -> Iterator[None]:
    """The connection binds at most 999 values a statement, as the oldest SQLite builds."""
    if connection.vendor != "sqlite":
        yield
        return
    connection.ensure_connection()
    driver = connection.connection
    previous = driver.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    try:
        yield
    finally:
        driver.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, previous)


@pytest.mark.usefixtures("old_sqlite_limit")
def test_the_rows_and_ids_are_bulk_creates() -> None:
    count = 2 * (999 // 8) + 5  # three statements on SQLite
    AuditRecord.objects.bulk_create(records(count))
    by_bulk_create = stored()
    AuditRecord.objects.all().delete()

    created = inserts.create_all(records(count))

    assert stored() == by_bulk_create
    assert [record.pk for record in created] == list(AuditRecord.objects.order_by("id").values_list("id", flat=True))
    assert [record.object_repr for record in created] == [f"job {number}" for number in range(count)]
    assert all(not record._state.adding and record.at is not None for record in created)


@pytest.mark.django_db
def test_nothing_to_create_writes_nothing() -> None:
    assert inserts.create_all([]) == []
    assert not AuditRecord.objects.exists()


@pytest.mark.django_db
def test_a_value_shared_by_rows_is_stored_as_bulk_create_stores_it() -> None:
    # One object in many rows is prepared once; values equal but stored apart (1, 1.0, True) stay apart.
    shared = {"gpus": 2}
    afters: list[Any] = [shared, 1, 1.0, True, shared, 1.0, shared]

    def batch() -> list[AuditRecord]:
        return [AuditRecord(action="job.submit", object_type="job", after=after) for after in afters]

    AuditRecord.objects.bulk_create(batch())
    by_bulk_create = stored()
    AuditRecord.objects.all().delete()

    inserts.create_all(batch())

    assert stored() == by_bulk_create
    assert [after for *_, after in stored()].count('{"gpus": 2}') == 3
