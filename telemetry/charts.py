"""The Job page's chart of utilisation and memory per GPU, as a plain plotly figure (a dict),
handed to the page through `json_script` and drawn by static/console/charts.js; live samples
extend it (static/console/job_gpus.js).

Trace order is the contract with job_gpus.js: for n GPUs, traces 0..n-1 are utilisation and
n..2n-1 memory, in the order of `gpus` (the "<node id>:<gpu>" keys of the live changes). A GPU
that appears only later is added by the script as two more traces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from telemetry.live import moment
from telemetry.selectors import GpuSeries

# plotly's default colour cycle, so a GPU's utilisation and memory share a colour.
PALETTE: Final = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
# Points each trace keeps as live samples arrive (a day of minutes and an hour of samples).
MAX_POINTS: Final = 2_160
_GRID: Final = "rgba(128, 128, 128, 0.25)"
_MIB_PER_GIB: Final = 1024.0
_LEGEND_AT_MOST: Final = 8


def gib(mib: float) -> float:
    return round(mib / _MIB_PER_GIB, 2)


def job_gpu_figure(series: Sequence[GpuSeries]) -> dict[str, Any]:
    utilisation = []
    memory = []
    for index, entry in enumerate(series):
        colour = PALETTE[index % len(PALETTE)]
        x = [moment(at) for at in entry.at]
        utilisation.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": entry.label,
                "legendgroup": entry.key,
                "x": x,
                "y": entry.utilisation,
                "line": {"color": colour, "width": 1.5},
                "hovertemplate": f"{entry.label}: %{{y:.0f}} %<extra></extra>",
            }
        )
        memory.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"{entry.label} memory",
                "legendgroup": entry.key,
                "showlegend": False,
                "x": x,
                "y": [gib(used) for used in entry.memory_used_mib],
                "yaxis": "y2",
                "line": {"color": colour, "width": 1.5, "dash": "dot"},
                "hovertemplate": f"{entry.label}: %{{y:.1f}} of {gib(entry.memory_total_mib):g} GiB<extra></extra>",
            }
        )
    layout = {
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        "margin": {"l": 56, "r": 16, "t": 8, "b": 24},
        "xaxis": {"type": "date", "gridcolor": _GRID, "automargin": True, "anchor": "y2"},
        "yaxis": {
            "title": {"text": "Util %"},
            "automargin": True,
            "range": [0, 100],
            "domain": [0.55, 1],
            "gridcolor": _GRID,
        },
        "yaxis2": {
            "title": {"text": "GiB"},
            "automargin": True,
            "rangemode": "tozero",
            "domain": [0, 0.42],
            "gridcolor": _GRID,
        },
        "hovermode": "x unified",
        # A legend of more than 8 GPUs crowds the plot out at 390 px; hovering names each line.
        "showlegend": len(series) <= _LEGEND_AT_MOST,
        "legend": {"orientation": "h", "y": -0.2},
    }
    return {
        "data": [*utilisation, *memory],
        "layout": layout,
        "gpus": [entry.key for entry in series],
        "max_points": MAX_POINTS,
    }
