"""Cordoned and draining nodes (AGENT.md's node states, docs/scheduling.md "Node states").

Cordoned: up, its jobs stay, nothing new is placed on it, and only what its jobs hold counts in
the capacity fair share divides. Draining: cordoned, and every job on it is evicted (rule
`drain`, after its grace period) and requeued to run elsewhere. Uncordoned: ready again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypedDict, Unpack

import pytest

from scheduling.engine import Evict, Node, Quota, ReplicaPlacement, Snapshot, fair_shares
from tests.scheduling.engine.helpers import Scenario, quotas


class NodeState(TypedDict, total=False):
    """The fields of a Node an admin's action changes."""

    ready: bool
    schedulable: bool
    draining: bool


def with_node(s: Scenario, name: str, **state: Unpack[NodeState]) -> Scenario:
    """The scenario after an admin changed one node's state, run to convergence."""
    s.snapshot = replace(
        s.snapshot, nodes=tuple(replace(node, **state) if node.name == name else node for node in s.snapshot.nodes)
    )
    return s.run()


CORDON: NodeState = {"schedulable": False}
DRAIN: NodeState = {"schedulable": False, "draining": True}
UNCORDON: NodeState = {"schedulable": True, "draining": False}


def two_nodes() -> Scenario:
    """n-1 and n-2, 8 GPUs each; a (8) and b (8); "first" runs on n-1 (pack fills n-1 first)."""
    s = Scenario((Node("n-1", 8), Node("n-2", 8)), quotas(("a", None, 8), ("b", None, 8)))
    s.submit("first", "a", 4)
    assert s.job("first").placements[0].node == "n-1"
    return s


def nodes_of(s: Scenario, job: str) -> set[str]:
    return {placement.node for placement in s.job(job).placements}


def drains(s: Scenario) -> list[tuple[str, str | None]]:
    return [(d.job_id, d.beneficiary) for d in s.decisions if isinstance(d, Evict) and d.rule == "drain"]


@pytest.mark.parametrize(
    ("state", "first_state", "first_nodes", "second_nodes", "drained"),
    [
        pytest.param({}, "running", {"n-1"}, {"n-1"}, [], id="ready-packs-onto-the-fuller-node"),
        pytest.param(CORDON, "running", {"n-1"}, {"n-2"}, [], id="cordoned-keeps-its-job-takes-no-new-one"),
        pytest.param(DRAIN, "running", {"n-2"}, {"n-2"}, [("first", None)], id="draining-moves-its-job-elsewhere"),
        pytest.param({"ready": False}, "running", {"n-1"}, {"n-2"}, [], id="not-ready-takes-no-new-one"),
    ],
)
def test_node_state_table(
    state: NodeState,
    first_state: str,
    first_nodes: set[str],
    second_nodes: set[str],
    drained: list[tuple[str, str | None]],
) -> None:
    s = with_node(two_nodes(), "n-1", **state)
    assert drains(s) == drained
    s.submit("second", "b", 2)
    assert s.state("first") == first_state
    assert nodes_of(s, "first") == first_nodes
    assert nodes_of(s, "second") == second_nodes


def test_drain_waits_for_the_grace_period_then_requeues() -> None:
    s = Scenario((Node("n-1", 8), Node("n-2", 8)), quotas(("a", None, 16)))
    s.submit("slow", "a", 8, grace_seconds=30)
    drained_node = s.job("slow").placements[0].node
    with_node(s, drained_node, **DRAIN)
    evict = next(d for d in s.decisions if isinstance(d, Evict))
    assert (evict.rule, evict.beneficiary) == ("drain", None)
    assert evict.reason == (
        f"node {drained_node} is draining: the job is evicted after its grace period of 30 s "
        "and goes back to the queue to run elsewhere"
    )
    assert s.state("slow") == "releasing"  # SIGTERM, and the GPUs stay held meanwhile
    assert nodes_of(s, "slow") == {drained_node}
    s.advance(30)
    assert s.state("slow") == "running"
    assert nodes_of(s, "slow") == {"n-1", "n-2"} - {drained_node}


