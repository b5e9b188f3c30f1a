"""Set-based writes for the cycle's commit: thousands of rows in a handful of statements.

A cycle of S3 admits two thousand jobs and rewrites the pending reason of eight thousand more.
Django's `bulk_create` and per-row parameters spend more time in Python than the database
spends writing: every value is prepared by its field and quoted by the driver one by one. Here
the rows travel as one JSON document, serialized at C speed, and PostgreSQL unpacks it with
`json_to_recordset`, typed by the model's own columns. Elsewhere (SQLite) one `executemany` of a
plain parameterised statement runs at C speed already.

Values are plain Python: numbers, strings, None, datetimes (aware, UTC) and, for JSON columns,
lists or dicts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection, models


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a column value")


def _typed(model: type[models.Model], columns: Sequence[str]) -> list[str]:
    """`column type` for each column, typed as the model stores it (a column definition list)."""
    qn = connection.ops.quote_name
    typed = []
    for column in columns:
        field = model._meta.get_field(column)
        assert isinstance(field, models.Field)  # a concrete column, never a relation's reverse side
        typed.append(f"{qn(column)} {field.db_type(connection)}")
    return typed


def _document(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return json.dumps([dict(zip(columns, row, strict=True)) for row in rows], default=_json_default)


def _plain(model: type[models.Model], columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Rows as a driver without JSON unpacking takes them: datetimes and JSON columns as Django
    writes them (for SQLite: naive UTC text, JSON text)."""
    adapt = connection.ops.adapt_datetimefield_value
    as_json = [isinstance(model._meta.get_field(column), models.JSONField) for column in columns]
    return [
        tuple(
            json.dumps(value) if is_json else adapt(value) if isinstance(value, datetime) else value
            for value, is_json in zip(row, as_json, strict=True)
        )
        for row in rows
    ]


def insert(model: type[models.Model], columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """INSERT the rows (one value per column, in order) in one statement. No ids come back.

    A column left out gets its field's default, as `bulk_create` would give it (Django's
    defaults live in Python, not in the table).
    """
    if not rows:
        return
    defaults = [
        (field.column, field.get_default())
        for field in model._meta.concrete_fields
        if field.column not in columns and not field.primary_key and field.has_default()
    ]
    if defaults:
        columns = [*columns, *(column for column, _value in defaults)]
        rows = [(*row, *(value for _column, value in defaults)) for row in rows]
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    names = ", ".join(qn(column) for column in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # In the rows' order, so that ids (and the order of events at the same instant) follow it.
            typed = ", ".join(_typed(model, columns))
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT {names} FROM ROWS FROM (json_to_recordset(%s::json) "
                f"AS ({typed})) WITH ORDINALITY AS v({names}, row_number) ORDER BY row_number",
                [_document(columns, rows)],
            )
            return
        placeholders = ", ".join("%s" for _ in columns)
        cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({placeholders})", _plain(model, columns, rows))


def update_as_seen(
    model: type[models.Model],
    *,
    state: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    fixed: Sequence[tuple[str, str, tuple[Any, ...]]] = (),
) -> int:
    """Per row (id, seen revision, *one value per column): set those columns, and each `fixed`
    (column, SQL expression, its parameters), on the row only while it is in `state` at the seen
    revision. Returns how many rows changed."""
    if not rows:
        return 0
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    fixed_sql = [f"{qn(column)} = {expression}" for column, expression, _params in fixed]
    fixed_params = [param for _column, _expression, params in fixed for param in params]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Named apart from the table's columns, so that a fixed expression such as
            # "revision + 1" means the row's own value.
            typed = ", ".join(["seen_id bigint", "seen_revision integer", *_typed(model, columns)])
            assignments = ", ".join([*(f"{qn(column)} = v.{qn(column)}" for column in columns), *fixed_sql])
            cursor.execute(
                f"UPDATE {table} AS j SET {assignments} FROM json_to_recordset(%s::json) AS v({typed}) "
                f"WHERE j.{qn('id')} = v.seen_id AND j.{qn('state')} = %s AND j.{qn('revision')} = v.seen_revision",
                [*fixed_params, _document(("seen_id", "seen_revision", *columns), rows), state],
            )
            return int(cursor.rowcount)
        adapt = connection.ops.adapt_datetimefield_value
        fixed_params = [adapt(param) if isinstance(param, datetime) else param for param in fixed_params]
        values = _plain(model, columns, [row[2:] for row in rows])
        assignments = ", ".join([*(f"{qn(column)} = %s" for column in columns), *fixed_sql])
        cursor.executemany(
            f"UPDATE {table} SET {assignments} WHERE {qn('id')} = %s AND {qn('state')} = %s AND {qn('revision')} = %s",
            [(*value, *fixed_params, row[0], state, row[1]) for value, row in zip(values, rows, strict=True)],
        )
        return int(cursor.rowcount)


def update_as_read(
    model: type[models.Model], *, state: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> list[tuple[int, str]]:
    """PostgreSQL only. Per row (id, seen revision, seen row version, *one value per column): set
    those columns on the row only while it is in `state` at the seen revision and still the very
    version read (`xmin::text || ctid::text`, scheduling.snapshot). Returns (id, new version) of
    each row written."""
    if not rows:
        return []
    qn = connection.ops.quote_name
    table = qn(model._meta.db_table)
    typed = ", ".join(["seen_id bigint", "seen_revision integer", "seen_version text", *_typed(model, columns)])
    assignments = ", ".join(f"{qn(column)} = v.{qn(column)}" for column in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS j SET {assignments} FROM json_to_recordset(%s::json) AS v({typed}) "
            f"WHERE j.{qn('id')} = v.seen_id AND j.{qn('state')} = %s AND j.{qn('revision')} = v.seen_revision "
            "AND j.xmin::text || j.ctid::text = v.seen_version "
            f"RETURNING j.{qn('id')}, j.xmin::text || j.ctid::text",
            [_document(("seen_id", "seen_revision", "seen_version", *columns), rows), state],
        )
        written: list[tuple[int, str]] = cursor.fetchall()
    return written
