"""A node moving between pools while the scheduler works, in real concurrent transactions on
PostgreSQL (issue 24): whatever comes first, no job is ever placed on a node of another pool than
its quota's, and the move, the cycle and the submission all end (no deadlock). The move takes the
commit turn, then both pools' locks in id order (quotas.services.nodes)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import F

from quotas.models import GpuDevice, Node, Quota, ResourcePool
from quotas.services import update_node
from scheduling import cycle as cycle_module
from scheduling import engine
from scheduling.clock import get_clock
from scheduling.cycle import CycleOutcome, decide_and_commit
from scheduling.lock import CycleLease, issue_token
from scheduling.models import Job, ReplicaPlacementRecord
from tests.scheduling.conftest import Cluster, build_cluster
from tests.scheduling.test_concurrency import in_threads

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        "connection.vendor != 'postgresql'",
        reason="SQLite serializes every write transaction, so a move and a commit can never overlap there",
    ),
]

assert connection  # the skipif condition reads it

# How long a thread waits for the other before the test calls it a hang.
WAIT_SECONDS = 20


def two_pools() -> tuple[Cluster, ResourcePool]:
    """The default pool: gpu-1 (8), Quota1 (0) → team-a (0), so that gpu-1 may leave it; the pool
    b: b-1 (8) with its own root b-root (0)."""
    cluster = build_cluster(node_gpus=(8,), tree=(("Quota1", None, 0), ("team-a", "Quota1", 0)))
    pool_b = ResourcePool.objects.create(name="b")
    node = Node.objects.create(pool=pool_b, name="b-1", gpus=8, cpu=96, memory_gib=768)
    GpuDevice.objects.bulk_create([GpuDevice(node=node, index=i) for i in range(8)])
    cluster.quotas["b-root"] = Quota.objects.create(pool=pool_b, name="b-root", gpus=0)
    cluster.workspace.quotas.add(cluster.quotas["b-root"])
    return cluster, pool_b


def placed_outside_their_pool() -> list[str]:
    """Each replica on a node of another pool than its job's quota's, as `job on node`."""
    wrong = ReplicaPlacementRecord.objects.exclude(node__pool_id=F("job__quota__pool_id"))
    return [f"{job} on {node}" for job, node in wrong.values_list("job__name", "node__name")]


def lease(holder: str) -> CycleLease:
    return CycleLease(token=issue_token(), holder=holder, backend="none")


def move(node_name: str, pool_name: str) -> str:
    """Moves the node; answers "moved" or the refusal's sentence."""
    try:
        update_node(actor=None, node=Node.objects.get(name=node_name), pool=ResourcePool.objects.get(name=pool_name))
    except ValidationError as refused:
        return " ".join(refused.messages)
    return "moved"


