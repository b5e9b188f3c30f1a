"""Resource pools in the engine (SCHEDULING.md "Pool", issue 24): each pool is scheduled on its
own. Tables: per-pool fair share, pool isolation (no lending across pools, a job only on its
pool's nodes, a reclaim in one pool moves nothing in another), per-pool placement policy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.engine import Evict, Node, Quota, Snapshot, bounds, schedule
from scheduling.engine.pools import split_by_pool
from tests.scheduling.engine.helpers import Scenario


def pool_nodes(pool: str, prefix: str, count: int, gpus: int) -> tuple[Node, ...]:
    return tuple(Node(f"{prefix}-{i}", gpus, pool=pool) for i in range(1, count + 1))


def two_pools(placement_a100: str = "pack") -> Scenario:
    """h100: 2 nodes × 8, vision (8) and speech (8). a100: 2 nodes × 4, batch (6) and eval (2)."""
    tree = (
        Quota("vision", None, 8, pool="h100", created_order=0),
        Quota("speech", None, 8, pool="h100", created_order=1),
        Quota("batch", None, 6, pool="a100", created_order=2),
        Quota("eval", None, 2, pool="a100", created_order=3),
    )
    scenario = Scenario((*pool_nodes("h100", "h", 2, 8), *pool_nodes("a100", "a", 2, 4)), tree)
    scenario.snapshot = replace(scenario.snapshot, pool_placements=(("a100", placement_a100),))
    return scenario


def nodes_of(s: Scenario, job: str) -> set[str]:
    return {placement.node for placement in s.job(job).placements}


# What is asked, in order, as (job, quota, GPUs, how many such jobs); then each quota's fair
# share and allocation once the cycles have settled.
FAIR_SHARE_ROWS = [
    pytest.param(
        [("v", "vision", 8, 2)],
        {"vision": (16, 16), "speech": (0, 0), "batch": (0, 0), "eval": (0, 0)},
        id="vision borrows all of h100 and nothing of a100",
    ),
    pytest.param(
        [("v", "vision", 8, 2), ("b", "batch", 1, 8)],
        {"vision": (16, 16), "speech": (0, 0), "batch": (8, 8), "eval": (0, 0)},
        id="each pool lends its idle GPUs inside itself",
    ),
    pytest.param(
        [("v", "vision", 4, 4), ("b", "batch", 1, 8), ("s", "speech", 4, 2), ("e", "eval", 1, 2)],
        {"vision": (8, 8), "speech": (8, 8), "batch": (6, 6), "eval": (2, 2)},
        id="the owners come back: each pool reclaims its own borrowers for its own guarantees",
    ),
]


@pytest.mark.parametrize(("asks", "expected"), FAIR_SHARE_ROWS)
def test_fair_share_is_per_pool(asks: list[tuple[str, str, int, int]], expected: dict[str, tuple[int, int]]) -> None:
    s = two_pools()
    for job, quota, gpus, count in asks:
        for number in range(1, count + 1):
            s.submit(f"{job}-{number}", quota, gpus)

    assert {q: (s.last.quotas[q].fair_share, s.allocated(q)) for q in expected} == expected


def test_a_job_runs_only_on_its_quotas_pool_even_when_the_other_pool_is_idle() -> None:
    # a100 is full; h100 stands idle, but its GPUs are never lent to a100's quotas.
    s = two_pools().submit("b", "batch", 4, replicas=2).submit("b-more", "batch", 4)

    assert nodes_of(s, "b") == {"a-1", "a-2"}
    assert s.state("b-more") == "pending"
    assert s.last.pending["b-more"].code in {"no_fit", "insufficient_capacity", "quota_limit"}
    assert s.allocated("vision") == 0


def test_a_job_larger_than_its_pool_is_told_the_pools_size() -> None:
    s = two_pools().submit("big", "batch", 4, replicas=3)

    assert s.state("big") == "pending"
    assert (s.last.pending["big"].code, s.last.pending["big"].message) == (
        "exceeds_cluster",
        "asks 12 GPUs, the pool has 8",
    )


def test_a_reclaim_in_one_pool_moves_nothing_in_another() -> None:
    s = two_pools()
    s.submit("v", "vision", 8, replicas=2)  # borrows speech's 8 in h100
    s.submit("e", "eval", 4, replicas=2)  # borrows batch's 6 in a100
    started = {job: s.job(job).started_at for job in ("v", "e")}

    s.submit("b", "batch", 4)  # batch takes back its guarantee: only a100's borrower goes

    evicted = [(d.job_id, d.rule) for d in s.decisions if isinstance(d, Evict)]
    assert evicted == [("e", "reclaim")]
    assert s.state("v") == "running" and s.job("v").started_at == started["v"]
    assert s.state("b") == "running" and nodes_of(s, "b") <= {"a-1", "a-2"}


@pytest.mark.parametrize(
    ("placement", "nodes_used"),
    [pytest.param("pack", 1, id="a100 packs"), pytest.param("spread", 2, id="a100 spreads")],
)
def test_each_pool_places_by_its_own_policy(placement: str, nodes_used: int) -> None:
    s = two_pools(placement_a100=placement).submit("e1", "eval", 1).submit("e2", "eval", 1)
    s.submit("v1", "vision", 1).submit("v2", "vision", 1)

    assert len(nodes_of(s, "e1") | nodes_of(s, "e2")) == nodes_used
    assert len(nodes_of(s, "v1") | nodes_of(s, "v2")) == 1  # h100 packs, the snapshot's default


def test_one_pool_alone_is_scheduled_as_before() -> None:
    """A snapshot whose nodes and quotas name one pool gives the very result of the same
    snapshot with no pools named: pools change nothing for a single-pool cluster."""
    named = two_pools()
    named.submit("v", "vision", 8, replicas=2).submit("s", "speech", 4)
    h100 = Snapshot(
        nodes=tuple(node for node in named.snapshot.nodes if node.pool == "h100"),
        quotas=tuple(quota for quota in named.snapshot.quotas if quota.pool == "h100"),
        jobs=tuple(job for job in named.snapshot.jobs if job.quota in {"vision", "speech"}),
        now=named.snapshot.now,
    )
    unnamed = replace(
        h100,
        nodes=tuple(replace(node, pool="") for node in h100.nodes),
        quotas=tuple(replace(quota, pool="") for quota in h100.quotas),
    )

    assert schedule(h100) == schedule(unnamed)


def test_each_pool_spends_its_share_of_the_cycles_bounds() -> None:
    """Splitting a cluster into pools does not multiply what one cycle may do: each pool gets
    the per-cycle bounds in proportion to its nodes (at least a quarter), one pool all of them."""
    snapshot = replace(
        two_pools().snapshot,
        nodes=(*pool_nodes("h100", "h", 6, 8), *pool_nodes("a100", "a", 2, 4)),
    )

    assert {pool: part.bound_share for pool, part in split_by_pool(snapshot)} == {"h100": 0.75, "a100": 0.25}
    assert [bounds.share_of(64, share) for share in (1.0, 0.75, 0.25, 0.01)] == [64, 48, 16, 16]