def test_drain_evicts_jobs_that_preemption_may_not_touch() -> None:
    """Non-preemptible, high priority, within min runtime: a drain is the admin's, not a rule's."""
    s = Scenario((Node("n-1", 8), Node("n-2", 8)), quotas(Quota("a", None, 16, min_runtime_seconds=3600)))
    s.submit("serve", "a", 4, kind="inference")
    with_node(s, "n-1", **DRAIN)
    assert drains(s) == [("serve", None)]
    assert s.state("serve") == "running" and nodes_of(s, "serve") == {"n-2"}


def test_a_gang_with_one_replica_on_the_draining_node_goes_whole() -> None:
    s = Scenario((Node("n-1", 8), Node("n-2", 8)), quotas(("a", None, 16)))
    s.submit("gang", "a", 8, replicas=2)
    assert nodes_of(s, "gang") == {"n-1", "n-2"}
    with_node(s, "n-1", **DRAIN)
    assert drains(s) == [("gang", None)]
    assert s.state("gang") == "pending"  # 16 GPUs asked, 8 take placements
    assert s.last.pending["gang"].code in ("no_fit", "insufficient_capacity", "exceeds_cluster")


def test_uncordon_makes_the_node_take_placements_again() -> None:
    s = with_node(two_nodes(), "n-2", **CORDON)
    s.submit("big", "b", 8)
    assert s.state("big") == "pending"
    with_node(s, "n-2", **UNCORDON)
    assert s.state("big") == "running" and nodes_of(s, "big") == {"n-2"}


def test_cordoning_evicts_nothing_and_drained_nodes_stay_empty() -> None:
    s = with_node(two_nodes(), "n-1", **CORDON)
    assert not [d for d in s.decisions if isinstance(d, Evict)]
    with_node(s, "n-1", **DRAIN)
    assert len(drains(s)) == 1
    s.submit("later", "a", 1)
    assert "n-1" not in nodes_of(s, "later")
    assert drains(s) == []  # evicted once; the next cycles find nothing more to drain


def _snapshot(n2: Node, jobs_on_n2: float) -> Snapshot:
    """a and b guarantee 4 each and a asks for 16; b runs `jobs_on_n2` GPUs on n-2."""
    from scheduling.engine import Job

    jobs = [Job("a-wants", "a", 16, state="pending")]
    if jobs_on_n2:
        jobs.append(
            Job(
                "b-runs",
                "b",
                jobs_on_n2,
                state="running",
                started_at=0,
                placements=(ReplicaPlacement("n-2", tuple(range(int(jobs_on_n2)))),),
            )
        )
    return Snapshot((Node("n-1", 8), n2), quotas(("a", None, 4), ("b", None, 4)), tuple(jobs), 0.0)


@pytest.mark.parametrize(
    ("n2", "a_share", "b_share"),
    [
        pytest.param(Node("n-2", 8), 14, 2, id="ready-all-16-divided"),
        pytest.param(Node("n-2", 8, schedulable=False), 8, 2, id="cordoned-counts-only-what-its-jobs-hold"),
        pytest.param(Node("n-2", 8, draining=True), 8, 2, id="draining-counts-only-what-its-jobs-hold"),
        pytest.param(Node("n-2", 8, ready=False), 6, 2, id="not-ready-counts-nothing"),
    ],
)
def test_capacity_that_fair_share_divides(n2: Node, a_share: float, b_share: float) -> None:
    shares = fair_shares(_snapshot(n2, 2))
    assert (shares["a"], shares["b"]) == (a_share, b_share)


def test_a_job_on_a_cordoned_node_is_not_over_its_fair_share() -> None:
    """b's 2 GPUs on cordoned n-2 are covered by the capacity, so b is no reclaim victim."""
    s = Scenario((Node("n-1", 8), Node("n-2", 8, schedulable=False)), quotas(("a", None, 4), ("b", None, 4)))
    s.snapshot = _snapshot(Node("n-2", 8, schedulable=False), 2)
    s.run()
    assert s.state("b-runs") == "running"
    assert s.state("a-wants") == "pending"
    assert s.last.quotas["b"].allocated == 2 and s.last.quotas["b"].fair_share == 2
