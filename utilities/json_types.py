"""JSON bodies are typed as the schema says: DRF's fields also take `"5"` for a number, `0` for
false and `{}` for a list, so a client's mistake would pass silently and the published schema
would not be what the server enforces. Every request serializer mixes this in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

# (field classes, JSON kinds accepted, the words for the error); first match wins, so the
# boolean row comes before the number rows (a JSON true is a Python int).
EXPECTED_KINDS: list[tuple[tuple[type[serializers.Field[Any, Any, Any, Any]], ...], tuple[type, ...], str]] = [
    ((serializers.BooleanField,), (bool,), "true or false"),
    ((serializers.IntegerField, serializers.FloatField, serializers.DecimalField), (int, float), "a number"),
    ((serializers.ChoiceField, serializers.CharField, serializers.SlugRelatedField), (str,), "a string"),
    ((serializers.ListField, serializers.ManyRelatedField, serializers.ListSerializer), (list,), "a list"),
    ((serializers.DictField, serializers.Serializer), (dict,), "an object"),
]


def json_kind(value: Any) -> str:
    """The JSON name of a parsed value, as a client would call it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def kind_error(name: str, field: serializers.Field[Any, Any, Any, Any], value: Any) -> str | None:
    """A sentence when `value` is not the JSON kind `field` takes, else None."""
    for field_classes, kinds, words in EXPECTED_KINDS:
        if isinstance(field, field_classes):
            accepted = isinstance(value, kinds) and not (bool not in kinds and isinstance(value, bool))
            return None if accepted else f"{name} must be {words}, got {json_kind(value)}."
    return None


def holds_nul(value: Any) -> bool:
    """Whether a string anywhere in `value` holds the NUL character, which PostgreSQL cannot
    store or even compare (a lookup by such a name raised DataError: a 500 the fuzzer found)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(holds_nul(key) or holds_nul(inner) for key, inner in value.items())
    if isinstance(value, list):
        return any(holds_nul(inner) for inner in value)
    return False


class JsonTypedMixin:
    # Refuse, field by field, a value of the wrong JSON kind before DRF coerces it. (A comment,
    # not a docstring: drf-spectacular would publish it as every serializer's description.)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            fields: Mapping[str, serializers.Field[Any, Any, Any, Any]] = self.fields  # type: ignore[attr-defined]
            errors = {
                name: [message]
                for name, field in fields.items()
                if not field.read_only
                and name in data
                and data[name] is not None
                and (message := kind_error(name, field, data[name])) is not None
            }
            errors |= {
                name: [f"{name} must not contain the NUL character (\\u0000)."]
                for name, field in fields.items()
                if not field.read_only and name in data and name not in errors and holds_nul(data[name])
            }
            if errors:
                raise serializers.ValidationError(errors)
        return super().to_internal_value(data)  # type: ignore[misc]
