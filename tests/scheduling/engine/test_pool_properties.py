"""Hypothesis properties of resource pools (issue 24): on random clusters of two or three pools,
each with its own nodes, tree and placement policy, and jobs of every pool submitted in one
stream, no job ever runs outside its quota's pool (no lending across pools), each pool ends
exactly as it would alone (a change in one pool moves no figure in another), capacity holds per
node, and the same snapshot gives the same decisions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine import Job, Node, Quota, Snapshot, bounds, schedule
from tests.scheduling.engine.test_properties import SETTINGS, assert_capacity, play, trees

POOL_NAMES = ("h100", "a100", "l40s")


@st.composite
def pooled_cases(draw: st.DrawFn) -> tuple[Snapshot, tuple[Job, ...]]:
    pool_count = draw(st.integers(2, 3))
    nodes: list[Node] = []
    quotas: list[Quota] = []
    placements: list[tuple[str, str]] = []
    for pool in POOL_NAMES[:pool_count]:
        sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3))
        nodes.extend(Node(f"{pool}-n{i}", gpus, pool=pool) for i, gpus in enumerate(sizes))
        for quota in draw(trees(sum(sizes))):
            quotas.append(
                replace(
                    quota,
                    name=f"{pool}:{quota.name}",
                    parent=None if quota.parent is None else f"{pool}:{quota.parent}",
                    # Only a root names its pool; children follow it (the engine must find it).
                    pool=pool if quota.parent is None else "",
                    created_order=len(quotas),
                )
            )
        placements.append((pool, draw(st.sampled_from(["pack", "spread"]))))
    names = [quota.name for quota in quotas]
    jobs = tuple(
        Job(
            f"j{n}",
            draw(st.sampled_from(names)),
            draw(st.sampled_from([0.5, 1, 1, 2, 4, 8])),
            replicas=draw(st.integers(1, 2)),
            priority=draw(st.integers(1, 9)),
            preemptible=draw(st.booleans()),
            submitted_at=float(n),
        )
        for n in range(draw(st.integers(1, 14)))
    )
    snapshot = Snapshot(tuple(nodes), tuple(quotas), (), 0.0, "pack", pool_placements=tuple(placements))
    return snapshot, jobs


def pool_of(quota_name: str) -> str:
    return quota_name.split(":", 1)[0]


def alone(base: Snapshot, pool: str) -> Snapshot:
    """The pool's part of a cluster as a cluster of its own."""
    return Snapshot(
        tuple(node for node in base.nodes if node.pool == pool),
        tuple(quota for quota in base.quotas if pool_of(quota.name) == pool),
        (),
        base.now,
        dict(base.pool_placements)[pool],
    )


@SETTINGS
@given(pooled_cases())
def test_no_job_runs_outside_its_pool_and_capacity_holds(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    final, _results = play(base, jobs)
    assert_capacity(final)
    node_pool = {node.name: node.pool for node in final.nodes}
    for job in final.jobs:
        assert {node_pool[placement.node] for placement in job.placements} <= {pool_of(job.quota)}, job


@contextmanager
def bounds_out_of_reach() -> Iterator[None]:
    """A pool of several spends a share of the per-cycle bounds (engine.bounds), and what a bound
    leaves undone waits for a later cycle; with the bounds out of reach, the end state of a
    pool can be compared with that pool alone."""
    names = ("MAX_VICTIM_SEARCHES", "MAX_FAILED_CANDIDATES", "MAX_CONSOLIDATIONS")
    saved = {name: getattr(bounds, name) for name in names}
    for name in names:
        setattr(bounds, name, 10**6)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(bounds, name, value)


@SETTINGS
@given(pooled_cases())
def test_each_pool_ends_as_it_would_alone(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    with bounds_out_of_reach():
        together = {job.id: job for job in play(base, jobs)[0].jobs}
        alone_runs = {
            pool: play(alone(base, pool), tuple(job for job in jobs if pool_of(job.quota) == pool))[0]
            for pool, _placement in base.pool_placements
        }
    for pool, by_itself in alone_runs.items():
        for job in by_itself.jobs:
            mixed = together[job.id]
            assert (mixed.state, mixed.placements) == (job.state, job.placements), (pool, job.id)


@SETTINGS
@given(pooled_cases())
def test_same_pooled_snapshot_same_decisions(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    snapshot = replace(base, jobs=jobs)
    assert schedule(snapshot) == schedule(snapshot)
