"""SCHEDULING.md §5 "Stable": no ping-pong, nobody is evicted for a job that then cannot run.

The runtime engineer's report: team-a's 16-GPU preemptible training borrows the whole pool and is
evicted for team-b's 8-GPU inference (within team-b's guarantee). When the training's grace ends
and it is back in the queue, the next cycle must admit the inference, not the training again.
"""

from __future__ import annotations

from dataclasses import replace

from scheduling.engine import Admit, Evict, Job, Snapshot, schedule
from tests.scheduling.engine.helpers import Scenario, nodes, quotas


def evictions(s: Scenario) -> list[tuple[str, str | None]]:
    return [(d.job_id, d.beneficiary) for d in s.decisions if isinstance(d, Evict)]


def borrowed_pool(grace: float) -> Scenario:
    tree = quotas(("org", None, 16), ("team-a", "org", 8), ("team-b", "org", 8))
    s = Scenario(nodes("n", 2, 8), tree)
    s.submit("train", "team-a", 8, replicas=2, grace_seconds=grace)
    assert s.state("train") == "running"  # borrows the whole pool
    return s


def test_released_training_is_not_readmitted_ahead_of_its_beneficiary() -> None:
    s = borrowed_pool(grace=30).submit("serve", "team-b", 8, kind="inference")
    assert evictions(s) == [("train", "serve")]
    assert s.state("train") == "releasing" and s.last.pending["serve"].code == "waiting_for_eviction"
    s.advance(30)  # the grace ends: the training is back in the queue, beside its beneficiary
    assert [type(d).__name__ for d in s.decisions] == ["Admit"]
    assert s.state("serve") == "running" and s.state("train") == "pending"
    assert s.last.pending["train"].code == "insufficient_capacity"
    for _ in range(3):  # converged: later cycles change nothing
        s.advance(30)
        assert s.decisions == []


def test_both_pending_admits_the_entitled_job_before_the_borrower() -> None:
    s = borrowed_pool(grace=30).submit("serve", "team-b", 8, kind="inference")
    s.advance(30)
    both_pending = replace(
        s.snapshot,
        jobs=tuple(replace(j, state="pending", placements=(), started_at=None) for j in s.snapshot.jobs),
    )
    result = schedule(both_pending)
    assert [(type(d).__name__, d.job_id) for d in result.decisions] == [("Admit", "serve")]
    assert result.pending["train"].code == "insufficient_capacity"
    assert "guaranteed_only" not in {r.code for r in result.pending.values()}


def test_grace_zero_evicts_once_and_the_training_waits() -> None:
    s = borrowed_pool(grace=0).submit("serve", "team-b", 8, kind="inference")
    assert evictions(s) == [("train", "serve")]
    assert s.state("serve") == "running" and s.state("train") == "pending"
    s.advance(60)
    assert s.decisions == []


def test_submitted_together_the_borrower_is_not_admitted_only_to_be_evicted() -> None:
    tree = quotas(("org", None, 16), ("team-a", "org", 8), ("team-b", "org", 8))
    jobs = (
        Job("train", "team-a", 8, replicas=2, priority=3, submitted_at=1),
        Job("serve", "team-b", 8, priority=7, preemptible=False, submitted_at=2),
    )
    s = Scenario(nodes("n", 2, 8), tree)
    s.snapshot = replace(s.snapshot, jobs=jobs)
    s.run()
    assert evictions(s) == []
    assert s.state("serve") == "running" and s.state("train") == "pending"


def releasing_next_to_free_gpus() -> Scenario:
    """t2 (4 GPUs, grace 30) releases on n-2 for `serve`, next to 4 free GPUs on the same node."""
    tree = quotas(("team-a", None, 8), ("team-b", None, 8))
    s = Scenario(nodes("n", 2, 8), tree)
    s.submit("t1", "team-a", 8, grace_seconds=30).submit("t2", "team-a", 4, grace_seconds=30)
    s.submit("serve", "team-b", 8, kind="inference")
    assert evictions(s) == [("t2", "serve")]
    assert s.state("t2") == "releasing" and s.state("serve") == "pending"
    return s


def test_free_gpus_next_to_a_releasing_victim_stay_promised_to_its_beneficiary() -> None:
    s = releasing_next_to_free_gpus()
    s.submit("t3", "team-a", 4, grace_seconds=30)  # would fit in the 4 free GPUs of n-2
    assert s.state("t3") == "pending"
    assert s.last.pending["t3"].code == "insufficient_capacity"
    s.submit("other", "team-b", 2)  # nor may the beneficiary's own quota take them
    assert s.state("other") == "pending"
    s.advance(30)
    assert s.state("serve") == "running"
    assert evictions(s) == []  # nobody evicted a second time for serve
    assert s.state("t3") == "pending" and s.state("t2") == "pending"


