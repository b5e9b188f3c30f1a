"""`{{ value|gpus }}`: a GPU figure exactly as `floatformat:"-3"` writes it (8, 0.500, 0.125), at a
fraction of its cost: the quota list writes five of them a row, for a thousand rows."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def gpus(value: float | int | None) -> str:
    if value is None:
        return ""
    number = float(value)
    if number.is_integer():
        return str(int(number))
    return f"{number:.3f}"
