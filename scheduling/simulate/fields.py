"""Reading the values of a scenario file: each reader names the object and the field of a
value it refuses (ScenarioError), so parse.py states only what a scenario holds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from scheduling.simulate.scenario import QUEUE_POLICIES, SETTABLE_QUOTA_FIELDS, ScenarioError, show

# The types each check takes, as tuples: `isinstance(value, int | float)` builds the union at
# every call, three times as slow (a 10,000-job file makes 100,000 such checks).
_NUMBERS = (int, float)
_TEXTS = (str, int, float)


# ---------------------------------------------------------------------------------------------
# Field checks: each names the field and shows the value it got
def _mapping(value: object, where: str, field_name: str | None, expected: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ScenarioError(where, field_name, f"must be {expected}, got {show(value)}")
    return value


def _list(value: object, where: str, field_name: str, *, required: bool) -> list[Any]:
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise ScenarioError(where, field_name, f"must be a list, got {show(value)}")
    return value


def _known_keys(entry: Mapping[str, Any], where: str, known: Sequence[str]) -> None:
    for key in entry:
        if key not in known:
            raise ScenarioError(where, str(key), f"unknown field; known: {', '.join(known)}")


def _string(value: object, where: str, field_name: str, *, allow_empty: bool = False) -> str:
    if value is None and not allow_empty:
        raise ScenarioError(where, field_name, "is required")
    if isinstance(value, bool) or not isinstance(value, _TEXTS):
        raise ScenarioError(where, field_name, f"must be a string, got {show(value)}")
    text = str(value)
    if not text and not allow_empty:
        raise ScenarioError(where, field_name, "must not be empty")
    return text


def _number(value: object, where: str, field_name: str) -> float:
    """A finite amount ≥ 0 (GPU, CPU, memory, seconds): negative amounts are refused here."""
    if value is None:
        raise ScenarioError(where, field_name, "is required")
    if isinstance(value, bool) or not isinstance(value, _NUMBERS):
        raise ScenarioError(where, field_name, f"must be a number, got {show(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ScenarioError(where, field_name, f"must be a finite number, got {show(value)}")
    if number < 0:
        raise ScenarioError(where, field_name, f"must be ≥ 0, got {show(number)}")
    return number


def _integer(value: object, where: str, field_name: str, *, minimum: int) -> int:
    if value is None:
        raise ScenarioError(where, field_name, "is required")
    if isinstance(value, bool) or not isinstance(value, _NUMBERS) or not float(value).is_integer():
        raise ScenarioError(where, field_name, f"must be a whole number, got {show(value)}")
    if value < minimum:
        raise ScenarioError(where, field_name, f"must be ≥ {minimum}, got {show(value)}")
    return int(value)


def _signed_integer(value: object, where: str, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, _NUMBERS) or not float(value).is_integer():
        raise ScenarioError(where, field_name, f"must be a whole number, got {show(value)}")
    return int(value)


def _boolean(value: object, where: str, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise ScenarioError(where, field_name, f"must be true or false, got {show(value)}")
    return value


def _choice(value: object, where: str, field_name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ScenarioError(where, field_name, f"must be one of {', '.join(choices)}, got {show(value)}")
    return str(value)


def _optional(entry: Mapping[str, Any], key: str, convert: Any) -> Any:
    value = entry.get(key)
    return None if value is None else convert(value)


def _quota_fields(entry: Mapping[str, Any], where: str, *, nullable: bool = False) -> dict[str, Any]:
    """The quota fields present in `entry`, typed; `nullable` lets a set step clear limit/weight."""
    fields: dict[str, Any] = {}
    clearable = ("cpu", "memory_gib", "limit", "cpu_limit", "memory_gib_limit", "weight", "min_runtime_seconds")
    for key in SETTABLE_QUOTA_FIELDS:
        if key not in entry:
            continue
        value = entry[key]
        if value is None:
            if not (nullable and key in clearable):
                raise ScenarioError(where, key, "must not be empty")
            fields[key] = None
        elif key in ("gpus", "cpu", "memory_gib", "limit", "cpu_limit", "memory_gib_limit", "weight"):
            fields[key] = _number(value, where, key)
        elif key == "rank":
            fields[key] = _signed_integer(value, where, key)
        elif key == "min_runtime_seconds":
            fields[key] = _integer(value, where, key, minimum=0)
        elif key == "queue_policy":
            fields[key] = _choice(value, where, key, QUEUE_POLICIES)
        else:
            fields[key] = _boolean(value, where, key)
    return fields
