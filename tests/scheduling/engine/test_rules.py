"""One named case per rule of SCHEDULING.md §2-§5."""

from __future__ import annotations

from dataclasses import replace

from scheduling.engine import Evict, Job, Node, Quota, ReplicaPlacement, Shrink, Snapshot, schedule
from tests.scheduling.engine.helpers import Scenario, nodes, quotas


def evictions(s: Scenario) -> list[tuple[str, str, str | None]]:
    return [(d.job_id, d.rule, d.beneficiary) for d in s.decisions if isinstance(d, Evict)]


# -- §2 admission and placement -------------------------------------------------------------
def test_gang_all_replicas_or_none() -> None:
    s = Scenario(nodes("n", 2, 4), quotas(("a", None, 8)))
    s.submit("small", "a", 2, kind="notebook").submit("gang", "a", 3, replicas=2)
    assert s.state("gang") == "pending"  # 6 GPUs free, but 2 + 4: one replica would fit
    reason = s.last.pending["gang"]
    assert reason.code == "no_fit"
    # the gang at the head of its queue keeps what it will use (docs/scheduling.md, Reservations)
    assert reason.message == (
        "reserved: n-1 and n-2 free when their jobs end (no expected end is known); "
        "5 of the 6 GPUs it needs are free now and kept for it"
    )


def test_fractions_share_one_device() -> None:
    s = Scenario((Node("n-1", 1),), quotas(("a", None, 1)))
    s.submit("f1", "a", 0.5, kind="notebook").submit("f2", "a", 0.25, kind="notebook")
    s.submit("f3", "a", 0.5)
    assert [s.job(j).placements for j in ("f1", "f2")] == [
        (ReplicaPlacement("n-1", (0,), 0.5),),
        (ReplicaPlacement("n-1", (0,), 0.25),),
    ]
    assert s.state("f3") == "pending"
    assert s.last.pending["f3"].code == "insufficient_capacity"


def test_pack_fills_the_fullest_node_spread_the_emptiest() -> None:
    packed = Scenario(nodes("n", 2, 4), quotas(("a", None, 8)))
    packed.submit("j1", "a", 1).submit("j2", "a", 1)
    assert {packed.job(j).placements[0].node for j in ("j1", "j2")} == {"n-1"}
    spread = Scenario(nodes("n", 2, 4), quotas(("a", None, 8)), placement="spread")
    spread.submit("j1", "a", 1).submit("j2", "a", 1)
    assert {spread.job(j).placements[0].node for j in ("j1", "j2")} == {"n-1", "n-2"}


def test_limit_is_never_exceeded() -> None:
    s = Scenario(nodes("n", 1, 8), quotas(Quota("a", None, 1, limit=2)))
    s.submit("j1", "a", 1).submit("j2", "a", 1).submit("j3", "a", 1)
    assert s.state("j3") == "pending"
    assert s.last.pending["j3"].code == "quota_limit"
    assert s.last.pending["j3"].message == "would exceed the limit of a: 2 + 1 > 2"


def test_limit_of_an_ancestor_counts() -> None:
    s = Scenario(nodes("n", 1, 8), quotas(Quota("p", None, 2, limit=3), ("c", "p", 2)))
    s.submit("j1", "c", 2).submit("j2", "c", 2)
    assert s.last.pending["j2"].message == "would exceed the limit of p: 2 + 2 > 3"


def test_non_preemptible_uses_guaranteed_quota_only() -> None:
    s = Scenario(nodes("n", 1, 8), quotas(("a", None, 2), ("b", None, 6)))
    s.submit("nb1", "a", 2, kind="notebook").submit("nb2", "a", 1, kind="notebook")
    assert s.last.pending["nb2"].code == "guaranteed_only"
    assert s.last.pending["nb2"].message == "non-preemptible jobs must fit in guaranteed quota of a: 2 + 1 > 2"
    s.submit("train", "a", 1)  # preemptible: may borrow
    assert s.state("train") == "running"


def test_exceeds_cluster_node_and_pool() -> None:
    s = Scenario(nodes("n", 2, 8), quotas(("a", None, 16)))
    s.submit("wide", "a", 16).submit("many", "a", 8, replicas=3)
    assert s.last.pending["wide"].message == "needs 16 GPUs on one node; the largest node has 8"
    assert s.last.pending["many"].message == "asks 24 GPUs, the pool has 16"
    assert {r.code for r in s.last.pending.values()} == {"exceeds_cluster"}


def test_fifo_blocks_best_effort_skips() -> None:
    # big keeps n-1's 2 free GPUs (a reservation, docs/scheduling.md); the 1 free on n-2 is outside
    for policy, expected in (("fifo", "pending"), ("best_effort", "running")):
        s = Scenario(nodes("n", 2, 4), quotas(Quota("a", None, 8, queue_policy=policy)))
        s.submit("running", "a", 2).submit("other", "a", 3)
        s.submit("big", "a", 4).submit("small", "a", 1)
        assert s.state("small") == expected, policy
    assert s.last.pending["big"].position == 1
    fifo = Scenario(nodes("n", 2, 4), quotas(Quota("a", None, 8, queue_policy="fifo")))
    fifo.submit("running", "a", 2).submit("other", "a", 3)
    fifo.submit("big", "a", 4).submit("small", "a", 1)
    assert fifo.last.pending["small"].code == "queue_blocked"
    assert fifo.last.pending["small"].position == 2


