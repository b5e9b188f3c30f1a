"""The bounds on a cycle's victim searches delay work to later cycles; they never drop it.

A cycle finds victims for at most MAX_VICTIM_SEARCHES jobs, and spends at most
MAX_FAILED_CANDIDATES on searches that find none. Once one bound counted both, the same
hopeless searches at the head of the queue used it up every cycle: the queue looked settled
(a cycle decided nothing) while an entitled job behind them could have reclaimed its quota.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from scheduling.engine import Job, Node, Quota, ReplicaPlacement, Snapshot, schedule
from scheduling.engine import bounds as engine_bounds
from scheduling.engine.simulate import converge
from tests.scheduling.engine.helpers import nodes, quotas


def test_a_hopeless_search_at_the_head_does_not_starve_an_entitled_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """b borrows the whole pool, with a non-preemptible replica on every node. a-big (first in
    the queue, within a's guarantee) needs a whole node: no victims can make one. c-small,
    behind it, needs 4 GPUs within c's guarantee: reclaiming one of b's trainings makes room."""
    monkeypatch.setattr(engine_bounds, "MAX_VICTIM_SEARCHES", 1)
    tree = quotas(("org", None, 24), ("a", "org", 8), ("b", "org", 8), ("c", "org", 8))
    running: list[Job] = []
    for n in (1, 2, 3):
        running.append(serving(f"b-serve-{n}", f"n-{n}", (0, 1)))
        running.append(training(f"b-train-{n}", f"n-{n}", (2, 3, 4, 5, 6, 7)))
    waiting = (Job("a-big", "a", 8, submitted_at=10.0), Job("c-small", "c", 4, submitted_at=11.0))
    settled, _results = converge(Snapshot(nodes("n", 3, 8), tree, (*running, *waiting), now=100.0))
    state = {job.id: job.state for job in settled.jobs}
    assert state["c-small"] == "running"
    assert state["a-big"] == "pending"


def serving(name: str, node: str, devices: tuple[int, ...]) -> Job:
    return Job(
        name,
        "b",
        len(devices),
        preemptible=False,
        priority=7,
        state="running",
        started_at=0.0,
        placements=(ReplicaPlacement(node, devices),),
    )


def training(name: str, node: str, devices: tuple[int, ...]) -> Job:
    return replace(serving(name, node, devices), preemptible=True, priority=3)


def bursts_of_mixed_jobs(seed: int) -> list[tuple[Job, ...]]:
    rng = random.Random(seed)
    leaves = [f"r{r}.{c}" for r in range(3) for c in range(4)]
    bursts = []
    for burst in range(3):
        bursts.append(
            tuple(
                Job(
                    f"j{burst}-{n}",
                    rng.choice(leaves),
                    rng.randint(1, 8),
                    priority=rng.randint(1, 9),
                    preemptible=rng.random() < 0.9,
                    submitted_at=float(burst * 100 + n),
                )
                for n in range(60)
            )
        )
    return bursts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_with_tight_bounds_the_queue_settles_where_an_unbounded_cycle_has_nothing_left(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    tree = [Quota(f"r{r}", None, 32, created_order=r * 5) for r in range(3)]
    tree += [Quota(f"r{r}.{c}", f"r{r}", 8, created_order=r * 5 + c + 1) for r in range(3) for c in range(4)]
    snapshot = Snapshot(tuple(Node(f"n{n}", 8) for n in range(12)), tuple(tree), (), now=0.0)
    monkeypatch.setattr(engine_bounds, "MAX_VICTIM_SEARCHES", 2)
    for burst in bursts_of_mixed_jobs(seed):
        snapshot = replace(snapshot, jobs=snapshot.jobs + burst)
        snapshot, _results = converge(snapshot, max_cycles=200)
    monkeypatch.setattr(engine_bounds, "MAX_VICTIM_SEARCHES", 10**6)
    monkeypatch.setattr(engine_bounds, "MAX_FAILED_CANDIDATES", 10**9)
    assert schedule(snapshot).decisions == ()
