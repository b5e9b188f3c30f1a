"""`utilities.inserts.create_all` writes the rows `bulk_create` writes, and gives each object its id
in order, however many statements the rows take (SQLite takes 999 values a statement)."""

from __future__ import annotations

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


@pytest.mark.django_db
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