def test_queue_order_priority_then_submission() -> None:
    s = Scenario(nodes("n", 1, 1), quotas(("a", None, 1)))
    s.submit("runner", "a", 1, priority=9, preemptible=False)
    s.submit("old-low", "a", 1, priority=3).submit("new-high", "a", 1, priority=5).submit("new-low", "a", 1, priority=3)
    positions = {j: r.position for j, r in s.last.pending.items()}
    assert positions == {"new-high": 1, "old-low": 2, "new-low": 3}


def test_borrowing_beyond_guarantee_and_fair_share() -> None:
    s = Scenario(nodes("n", 1, 8), quotas(("a", None, 1), ("b", None, 7)))
    s.submit("big", "a", 6)
    assert s.state("big") == "running"
    assert s.last.quotas["a"].saturation == 1.0  # fair share follows request when idle


# -- §3 reclaim, preempt, child-level, same-level -----------------------------------------------
def test_reclaim_guarantee_rule_evicts_a_gang_whole() -> None:
    s = Scenario(nodes("n", 2, 4), quotas(("a", None, 4), ("b", None, 4)))
    s.submit("gang", "a", 2, replicas=4)
    assert s.allocated("a") == 8
    s.submit("mine", "b", 4)
    assert evictions(s) == [("gang", "reclaim", "mine")]
    assert s.state("mine") == "running" and s.state("gang") == "pending"
    evict = next(d for d in s.decisions if isinstance(d, Evict))
    assert "guarantee" in evict.reason


def test_reclaim_compares_branches_below_the_lowest_common_ancestor() -> None:
    tree = quotas(("r1", None, 8), ("r2", None, 8), ("x", "r1", 4), ("y", "r1", 4), ("z", "r2", 8))
    s = Scenario(nodes("n", 2, 8), tree)
    for n in range(12):
        s.submit(f"x{n}", "x", 1)
    s.submit("z-job", "z", 4)
    assert s.allocated("x") == 12 and s.allocated("z") == 4
    s.submit("y-job", "y", 4)
    assert {e[0][0] for e in evictions(s)} == {"x"}  # taken from the sibling x, not from z
    assert all(rule == "reclaim" for _, rule, _ in evictions(s))
    assert s.state("y-job") == "running" and s.allocated("z") == 4


def test_reclaim_takes_from_the_quota_furthest_above_fair_share_lowest_priority_latest_first() -> None:
    s = Scenario(nodes("n", 1, 8), quotas(("a", None, 2), ("b", None, 2), ("c", None, 4)))
    s.submit("a-hi", "a", 1, priority=4).submit("a-lo", "a", 1, priority=2).submit("a-lo2", "a", 1, priority=2)
    s.submit("a-x", "a", 1, priority=4).submit("a-y", "a", 1, priority=4).submit("b1", "b", 2)
    assert s.allocated("a") == 5 and s.allocated("b") == 2
    s.submit("c-job", "c", 3)
    # a is 2 above its fair share of 3, b is at its share: a gives, newest low priority first
    assert evictions(s) == [("a-lo2", "reclaim", "c-job"), ("a-lo", "reclaim", "c-job")]
    assert s.state("c-job") == "running" and s.allocated("a") == 3


def test_nothing_evicted_for_a_job_that_cannot_run() -> None:
    s = Scenario(nodes("n", 2, 4), quotas(("a", None, 4), ("b", None, 4)))
    for n in range(8):
        s.submit(f"a{n}", "a", 1)
    s.submit("b-wide", "b", 8)  # needs 8 GPUs on one node: never fits on 4-GPU nodes
    assert evictions(s) == []
    assert s.last.pending["b-wide"].code == "exceeds_cluster"


def test_non_preemptible_jobs_are_never_victims() -> None:
    s = Scenario(nodes("n", 1, 4), quotas(("a", None, 2), ("b", None, 2)))
    s.submit("a-nb", "a", 2, kind="notebook").submit("a-train", "a", 2)
    s.submit("b-job", "b", 2)
    assert evictions(s) == [("a-train", "reclaim", "b-job")]
    s.submit("b-more", "b", 2)
    assert s.state("a-nb") == "running" and s.state("b-more") == "pending"


def test_preempt_inside_one_quota_needs_strictly_lower_priority() -> None:
    s = Scenario(nodes("n", 1, 2), quotas(("a", None, 2)))
    s.submit("low", "a", 2, priority=3).submit("same", "a", 2, priority=3)
    assert evictions(s) == []
    s.submit("high", "a", 2, priority=6)
    assert evictions(s) == [("low", "preempt", "high")]
    assert s.state("high") == "running"