def test_a_beneficiary_still_starts_at_once_when_it_fits_elsewhere() -> None:
    s = releasing_next_to_free_gpus()
    s.cancel("t1")  # n-1 is free now: serve does not wait for t2
    assert s.state("serve") == "running"
    assert s.job("serve").placements[0].node == "n-1"


def test_beneficiary_runs_once_every_victim_released() -> None:
    tree = quotas(("team-a", None, 8), ("team-b", None, 8))
    s = Scenario(nodes("n", 2, 8), tree)
    s.submit("t3", "team-a", 8, priority=5)
    s.submit("t1", "team-a", 4, grace_seconds=10).submit("t2", "team-a", 4, grace_seconds=40)
    s.submit("serve", "team-b", 8, kind="inference")
    victims = evictions(s)
    assert {v for v, _ in victims} == {"t1", "t2"} and {b for _, b in victims} == {"serve"}
    s.advance(10)  # t1 is gone, t2 still releasing: nobody takes t1's GPUs
    assert s.state("t1") == "pending" and s.state("serve") == "pending"
    assert s.decisions == []
    s.advance(30)
    assert s.state("serve") == "running" and evictions(s) == []
    result = schedule(s.snapshot)
    assert result.decisions == ()
    admitted = [d for d in s.decisions if isinstance(d, Admit)]
    assert [d.job_id for d in admitted] == ["serve"]


def test_snapshot_with_beneficiary_pending_and_victim_gone_prefers_beneficiary() -> None:
    """Whatever order the snapshot lists them in, the entitled job goes first."""
    tree = quotas(("org", None, 16), ("team-a", "org", 8), ("team-b", "org", 8))
    s = Scenario(nodes("n", 2, 8), tree)
    for order in ((0, 1), (1, 0)):
        jobs = (
            Job("train", "team-a", 8, replicas=2, priority=3, submitted_at=1, grace_seconds=30),
            Job("serve", "team-b", 8, priority=7, preemptible=False, submitted_at=2),
        )
        snapshot = Snapshot(s.snapshot.nodes, s.snapshot.quotas, tuple(jobs[k] for k in order), 100.0)
        result = schedule(snapshot)
        assert [(type(d).__name__, d.job_id) for d in result.decisions] == [("Admit", "serve")]


def test_released_victim_waits_while_its_beneficiary_starts() -> None:
    """A requeued victim keeps `beneficiary`: the freed GPUs go to that job, not back to it."""
    from dataclasses import replace

    from scheduling.engine import Admit, Job, Node, Quota, ReplicaPlacement, Snapshot, schedule

    node = (Node("n1", 4),)
    team = (Quota("team", None, 4, same_level_preemption=True),)
    victim = Job("v", "team", 4, priority=5, submitted_at=1.0, beneficiary="b")
    beneficiary = Job("b", "team", 4, priority=3, submitted_at=2.0)
    result = schedule(Snapshot(node, team, (victim, beneficiary), now=100.0))
    assert [d.job_id for d in result.decisions if isinstance(d, Admit)] == ["b"]  # b goes first
    # while b cannot start (2 GPUs still held), v does not take the 2 that are free
    holder = Job(
        "x", "team", 2, preemptible=False, state="running", started_at=0.0, placements=(ReplicaPlacement("n1", (0, 1)),)
    )
    small = replace(victim, gpus=2)
    result = schedule(Snapshot(node, team, (holder, small, beneficiary), now=100.0))
    assert not result.decisions
    reason = result.pending["v"]
    assert reason.code == "queue_blocked"
    assert reason.message == "waits while b, which it was evicted for, starts"
    # once the beneficiary runs (or is gone), the link is ignored
    result = schedule(Snapshot(node, team, (victim,), now=100.0))
    assert [d.job_id for d in result.decisions if isinstance(d, Admit)] == ["v"]


def test_a_victim_without_grace_names_its_beneficiary_until_it_starts() -> None:
    """serve needs t1 (no grace: back in the queue at once) and t2 (30 s of grace). While t2
    releases, t1 stays promised to serve, so it cannot take back its GPUs and be evicted twice."""
    tree = quotas(("org", None, 24), ("team-a", "org", 8), ("team-b", "org", 16))
    s = Scenario(nodes("n", 3, 8), tree)
    s.submit("t0", "team-a", 8, preemptible=False)
    s.submit("t1", "team-a", 8, grace_seconds=0).submit("t2", "team-a", 8, grace_seconds=30)
    s.submit("serve", "team-b", 8, replicas=2, kind="inference")
    assert sorted(evictions(s)) == [("t1", "serve"), ("t2", "serve")]
    assert s.job("t1").state == "pending" and s.job("t1").beneficiary == "serve"
    s.advance(10)
    assert s.decisions == [] and s.state("t1") == "pending"
    s.advance(20)
    assert s.state("serve") == "running" and s.job("t1").beneficiary is None
    s.advance(30)
    assert s.decisions == []
