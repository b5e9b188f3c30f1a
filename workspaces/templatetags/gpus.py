"""How the workspace pages write amounts: 16 not 16.0, 0.5, 1,234.5."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def gpu_hours(value: float | None) -> str:
    """To a tenth of an hour, without a trailing .0; thousands separated."""
    if value is None:
        return "—"
    amount = round(float(value), 1)
    text = f"{amount if amount else 0.0:,.1f}"  # never "-0"
    return text[:-2] if text.endswith(".0") else text
