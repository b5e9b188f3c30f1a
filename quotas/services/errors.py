"""Messages: collected per field, given in the shape of API errors and dry-run answers, with the
amounts they quote written the same way everywhere."""

from __future__ import annotations

from collections import defaultdict

from django.core.exceptions import ValidationError

from quotas.services.common import _TOLERANCE, RESOURCES
from utilities.validation import error_messages as error_messages  # the services' answers use it


class _Errors:
    """Collects messages per field, so one answer names every broken rule at once."""

    def __init__(self) -> None:
        self.by_field: dict[str, list[str]] = defaultdict(list)

    def add(self, field: str, message: str) -> None:
        if message not in self.by_field[field]:
            self.by_field[field].append(message)

    def raise_if_any(self) -> None:
        if self.by_field:
            raise ValidationError(dict(self.by_field))


def _number(amount: float | None) -> str:
    """48.0 reads as 48; fractions keep up to three decimals."""
    if amount is None:
        return "none"
    if abs(amount - round(amount)) < _TOLERANCE:
        return str(round(amount))
    return f"{amount:.3f}".rstrip("0").rstrip(".")


def _amount(amount: float, unit: str) -> str:
    if unit == "GPUs" and abs(amount - 1) < _TOLERANCE:
        return "1 GPU"
    return f"{_number(amount)} {unit}"


def _unit(field: str) -> str:
    return dict(RESOURCES)[field]
