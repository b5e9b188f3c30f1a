"""The published walkthroughs (shared/scenarios/ and SCHEDULING.md §1), replayed on the engine."""

from __future__ import annotations

from scheduling.engine import Admit, Evict, Grow, Quota, Shrink
from tests.scheduling.engine.helpers import Scenario, nodes, quotas


def runai() -> Scenario:
    return Scenario(nodes("node", 2, 2), quotas(("team-a", None, 2), ("team-b", None, 2)))


def test_runai_team_a_borrows_idle_gpus() -> None:
    s = runai().submit("a2", "team-a", 2).submit("a1", "team-a", 1).submit("b1", "team-b", 1)
    assert [s.state(j) for j in ("a2", "a1", "b1")] == ["running"] * 3
    assert (s.allocated("team-a"), s.allocated("team-b")) == (3, 1)


def test_runai_team_b_reclaims_its_guarantee() -> None:
    s = runai().submit("a2", "team-a", 2).submit("a1", "team-a", 1).submit("b1", "team-b", 1)
    s.submit("b2", "team-b", 1)
    evicts = [d for d in s.decisions if isinstance(d, Evict)]
    assert [(e.job_id, e.rule, e.beneficiary) for e in evicts] == [("a1", "reclaim", "b2")]
    assert s.state("a1") == "pending" and s.state("b2") == "running"
    assert (s.allocated("team-a"), s.allocated("team-b")) == (2, 2)
    assert s.last.pending["a1"].code == "insufficient_capacity"


def test_runai_a1_runs_again_when_a2_ends() -> None:
    s = runai().submit("a2", "team-a", 2).submit("a1", "team-a", 1).submit("b1", "team-b", 1)
    s.submit("b2", "team-b", 1).cancel("a2")
    assert s.state("a1") == "running"


def test_runai_consolidation_moves_a1_for_a_whole_node() -> None:
    s = runai().submit("a2", "team-a", 2).submit("a1", "team-a", 1).submit("b1", "team-b", 1)
    s.submit("b2", "team-b", 1).cancel("a2").cancel("b2")
    a1_node = s.job("a1").placements[0].node
    assert a1_node != s.job("b1").placements[0].node  # fragmented: 1 free GPU on each node
    s.submit("a2-again", "team-a", 2)
    first = s.results[0].decisions
    assert isinstance(first[0], Evict) and (first[0].job_id, first[0].rule) == ("a1", "consolidation")
    assert isinstance(first[1], Admit) and first[1].job_id == "a1"
    assert isinstance(first[2], Admit) and first[2].job_id == "a2-again"
    assert s.state("a2-again") == "running" and s.state("a1") == "running"
    assert s.job("a1").placements[0].node == s.job("b1").placements[0].node
    assert s.state("b1") == "running" and not s.job("b1").started_at  # b1 was not moved


def pai() -> Scenario:
    tree = quotas(
        Quota("Quota1", None, 128, child_preemption=True),
        ("Quota1.1", "Quota1", 48),
        ("Quota1.2", "Quota1", 80),
    )
    s = Scenario(nodes("gpu", 16, 8), tree)
    s.submit("train-b", "Quota1.1", 8, replicas=6, min_replicas=4)
    s.submit("dev-c", "Quota1.2", 1, kind="notebook")
    s.submit("train-c", "Quota1.2", 8, replicas=9)
    return s


def test_pai_teams_b_and_c_fill_the_pool() -> None:
    s = pai()
    assert (s.replicas("train-b"), s.replicas("train-c"), s.state("dev-c")) == (6, 9, "running")
    assert s.allocated("Quota1") == 121


def test_pai_inference_admitted_by_child_preemption_shrinking_elastic_training() -> None:
    s = pai().submit("serve-a", "Quota1", 8, kind="inference", replicas=2)
    assert s.state("serve-a") == "running"
    shrinks = [d for d in s.decisions if isinstance(d, Shrink)]
    assert [(d.job_id, len(d.remove), d.beneficiary) for d in shrinks] == [("train-b", 2, "serve-a")]
    assert not [d for d in s.decisions if isinstance(d, Evict)]  # nobody evicted whole
    assert (s.replicas("train-b"), s.replicas("train-c"), s.state("dev-c")) == (4, 9, "running")
    assert s.last.quotas["Quota1"].allocated_self == 16


def test_pai_cancel_inference_lets_training_grow_back() -> None:
    s = pai().submit("serve-a", "Quota1", 8, kind="inference", replicas=2).cancel("serve-a")
    assert [type(d) for d in s.decisions] == [Grow]
    assert s.replicas("train-b") == 6


def test_pai_transfer_evicts_nobody_when_nobody_waits() -> None:
    s = pai().submit("serve-a", "Quota1", 8, kind="inference", replicas=2).cancel("serve-a")
    s.set_quotas(
        quotas(
            Quota("Quota1", None, 128, child_preemption=True),
            ("Quota1.1", "Quota1", 56),
            ("Quota1.2", "Quota1", 72),
        )
    )
    assert s.decisions == []
    assert s.allocated("Quota1.2") == 73 and s.last.quotas["Quota1.2"].guaranteed == 72


def test_pai_without_child_preemption_parent_jobs_only_have_self_and_idle() -> None:
    tree = quotas(Quota("Quota1", None, 128), ("Quota1.1", "Quota1", 48), ("Quota1.2", "Quota1", 80))
    s = Scenario(nodes("gpu", 16, 8), tree)
    s.submit("train-b", "Quota1.1", 8, replicas=6, min_replicas=4)
    s.submit("dev-c", "Quota1.2", 1, kind="notebook")
    s.submit("train-c", "Quota1.2", 8, replicas=9)
    s.submit("serve-a", "Quota1", 8, kind="inference", replicas=2)
    assert s.state("serve-a") == "pending"
    assert s.last.pending["serve-a"].code == "guaranteed_only"
    assert "Quota1/self" in s.last.pending["serve-a"].message
    assert s.replicas("train-b") == 6


def test_scheduling_md_split_4_2_2_admits_in_proportion() -> None:
    tree = quotas(("a", None, 4), ("b", None, 2), ("c", None, 2), ("d", None, 8))
    s = Scenario(nodes("n", 2, 8), tree)
    for quota in "abc":
        for n in range(10):
            s.submit(f"{quota}{n}", quota, 1)
    # submission order lets a take everything first; reclaim by fair share evens it out
    assert [s.last.quotas[q].fair_share for q in "abcd"] == [8, 4, 4, 0]
    assert [s.allocated(q) for q in "abcd"] == [8, 4, 4, 0]
