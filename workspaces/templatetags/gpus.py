"""How the workspace pages write amounts: 16 not 16.0, 0.5, 1,234.5."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def gpu_hours(value: float | None) -> str:
    """To a hundredth of an hour, without trailing zeros; thousands separated."""
    if value is None:
        return "—"
    amount = round(float(value), 2)
    text = f"{amount if amount else 0.0:,.2f}"  # never "-0"
    return text.rstrip("0").rstrip(".")
