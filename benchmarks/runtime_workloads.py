"""Workloads of the runtime benchmarks, as scenario documents (SCENARIOS.md) built in Python.

S3 is the engine benchmark's cluster (benchmarks/engine.py): 1,000 nodes x 8 GPUs, 1,110
quotas in three levels (10 roots x 10 children x 10 grandchildren, guarantees 800 / 80 / 8),
and pending jobs of 1-8 GPUs on random leaves, priority 1-9, 90 % preemptible.

The Kueue baseline is the one Kueue publishes for its scheduler (test/performance/scheduler):
30 nodes x 20 GPUs; 5 parents of 120 GPUs, each with 6 children guaranteed 20 and limited to
120 (Kueue's borrowing limit of 100); per child 350 x 1 GPU for 200 ms at priority 1, 100 x 5
GPUs for 500 ms at priority 2, 50 x 20 GPUs for 1 s at priority 3; all preemptible.
"""

from __future__ import annotations

import random
from typing import Any

S3_NODES = 1000
S3_GPUS_PER_NODE = 8
S3_ROOTS = S3_CHILDREN = S3_LEAVES = 10

KUEUE_NODES = 30
KUEUE_GPUS_PER_NODE = 20
KUEUE_PARENTS = 5
KUEUE_CHILDREN = 6
KUEUE_CLASSES = (
    # (name, GPUs, seconds, priority, jobs per child quota)
    ("small", 1, 0.2, 1, 350),
    ("medium", 5, 0.5, 2, 100),
    ("large", 20, 1.0, 3, 50),
)

# Kueue's generator creates each class's workloads one by one per queue, this many seconds apart
# (creationIntervalMs in test/performance/scheduler/configs/baseline/generator.yaml); its waits
# to admission count from each workload's creation.
KUEUE_CREATION_INTERVAL_S = {"small": 0.1, "medium": 0.5, "large": 1.2}


def s3_quotas() -> list[dict[str, Any]]:
    capacity = S3_NODES * S3_GPUS_PER_NODE
    root_gpus = capacity // S3_ROOTS
    child_gpus = root_gpus // S3_CHILDREN
    leaf_gpus = child_gpus // S3_LEAVES
    return [
        {
            "name": f"r{r}",
            "gpus": root_gpus,
            "children": [
                {
                    "name": f"r{r}.{c}",
                    "gpus": child_gpus,
                    "children": [{"name": f"r{r}.{c}.{g}", "gpus": leaf_gpus} for g in range(S3_LEAVES)],
                }
                for c in range(S3_CHILDREN)
            ],
        }
        for r in range(S3_ROOTS)
    ]


def s3_leaves() -> list[str]:
    return [f"r{r}.{c}.{g}" for r in range(S3_ROOTS) for c in range(S3_CHILDREN) for g in range(S3_LEAVES)]


def s3_pending_jobs(count: int, *, seed: int = 4, prefix: str = "pend") -> list[dict[str, Any]]:
    """Pending jobs as the engine benchmark draws them: 1-8 GPUs, priority 1-9, 90 % preemptible."""
    rng = random.Random(seed)
    leaves = s3_leaves()
    jobs = []
    for number in range(count):
        quota = rng.choice(leaves)
        jobs.append(
            {
                "name": f"{prefix}-{number}",
                "quota": quota,
                "workspace": quota.split(".")[0],
                "kind": "training",
                "gpus": rng.randint(1, 8),
                "priority": rng.randint(1, 9),
                "preemptible": rng.random() < 0.9,
            }
        )
    return jobs


def s3_workspaces() -> list[dict[str, Any]]:
    """One workspace per root quota (a department), bound to every quota of its subtree."""
    workspaces = []
    for r in range(S3_ROOTS):
        bound = [f"r{r}"]
        for c in range(S3_CHILDREN):
            bound.append(f"r{r}.{c}")
            bound.extend(f"r{r}.{c}.{g}" for g in range(S3_LEAVES))
        workspaces.append({"name": f"r{r}", "quotas": bound})
    return workspaces


def s3_burst_scenario(*, bursts: int = 10, per_burst: int = 1000, seed: int = 4) -> dict[str, Any]:
    """S3 arriving in bursts: each burst is one `submit` step (a list of jobs), then a checkpoint."""
    jobs = s3_pending_jobs(bursts * per_burst, seed=seed)
    steps: list[dict[str, Any]] = []
    for burst in range(bursts):
        steps.append({"submit": jobs[burst * per_burst : (burst + 1) * per_burst]})
        steps.append({"checkpoint": f"burst-{burst + 1}"})
    return {
        "name": f"s3-in-{bursts}-bursts",
        "nodes": [{"name": "node", "count": S3_NODES, "gpus": S3_GPUS_PER_NODE}],
        "quotas": s3_quotas(),
        "workspaces": s3_workspaces(),
        "steps": steps,
    }


def kueue_quotas() -> list[dict[str, Any]]:
    return [
        {
            "name": f"parent-{p}",
            "gpus": 120,
            "children": [{"name": f"parent-{p}.child-{c}", "gpus": 20, "limit": 120} for c in range(KUEUE_CHILDREN)],
        }
        for p in range(KUEUE_PARENTS)
    ]


def kueue_children() -> list[str]:
    return [f"parent-{p}.child-{c}" for p in range(KUEUE_PARENTS) for c in range(KUEUE_CHILDREN)]


def kueue_jobs() -> list[dict[str, Any]]:
    """15,000 jobs, all submitted at the start: per child quota, each size class in turn."""
    jobs = []
    for quota in kueue_children():
        for size, gpus, seconds, priority, count in KUEUE_CLASSES:
            for number in range(count):
                jobs.append(
                    {
                        "name": f"{quota}.{size}-{number}",
                        "quota": quota,
                        "kind": "training",
                        "gpus": gpus,
                        "duration": seconds,
                        "priority": priority,
                        "preemptible": True,
                    }
                )
    return jobs


def kueue_scenario() -> dict[str, Any]:
    return {
        "name": "kueue-baseline",
        "nodes": [{"name": "node", "count": KUEUE_NODES, "gpus": KUEUE_GPUS_PER_NODE}],
        "quotas": kueue_quotas(),
        "workspaces": [{"name": "kueue", "quotas": [q["name"] for q in kueue_quotas()] + kueue_children()}],
        "steps": [{"submit": kueue_jobs()}],
    }
