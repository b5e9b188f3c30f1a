"""Reading checkpoints of `simulate --json` in the terms the scenarios speak."""

from __future__ import annotations

from typing import Any

Checkpoints = dict[str, dict[str, Any]]


def allocated(checkpoint: dict[str, Any]) -> dict[str, float]:
    """GPUs each quota's subtree holds."""
    return {name: figures["allocated"] for name, figures in checkpoint["quotas"].items()}


def states(checkpoint: dict[str, Any], *names: str) -> dict[str, str]:
    return {name: checkpoint["jobs"][name]["state"] for name in names}


def jobs_in(checkpoint: dict[str, Any], prefix: str, state: str) -> list[str]:
    return [name for name, job in checkpoint["jobs"].items() if name.startswith(prefix) and job["state"] == state]
