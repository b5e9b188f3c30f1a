"""`{% plotly_placeholder_ids %}`: the ids static/console/charts.js reserves before plotly.js loads,
so that plotly.js injects no <style> element the Content-Security-Policy would refuse."""

from __future__ import annotations

from django import template

from console.plotly_assets import placeholder_ids

register = template.Library()


@register.simple_tag
def plotly_placeholder_ids() -> str:
    return " ".join(placeholder_ids())