def test_a_node_moved_after_the_cycle_decided_gets_no_job_of_its_old_pool(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The cycle has decided to place train (team-a, default pool) on gpu-1 and not yet committed
    when gpu-1 moves to the pool b (nothing runs on it: the move is allowed). The commit that
    follows must not place train on a node of b."""
    settings.SCHEDULER_TRIGGER = "none"  # only the cycle forced here runs
    cluster, _pool_b = two_pools()
    cluster.submit("train", gpus=8)
    decided = threading.Event()
    moved = threading.Event()
    real = engine.schedule

    def schedule_then_let_the_move_through(snapshot: engine.Snapshot) -> engine.CycleResult:
        result = real(snapshot)
        assert any(isinstance(decision, engine.Admit) for decision in result.decisions)
        decided.set()
        assert moved.wait(timeout=WAIT_SECONDS), "the move did not end"
        return result

    monkeypatch.setattr("scheduling.cycle.engine.schedule", schedule_then_let_the_move_through)

    def race(number: int) -> object:
        if number == 0:
            return decide_and_commit(lease=lease("cycle"), trigger="t", now=get_clock().now())
        assert decided.wait(timeout=WAIT_SECONDS), "the cycle did not decide"
        try:
            return move("gpu-1", "b")
        finally:
            moved.set()

    outcome, moved_answer = in_threads(2, race)

    assert isinstance(outcome, CycleOutcome)
    assert (outcome.refused or "").startswith("stale_snapshot")  # the move moved the fence on
    assert moved_answer == "moved"
    assert Node.objects.get(name="gpu-1").pool.name == "b"
    assert placed_outside_their_pool() == []
    assert cluster.state("train") == "pending"  # its pool has no node left


def test_a_move_while_a_cycle_commits_waits_for_the_commit_and_is_refused_naming_the_job(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The commit is writing train's placement on gpu-1 when the move comes: the move waits for
    the commit (the commit turn), then sees train there and is refused, naming it."""
    settings.SCHEDULER_TRIGGER = "none"
    cluster, _pool_b = two_pools()
    cluster.submit("train", gpus=8, command="sleep 60")
    placed = threading.Event()
    real = cycle_module._record_allocations

    def record_then_linger(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        placed.set()
        threading.Event().wait(1.0)  # the commit stays open while the move starts

    monkeypatch.setattr("scheduling.cycle._record_allocations", record_then_linger)

    def race(number: int) -> object:
        if number == 0:
            return decide_and_commit(lease=lease("cycle"), trigger="t", now=get_clock().now())
        assert placed.wait(timeout=WAIT_SECONDS), "the cycle placed nothing"
        return move("gpu-1", "b")

    outcome, moved_answer = in_threads(2, race)

    assert isinstance(outcome, CycleOutcome) and outcome.committed
    assert "gpu-1 cannot change pools while jobs run there (train)" in moved_answer
    assert Node.objects.get(name="gpu-1").pool.name == "default"
    assert cluster.state("train") == "running"
    assert placed_outside_their_pool() == []


def test_two_nodes_moving_in_opposite_directions_at_once_both_move(settings: Any) -> None:
    """gpu-1 to b and b-1 to default at the same moment: each move locks both pools, in id order,
    so neither waits for the other in a circle."""
    settings.SCHEDULER_TRIGGER = "none"
    two_pools()
    barrier = threading.Barrier(2, timeout=WAIT_SECONDS)

    def race(number: int) -> str:
        barrier.wait()
        return move("gpu-1", "b") if number == 0 else move("b-1", "default")

    assert in_threads(2, race) == ["moved", "moved"]
    assert dict(Node.objects.values_list("name", "pool__name")) == {"gpu-1": "b", "b-1": "default"}


def test_submissions_racing_node_moves_never_run_a_job_in_the_wrong_pool(settings: Any) -> None:
    """Jobs of both pools are submitted (each submission runs a cycle, inline) while gpu-1 and
    b-1 swap pools back and forth; at every step, each placement is on its quota's pool's node,
    and every thread ends."""
    settings.SCHEDULER_TRIGGER = "inline"
    cluster, _pool_b = two_pools()
    rounds = 6
    barrier = threading.Barrier(2, timeout=WAIT_SECONDS)
    refusals: list[str] = []

    def race(number: int) -> int:
        for round_number in range(rounds):
            barrier.wait()
            if number == 0:
                quota = "team-a" if round_number % 2 else "b-root"
                cluster.submit(f"job-{round_number}", quota, gpus=2, duration=3600)
            else:
                target = "b" if Node.objects.get(name="gpu-1").pool.name == "default" else "default"
                answer = move("gpu-1", target)
                if answer != "moved":
                    refusals.append(answer)
        return rounds

    assert in_threads(2, race) == [rounds, rounds]
    assert placed_outside_their_pool() == []
    # A refused move names the jobs that kept the node in its pool.
    assert all("cannot change pools while jobs run there" in refusal for refusal in refusals)
    running = Job.objects.filter(state="running").count()
    assert running >= 1
