"""Printing what the API answered: an aligned table for people, JSON or YAML for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click
import yaml

FORMATS = ("table", "wide", "json", "yaml")


@dataclass(frozen=True, slots=True)
class Column:
    title: str
    cell: Callable[[dict[str, Any]], object]
    wide_only: bool = False


def gpus(amount: object) -> str:
    """GPU amounts as a person writes them: 8, 0.5, never 8.0."""
    if isinstance(amount, float) and amount.is_integer():
        return str(int(amount))
    return "-" if amount is None else str(amount)


def moment(stamp: object) -> str | None:
    """An ISO timestamp from the API, to the second, as a person reads it (UTC)."""
    return None if not isinstance(stamp, str) else stamp[:19].replace("T", " ")


def emit(records: Any, *, output: str, columns: Sequence[Column] = ()) -> None:
    """Print `records` (one object or a list) in the chosen format; tables need `columns`."""
    if output == "json":
        click.echo(json.dumps(records, indent=2, ensure_ascii=False))
    elif output == "yaml":
        click.echo(yaml.safe_dump(records, sort_keys=False, allow_unicode=True), nl=False)
    else:
        rows = records if isinstance(records, list) else [records]
        shown = [column for column in columns if output == "wide" or not column.wide_only]
        click.echo(table([column.title for column in shown], [[_text(c.cell(row)) for c in shown] for row in rows]))


def table(titles: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, as kubectl prints them."""
    widths = [max([len(title), *(len(row[index]) for row in rows)]) for index, title in enumerate(titles)]
    padded = ("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)) for row in [titles, *rows])
    return "\n".join(line.rstrip() for line in padded)


def _text(value: object) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(_text(item) for item in value) or "-"
    return gpus(value) if isinstance(value, float) else str(value)
