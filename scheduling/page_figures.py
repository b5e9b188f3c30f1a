"""Figures that telemetry computes and the pages here show: each GPU's latest reading (the Nodes
page) and the mean GPU utilisation of a quota's jobs (the Quota page's Monitoring tab).

Telemetry sits above scheduling (console → telemetry → scheduling), so these pages may not import
it: telemetry registers its readers here at start (TelemetryConfig.ready), as scheduling registers
in quotas.hooks the figures that quotas shows. Until then the pages show no reading and no chart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Protocol

from scheduling.allocation_history import ChartRange


class GpuReading(Protocol):
    """One GPU's latest sample (telemetry.selectors.GpuLatest)."""

    @property
    def node_id(self) -> int: ...

    @property
    def gpu(self) -> int: ...

    @property
    def utilisation(self) -> float: ...


class GpuReadings(Protocol):
    def __call__(self, *, now: datetime, node_ids: Iterable[int] | None = None) -> Sequence[GpuReading]: ...


class QuotaUtilisation(Protocol):
    """A plotly figure over the range, or None without samples."""

    def __call__(self, *, quota_ids: Sequence[int], now: datetime, span: ChartRange) -> dict[str, Any] | None: ...


def _no_readings(*, now: datetime, node_ids: Iterable[int] | None = None) -> Sequence[GpuReading]:
    return []


def _no_utilisation(*, quota_ids: Sequence[int], now: datetime, span: ChartRange) -> dict[str, Any] | None:
    return None


_gpu_readings: GpuReadings = _no_readings
_quota_utilisation: QuotaUtilisation = _no_utilisation


def register(*, gpu_readings: GpuReadings, quota_utilisation: QuotaUtilisation) -> None:
    global _gpu_readings, _quota_utilisation
    _gpu_readings, _quota_utilisation = gpu_readings, quota_utilisation


def latest_gpu_readings(*, now: datetime, node_ids: Iterable[int] | None = None) -> Sequence[GpuReading]:
    return _gpu_readings(now=now, node_ids=node_ids)


def quota_utilisation(*, quota_ids: Sequence[int], now: datetime, span: ChartRange) -> dict[str, Any] | None:
    return _quota_utilisation(quota_ids=quota_ids, now=now, span=span)
