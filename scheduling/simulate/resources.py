"""The CPU and memory figures of a checkpoint (SCENARIOS.md "Output"): where a pool manages them
(its root quotas set `cpu` or `memory_gib`), each quota carries `cpu` and `memory_gib` objects
beside its GPU figures, read from the engine over the cluster as it stands."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from scheduling.engine.status import snapshot_statuses
from scheduling.selectors import build_snapshot
from scheduling.simulate.scenario import figure


def resource_figures(quotas: Sequence[Sequence[Any]], now: datetime) -> dict[str, dict[str, dict[str, Any]]]:
    """Per quota name, its managed resources' figures; empty (and no snapshot read) when no root
    quota sets CPU or memory, so a GPU-only scenario costs nothing more. Each quota is a row
    ending in its parent_id, cpu and memory_gib."""
    if not any(parent_id is None and (cpu is not None or memory is not None) for *_, parent_id, cpu, memory in quotas):
        return {}
    snapshot, _index = build_snapshot(now)
    return {
        name: {
            resource: {
                "guaranteed": figure(figures.guaranteed),
                "fair_share": figure(figures.fair_share),
                "allocated": figure(figures.allocated),
                "allocated_self": figure(figures.allocated_self),
                "limit": None if figures.limit is None else figure(figures.limit),
            }
            for resource, figures in status.resources.items()
        }
        for name, status in snapshot_statuses(snapshot).items()
        if status.resources
    }