def test_child_preemption_evicts_lowest_priority_most_recent_in_the_subtree() -> None:
    tree = quotas(Quota("P", None, 8, child_preemption=True), ("c1", "P", 4), ("c2", "P", 4))
    s = Scenario(nodes("n", 1, 8), tree)
    s.submit("c1-a", "c1", 4, priority=4).submit("c2-a", "c2", 2, priority=2).submit("c2-b", "c2", 2, priority=2)
    s.submit("serve", "P", 2, kind="inference")
    assert evictions(s) == [("c2-b", "child_preemption", "serve")]


def test_child_preemption_off_parent_jobs_wait() -> None:
    tree = quotas(Quota("P", None, 8), ("c1", "P", 4), ("c2", "P", 4))
    s = Scenario(nodes("n", 1, 8), tree)
    s.submit("c1-a", "c1", 4).submit("c2-a", "c2", 4)
    s.submit("serve", "P", 2, kind="inference")
    assert evictions(s) == [] and s.state("serve") == "pending"


def test_same_level_preemption_priority_over_a_sibling_above_its_guarantee() -> None:
    tree = quotas(
        ("P", None, 4),
        Quota("x", "P", 2, weight=0, same_level_preemption=True),
        ("y", "P", 1),
    )
    s = Scenario(nodes("n", 1, 4), tree)
    s.submit("x1", "x", 1, priority=7).submit("x2", "x", 1, priority=7)
    s.submit("y1", "y", 1, priority=3).submit("y2", "y", 1, priority=3)
    s.submit("x3", "x", 1, priority=7)
    assert evictions(s) == [("y2", "same_level", "x3")]
    assert s.state("x3") == "running" and s.state("y1") == "running"  # y keeps its guarantee
    # converged: y2 does not take its GPU back by fair share
    assert schedule(s.snapshot).decisions == ()


def test_elastic_replicas_shrink_before_whole_jobs_go() -> None:
    s = Scenario(nodes("n", 1, 8), quotas(("a", None, 4), ("b", None, 4)))
    s.submit("a-fixed", "a", 2).submit("a-elastic", "a", 1, replicas=6, min_replicas=2)
    assert s.allocated("a") == 8
    s.submit("b-job", "b", 3)
    shrinks = [d for d in s.decisions if isinstance(d, Shrink)]
    assert [(d.job_id, len(d.remove)) for d in shrinks] == [("a-elastic", 3)]
    assert evictions(s) == [] and s.state("a-fixed") == "running"


def test_min_runtime_protects_young_jobs() -> None:
    s = Scenario(nodes("n", 1, 2), quotas(Quota("a", None, 1, min_runtime_seconds=60), ("b", None, 1)))
    s.submit("a-borrow", "a", 1).submit("a-own", "a", 1)
    s.submit("b-job", "b", 1)
    assert evictions(s) == [] and s.state("b-job") == "pending"
    s.advance(61)
    assert evictions(s) == [("a-own", "reclaim", "b-job")]


def test_grace_period_victim_releases_later_and_nobody_else_is_evicted() -> None:
    s = Scenario(nodes("n", 1, 2), quotas(("a", None, 1), ("b", None, 1)))
    s.submit("a1", "a", 1, grace_seconds=30).submit("a2", "a", 1, grace_seconds=30)
    s.submit("b-job", "b", 1)
    assert evictions(s) == [("a2", "reclaim", "b-job")]
    assert s.state("a2") == "releasing" and s.state("b-job") == "pending"
    assert s.last.pending["b-job"].code == "waiting_for_eviction"
    assert schedule(s.snapshot).decisions == ()  # no more victims while a2 releases
    s.advance(30)
    assert s.state("b-job") == "running" and s.state("a2") == "pending"


def test_consolidation_needs_every_moved_job_replaced() -> None:
    s = Scenario(nodes("n", 2, 2), quotas(("a", None, 4)))
    s.submit("x", "a", 1).submit("y", "a", 1, kind="notebook")
    s.snapshot = replace(
        s.snapshot,
        jobs=(
            replace(s.job("x"), placements=(ReplicaPlacement("n-1", (0,)),)),
            replace(s.job("y"), placements=(ReplicaPlacement("n-2", (0,)),)),
        ),
    )
    s.submit("two", "a", 2)
    assert [d.job_id for d in s.decisions if isinstance(d, Evict)] == ["x"]  # y is not preemptible
    assert s.state("two") == "running"


# -- §5 promises ------------------------------------------------------------------------------
def test_same_snapshot_same_decisions() -> None:
    s = Scenario(nodes("n", 2, 2), quotas(("a", None, 2), ("b", None, 2)))
    s.submit("a2", "a", 2).submit("a1", "a", 1).submit("b1", "b", 1)
    snapshot = replace(s.snapshot, jobs=(*s.snapshot.jobs, Job("b2", "b", 1, submitted_at=9)))
    assert schedule(snapshot) == schedule(snapshot)
    assert snapshot == replace(s.snapshot, jobs=(*s.snapshot.jobs, Job("b2", "b", 1, submitted_at=9)))


def test_unknown_quota_is_explained() -> None:
    result = schedule(Snapshot((Node("n", 1),), (), (Job("j", "nowhere", 1),), 0))
    assert result.pending["j"].code == "unknown_quota"
