"""Deterministic synthetic GPU utilisation for the simulated executor (docs/telemetry.md).

A job's curve depends only on its id, its kind, the GPU index and the time, so a page, a test and
a benchmark replay the same figures on any machine. No Django here: plain functions of numbers.

- training: high and steady, 85-95 %: a slow wave (a period of 5 to 15 minutes, per job) around
  90 %, with a little jitter per 5-second slot. Memory: 80-92 % of the GPU, fixed per job and GPU
  (a training job allocates its working set once).
- notebook: bursty. Time is cut into 30-second slots; in about one slot of four the user runs a
  cell and the GPU is 55-100 % busy, otherwise 0-8 %. Memory: 10-50 %, redrawn every 5 minutes
  (a kernel loads and frees tensors).
- inference: follows a daily sine in UTC, lowest at 02:00 and highest at 14:00 (each job's peak
  moved by up to 2 h either way), 15-85 %, with jitter of a few points. Memory: 35-55 %, fixed (the
  model's weights).
- a GPU no job holds: 0 %, no memory used.

A GPU shared by fractional jobs adds each holder's curve times its fraction (capped at 100 %).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

TRAINING: Final = "training"
NOTEBOOK: Final = "notebook"
INFERENCE: Final = "inference"

_MASK: Final = (1 << 64) - 1
_DAY: Final = 86_400.0


def _mix(value: int) -> int:
    """splitmix64's finaliser: a well-spread 64-bit hash of an integer, the same on every run
    (Python's hash() of a tuple is not, across processes, for strings; for ints we still want spread)."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


def unit(*keys: int) -> float:
    """A number in [0, 1) fixed by the keys."""
    state = 0
    for key in keys:
        state = _mix(state ^ (key & _MASK))
    return state / 2.0**64


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def utilisation(*, job_id: int, kind: str, gpu: int, at: float) -> float:
    """Percent busy of one GPU of the job at `at` (seconds since the epoch), rounded to 0.1."""
    if kind == TRAINING:
        period = 300.0 + 600.0 * unit(job_id, 2)
        phase = 2 * math.pi * unit(job_id, gpu, 1)
        jitter = (unit(job_id, gpu, int(at // 5), 7) - 0.5) * 3.0
        value = _clamp(90.0 + 3.5 * math.sin(2 * math.pi * at / period + phase) + jitter, 85.0, 95.0)
    elif kind == NOTEBOOK:
        slot = int(at // 30)
        if unit(job_id, slot, 3) < 0.25:
            value = 55.0 + 45.0 * unit(job_id, gpu, slot, 4)
        else:
            value = 8.0 * unit(job_id, gpu, slot, 5)
    elif kind == INFERENCE:
        shift = (unit(job_id, 6) - 0.5) * (4.0 / 24.0)
        day = (at % _DAY) / _DAY
        level = 0.5 - 0.5 * math.cos(2 * math.pi * (day - 2.0 / 24.0 - shift))
        jitter = (unit(job_id, gpu, int(at // 5), 8) - 0.5) * 5.0
        value = _clamp(15.0 + 70.0 * level + jitter, 0.0, 100.0)
    else:
        value = 0.0
    return round(value, 1)


def memory_share(*, job_id: int, kind: str, gpu: int, at: float) -> float:
    """The share of the GPU's memory the job uses, 0 to 1."""
    if kind == TRAINING:
        return 0.80 + 0.12 * unit(job_id, gpu, 9)
    if kind == NOTEBOOK:
        return 0.10 + 0.40 * unit(job_id, gpu, int(at // 300), 10)
    if kind == INFERENCE:
        return 0.35 + 0.20 * unit(job_id, 11)
    return 0.0


def gpu_reading(
    holders: Iterable[tuple[int, str, float]], *, gpu: int, at: float, memory_total_mib: int
) -> tuple[float, int]:
    """(utilisation %, memory used MiB) of one GPU held by (job id, kind, fraction) holders."""
    busy = 0.0
    memory = 0.0
    for job_id, kind, fraction in holders:
        busy += fraction * utilisation(job_id=job_id, kind=kind, gpu=gpu, at=at)
        memory += fraction * memory_share(job_id=job_id, kind=kind, gpu=gpu, at=at)
    return round(min(busy, 100.0), 1), min(memory_total_mib, round(memory * memory_total_mib))
