"""`create_all`: what `bulk_create` does for new rows of plain fields, without its per-value cost.

Django's `bulk_create` prepares every value through its field and the insert compiler (for a
burst of 1,000 jobs of 32 columns, 32,000 trips through `prepare_value`, `field_as_sql` and
`get_db_prep_save`): a third of `manage.py simulate`'s submit time (issue 26). Most values are
already what the driver takes (a str for a text column, a float for a float column), and for
those the preparation returns them unchanged; here they go through as they are, and only the
others (datetimes, JSON, enums, a value of another type) are prepared by their field, exactly as
`bulk_create` prepares them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, TypeVar

from django.db import connection, models

Model = TypeVar("Model", bound=models.Model)

# Per field class, the Python types its preparation returns as the driver stores them, by exact
# type (an enum member, a str subclass, is prepared by the field; an int for a float column is
# stored as the float, by the column's type). A field class not named here prepares every value.
# None is the SQL NULL for every field but JSON's (JSONField prepares it).
_UNCHANGED: tuple[tuple[type[models.Field[Any, Any]], tuple[type, ...]], ...] = (
    (models.JSONField, ()),
    (models.BooleanField, (bool,)),
    (models.FloatField, (float, int)),
    (models.IntegerField, (int,)),  # its small, big and positive kinds too
    (models.CharField, (str,)),
    (models.TextField, (str,)),
)


def _preparer(field: models.Field[Any, Any]) -> tuple[frozenset[type], Callable[[Any], Any]]:
    """The types the field stores unchanged, and its preparation of one value."""
    target: models.Field[Any, Any] = field.target_field if isinstance(field, models.ForeignKey) else field
    unchanged: tuple[type, ...] = () if isinstance(target, models.JSONField) else (type(None),)
    for field_class, types in _UNCHANGED:
        if isinstance(target, field_class) and not isinstance(target, models.AutoField):
            unchanged = (*unchanged, *types)
            break
    if isinstance(field, models.ForeignKey) and isinstance(target, models.AutoField):
        unchanged = (int, type(None))  # a related row's id, as the related object gave it

    def prepare(value: Any) -> Any:
        if type(value) in unchanged:
            return value
        return field.get_db_prep_save(value, connection)

    return frozenset(unchanged), prepare


def _rows(objects: Sequence[models.Model], fields: list[models.Field[Any, Any]]) -> list[tuple[Any, ...]]:
    """Each object's values for `fields`, as the driver takes them: `pre_save`, then the field's
    preparation where a value's type needs it. Column by column: one C-level read of each object
    (a field whose `pre_save` is Field's own returns the attribute) and one look at the types of a
    column, instead of two Python calls per value (S3's 10,000 jobs of 33 columns: 660,000)."""
    read = attrgetter(*(field.attname for field in fields))
    values = [read(obj) for obj in objects] if len(fields) > 1 else [(read(obj),) for obj in objects]
    columns: list[Sequence[Any]] = list(zip(*values, strict=True)) if values else [() for _ in fields]
    for at, field in enumerate(fields):
        if type(field).pre_save is not models.Field.pre_save:  # auto_now and the like set the value
            columns[at] = [field.pre_save(obj, True) for obj in objects]
        unchanged, prepare = _preparer(field)
        if not set(map(type, columns[at])) <= unchanged:
            columns[at] = _prepared(columns[at], prepare)
    return list(zip(*columns, strict=True))


def _parameters_per_statement() -> int:
    """How many parameters one statement may bind. Django's SQLite figure (999) is the oldest
    builds' compile-time limit; the connection says its own (250,000 in the driver here), and a
    burst of 1,000 jobs goes in one statement instead of 33 of 31 rows (issue 26)."""
    if connection.vendor == "sqlite":
        connection.ensure_connection()
        return int(connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    return connection.features.max_query_params or 65535


def _prepared(column: Sequence[Any], prepare: Callable[[Any], Any]) -> list[Any]:
    """The column's values prepared, each distinct object once: a batch's rows often share one
    (a bulk submission's jobs all carry the batch's `submitted_at`, a datetime prepared through
    time-zone conversion and formatting, 10,000 times for S3's bursts). By identity, not
    equality, so that values equal but prepared differently (1 and 1.0, True and 1) stay apart;
    the column holds every object for the call, so no id is reused while the memo lives."""
    memo: dict[int, Any] = {}
    prepared: list[Any] = []
    for value in column:
        key = id(value)
        if key not in memo:
            memo[key] = prepare(value)
        prepared.append(memo[key])
    return prepared


def create_all(objects: Sequence[Model]) -> list[Model]:
    """INSERT the new objects, all of one model with an auto-incremented id, in as few statements
    as the database takes, and give each its id, as `bulk_create` does. No signals (neither does
    `bulk_create`). Falls back to `bulk_create` where the database cannot return inserted ids."""
    if not objects:
        return list(objects)
    model = type(objects[0])
    meta = model._meta
    if not connection.features.can_return_rows_from_bulk_insert or not isinstance(meta.pk, models.AutoField):
        return model._default_manager.bulk_create(objects)
    fields = [field for field in meta.concrete_fields if not field.primary_key]
    rows = _rows(objects, fields)
    qn = connection.ops.quote_name
    head = f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(field.column) for field in fields)}) VALUES "
    row_sql = f"({', '.join(['%s'] * len(fields))})"
    per_statement = max(1, _parameters_per_statement() // len(fields))
    ids: list[int] = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            batch = rows[start : start + per_statement]
            cursor.execute(
                f"{head}{', '.join([row_sql] * len(batch))} RETURNING {qn(meta.pk.column)}",
                [value for row in batch for value in row],
            )
            # Ids rise in the order the rows were inserted, whatever order RETURNING gives them in.
            ids.extend(sorted(row[0] for row in cursor.fetchall()))
    for obj, pk in zip(objects, ids, strict=True):
        obj.pk = pk
        obj._state.adding = False
        obj._state.db = connection.alias
    return list(objects)
