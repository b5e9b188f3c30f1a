"""docs/scenarios/cpu-quotas.yaml played through `simulate --json` (issue 24): CPU reclaimed
while GPUs stand idle, and the `cpu` / `memory_gib` objects beside each quota's GPU figures.
The figures are worked out by hand in the scenario's comments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.scheduling.scenarios.helpers import Checkpoints, allocated, jobs_in, states

Simulate = Callable[[str], Checkpoints]


def cpu(checkpoint: dict[str, Any], name: str) -> tuple[float, float, float]:
    figures = checkpoint["quotas"][name]["cpu"]
    return figures["guaranteed"], figures["fair_share"], figures["allocated"]


def test_cpu_quotas_reclaim_cpu_while_gpus_stand_idle(simulate: Simulate) -> None:
    run = simulate("cpu-quotas")
    borrows = run["research-borrows-cpu"]
    assert allocated(borrows) == {"research": 4, "serving": 0}
    assert (cpu(borrows, "research"), cpu(borrows, "serving")) == ((64, 128, 128), (64, 0, 0))
    assert borrows["quotas"]["research"]["memory_gib"] == {
        "guaranteed": 512,
        "fair_share": 256,
        "allocated": 256,
        "allocated_self": 256,
        "limit": None,
    }

    back = run["serving-takes-back-its-cpu"]
    assert states(back, "api") == {"api": "running"}
    (reclaimed,) = jobs_in(back, "prep", "pending")
    assert back["jobs"][reclaimed]["preemptions"] == 1
    assert (cpu(back, "research"), cpu(back, "serving")) == ((64, 96, 96), (64, 32, 32))
    assert allocated(back) == {"research": 3, "serving": 1}  # 12 GPUs stood idle throughout

    waits = run["cpu-guarantee-only"]
    reason = waits["jobs"]["batch"]["reason"]
    assert (reason["code"], reason["message"]) == (
        "guaranteed_only",
        "cpu: non-preemptible jobs must fit in guaranteed quota of serving: 32 + 48 > 64 cores",
    )
