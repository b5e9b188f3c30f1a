"""Victim searches of SCHEDULING.md §3 as a table: the cluster as it runs, the job that
arrives, and who is evicted or moved for it in that one cycle.

Each rule is checked with the victims already chosen for this job removed (the deep-tree rows),
and consolidation moves as few jobs as possible (the move rows).
"""

from __future__ import annotations

import pytest

from scheduling.engine import Admit, Evict, Job, Node, Quota, ReplicaPlacement, Snapshot, schedule
from tests.scheduling.engine.helpers import nodes, quotas


def running(
    job_id: str, quota: str, *where: tuple[str, tuple[int, ...]], started: float, preemptible: bool = True
) -> Job:
    """A job running with one replica per (node, devices), started at `started`."""
    placements = tuple(ReplicaPlacement(node, devices) for node, devices in where)
    return Job(
        job_id,
        quota,
        len(where[0][1]),
        replicas=len(placements),
        preemptible=preemptible,
        state="running",
        started_at=started,
        submitted_at=started,
        placements=placements,
    )


def notebook(job_id: str, quota: str, node: str, devices: tuple[int, ...]) -> Job:
    """Non-preemptible: never a victim, never moved."""
    return running(job_id, quota, (node, devices), started=0.0, preemptible=False)


# org (8) holds the department (4: team-a 4, team-b 0 with a weight) and other (4).
DEPARTMENT = quotas(
    ("org", None, 8),
    ("dept", "org", 4),
    ("team-a", "dept", 4),
    Quota("team-b", "dept", 0, weight=1),
    ("other", "org", 4),
)
# team-b borrows 2 GPUs inside the department; other holds 6, 2 above its guarantee of 4.
TWO_BORROWERS = (
    running("b1", "team-b", ("n-1", (0, 1)), started=1.0),
    running("o1", "other", ("n-1", (2, 3)), started=2.0),
    running("o2", "other", ("n-1", (4, 5)), started=3.0),
    running("o3", "other", ("n-1", (6, 7)), started=4.0),
)

# n-1: s1 (1 GPU) and m2 (2 GPUs) with 1 GPU free; n-2..n-4 hold a 2-GPU notebook and 2 free GPUs.
FRAGMENTED = (
    running("s1", "team", ("n-1", (0,)), started=1.0),
    running("m2", "team", ("n-1", (1, 2)), started=2.0),
    notebook("nb2", "team", "n-2", (0, 1)),
    notebook("nb3", "team", "n-3", (0, 1)),
    notebook("nb4", "team", "n-4", (0, 1)),
)
# n-1: a gang g (2 × 2 GPUs, its other replica on n-2) and s1 (1 GPU), 1 GPU free; n-2 full
# with g's replica and a notebook; n-3 holds a notebook and 2 free GPUs.
GANG_ON_TWO_NODES = (
    running("g", "team", ("n-1", (0, 1)), ("n-2", (0, 1)), started=1.0),
    running("s1", "team", ("n-1", (2,)), started=2.0),
    notebook("nb2", "team", "n-2", (2, 3)),
    notebook("nb3", "team", "n-3", (0, 1)),
)
TEAM = (Quota("team", None, 16),)

ROWS = [
    pytest.param(
        nodes("n", 1, 8),
        DEPARTMENT,
        TWO_BORROWERS,
        Job("a1", "team-a", 4, submitted_at=10.0),
        [("b1", "reclaim"), ("o3", "reclaim")],
        id="deep-tree-borrowers-inside-and-outside-the-department-both-go",
    ),
    pytest.param(
        nodes("n", 1, 8),
        DEPARTMENT,
        TWO_BORROWERS[:3],  # other at its guarantee of 4, and 2 GPUs free
        Job("a1", "team-a", 4, submitted_at=10.0),
        [("b1", "reclaim")],
        id="deep-tree-the-borrower-inside-suffices-when-gpus-stand-free",
    ),
    pytest.param(
        nodes("n", 4, 4),
        TEAM,
        FRAGMENTED,
        Job("big", "team", 3, submitted_at=10.0),
        [("m2", "consolidation")],
        id="consolidation-one-move-where-two-would-also-do",
    ),
    pytest.param(
        nodes("n", 3, 4),
        TEAM,
        GANG_ON_TWO_NODES,
        Job("big", "team", 3, submitted_at=10.0),
        [("g", "consolidation")],
        id="consolidation-moves-a-whole-gang-alone",
    ),
]


@pytest.mark.parametrize(("node_list", "quota_list", "jobs", "arriving", "evicted"), ROWS)
def test_victim_search_table(
    node_list: tuple[Node, ...],
    quota_list: tuple[Quota, ...],
    jobs: tuple[Job, ...],
    arriving: Job,
    evicted: list[tuple[str, str]],
) -> None:
    result = schedule(Snapshot(node_list, quota_list, (*jobs, arriving), now=100.0))
    assert [(d.job_id, d.rule) for d in result.decisions if isinstance(d, Evict)] == evicted
    assert all(d.beneficiary == arriving.id for d in result.decisions if isinstance(d, Evict))
    assert arriving.id in {d.job_id for d in result.decisions if isinstance(d, Admit)}
