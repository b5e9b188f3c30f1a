"""Refusals in one shape: a ValidationError as {field: [messages]}, for API errors, dry-run
answers and the page kit, which puts each message beside its field."""

from __future__ import annotations

from django.core.exceptions import ValidationError


def error_messages(error: ValidationError) -> dict[str, list[str]]:
    """A ValidationError as {field: [messages]}, the shape of API errors and dry-run answers."""
    if hasattr(error, "error_dict"):
        return {field: [str(message) for message in messages] for field, messages in error.message_dict.items()}
    return {"non_field_errors": [str(message) for message in error.messages]}
