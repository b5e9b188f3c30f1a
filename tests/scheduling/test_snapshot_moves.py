"""On a SQLite database whose moves are logged (simulate's, scheduling.snapshot_moves), a snapshot
reads in full only the jobs that moved: whatever wrote the change (a service, a hand edit, the
cycle's commit, a placement or a workspace), the next snapshot sees it and is the one a full read
would give; a read whose transaction rolled back is no base for the next one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from quotas.models import Node, NodeState, Quota, ResourcePool
from scheduling import snapshot as snapshots
from scheduling import snapshot_moves, snapshot_rows
from scheduling.clock import get_clock
from scheduling.cycle import run_cycle
from scheduling.models import Job, JobState, ReplicaPlacementRecord
from scheduling.snapshot import build_snapshot
from tests.scheduling.conftest import Cluster, build_cluster
from workspaces.models import Workspace

pytestmark = [
    pytest.mark.django_db(transaction=True),  # each write its own transaction, as simulate's are
    pytest.mark.skipif("connection.vendor != 'sqlite'", reason="PostgreSQL snapshots read row versions instead"),
]


@pytest.fixture
def busy(settings: Any) -> Iterator[Cluster]:
    """Eight GPUs held, three jobs waiting, moves logged, and a first snapshot read."""
    settings.SCHEDULER_TRIGGER = "none"
    cluster = build_cluster(node_gpus=(8,))
    snapshot_moves.track_moves()
    cluster.submit("holder", gpus=8, preemptible=False)
    for name in ("first", "second", "third"):
        cluster.submit(name, "team-b", gpus=4)
    for _ in range(3):
        run_cycle(trigger="test")
    assert cluster.state("holder") == JobState.RUNNING and cluster.state("first") == JobState.PENDING
    snapshot()
    yield cluster
    snapshot_moves.stop_tracking()
    snapshots._memory.read = ((), {}, {}, {})


def snapshot() -> tuple[Any, snapshots.SnapshotIndex]:
    return build_snapshot(get_clock().now())


def same_as_a_full_read(snapshot: Any, index: snapshots.SnapshotIndex) -> None:
    snapshots._memory.read = ((), {}, {}, {})  # nothing to build on: a full read
    full, full_index = build_snapshot(get_clock().now())
    assert full_index.jobs_read == len(full.jobs)
    assert snapshot.jobs == full.jobs
    assert index.jobs == full_index.jobs


def same_frame_as_a_full_read(snapshot: Any) -> None:
    snapshot_rows._built.frame = (None, None)  # nothing kept: nodes and quotas read
    full, _index = build_snapshot(get_clock().now())
    assert (snapshot.nodes, snapshot.quotas, snapshot.pool_placements) == (
        full.nodes,
        full.quotas,
        full.pool_placements,
    )


def test_nodes_quotas_and_pools_unwritten_are_not_read_again(busy: Cluster) -> None:
    with CaptureQueriesContext(connection) as captured:
        snapshot_now, _index = snapshot()
    tables = [f'FROM "{model._meta.db_table}"' for model in (Node, Quota, ResourcePool)]
    assert not [query for query in captured.captured_queries if any(table in query["sql"] for table in tables)]
    same_frame_as_a_full_read(snapshot_now)


def test_nodes_quotas_and_pools_written_by_anyone_are_read_again(busy: Cluster) -> None:
    Node.objects.filter(pk=busy.nodes["gpu-1"].pk).update(state=NodeState.CORDONED)
    snapshot_now, _index = snapshot()
    assert not snapshot_now.nodes[0].schedulable
    same_frame_as_a_full_read(snapshot_now)
    snapshot()
    Quota.objects.filter(pk=busy.quotas["team-b"].pk).update(gpus=3)
    snapshot_now, _index = snapshot()
    assert next(quota for quota in snapshot_now.quotas if quota.name == "team-b").gpus == 3
    snapshot()
    ResourcePool.objects.filter(pk=busy.pool.pk).update(placement="spread")
    snapshot_now, _index = snapshot()
    assert snapshot_now.placement == "spread"
    same_frame_as_a_full_read(snapshot_now)


def test_a_frame_read_rolled_back_is_no_base(busy: Cluster) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        Node.objects.filter(pk=busy.nodes["gpu-1"].pk).update(state=NodeState.CORDONED)
        assert not snapshot()[0].nodes[0].schedulable
        raise RuntimeError("rolled back")
    # The count went back with the write: another write counts the same, and is still read.
    Quota.objects.filter(pk=busy.quotas["team-b"].pk).update(gpus=3)
    snapshot_now, _index = snapshot()
    assert snapshot_now.nodes[0].schedulable
    assert next(quota for quota in snapshot_now.quotas if quota.name == "team-b").gpus == 3


def test_nothing_moved_reads_no_job_row(busy: Cluster) -> None:
    snapshot_now, index = snapshot()
    assert index.jobs_read == 0
    assert len(snapshot_now.jobs) == 4
    same_as_a_full_read(snapshot_now, index)


def test_a_hand_edit_is_read_by_the_next_snapshot(busy: Cluster) -> None:
    Job.objects.filter(pk=busy.jobs["second"].pk).update(priority=9)
    snapshot_now, index = snapshot()
    assert index.jobs_read == 1
    assert next(job for job in snapshot_now.jobs if job.id == str(busy.jobs["second"].pk)).priority == 9
    same_as_a_full_read(snapshot_now, index)


def test_placements_workspaces_and_new_or_gone_jobs_are_seen(busy: Cluster) -> None:
    placement = ReplicaPlacementRecord.objects.get(job=busy.jobs["holder"])
    ReplicaPlacementRecord.objects.filter(pk=placement.pk).update(devices=[7, 6, 5, 4, 3, 2, 1, 0])
    snapshot_now, index = snapshot()
    assert index.jobs_read == 1
    same_as_a_full_read(snapshot_now, index)

    # A placement moved to another job: both jobs moved.
    ReplicaPlacementRecord.objects.filter(pk=placement.pk).update(job=busy.jobs["first"])
    snapshot_now, index = snapshot()
    assert index.jobs_read == 2
    same_as_a_full_read(snapshot_now, index)
    ReplicaPlacementRecord.objects.filter(pk=placement.pk).update(job=busy.jobs["holder"])
    snapshot()

    Workspace.objects.filter(pk=busy.workspace.pk).update(name="lab-renamed")
    snapshot_now, index = snapshot()
    assert index.jobs_read == 4 and {job.workspace for job in snapshot_now.jobs} == {"lab-renamed"}
    same_as_a_full_read(snapshot_now, index)

    Job.objects.filter(pk=busy.jobs["first"].pk).update(state=JobState.CANCELLED)
    busy.submit("fourth", "team-b", gpus=2)
    snapshot_now, index = snapshot()
    ids = [job.id for job in snapshot_now.jobs]
    assert str(busy.jobs["first"].pk) not in ids and str(busy.jobs["fourth"].pk) in ids
    same_as_a_full_read(snapshot_now, index)


def test_a_moved_job_keeps_the_engine_order(busy: Cluster) -> None:
    """submitted_at, then id: a job moved to the front is read at the front, as a full read has it."""
    earliest = Job.objects.order_by("submitted_at").values_list("submitted_at", flat=True)[0]
    Job.objects.filter(pk=busy.jobs["third"].pk).update(submitted_at=earliest - timedelta(seconds=1))
    snapshot_now, index = snapshot()
    assert snapshot_now.jobs[0].id == str(busy.jobs["third"].pk)
    same_as_a_full_read(snapshot_now, index)


def test_cycles_commit_on_what_they_read(busy: Cluster) -> None:
    Job.objects.filter(pk=busy.jobs["holder"].pk).update(state=JobState.SUCCEEDED)
    ReplicaPlacementRecord.objects.filter(job=busy.jobs["holder"]).delete()
    outcome = run_cycle(trigger="test")
    assert outcome.committed and {busy.jobs["first"].pk, busy.jobs["second"].pk} <= set(outcome.admitted_ids)
    same_as_a_full_read(*snapshot())


def test_a_read_rolled_back_is_no_base(busy: Cluster) -> None:
    """Inside a transaction that rolls back, the log the read emptied comes back, and the writes
    it read are undone: the next snapshot reads everything."""
    with pytest.raises(RuntimeError), transaction.atomic():
        Job.objects.filter(pk=busy.jobs["second"].pk).update(priority=9)
        snapshot()
        raise RuntimeError("rolled back")
    assert not snapshot_moves.tracked(snapshot_moves.database_key())
    snapshot_now, index = snapshot()
    assert index.jobs_read == 4
    assert next(job for job in snapshot_now.jobs if job.id == str(busy.jobs["second"].pk)).priority != 9
    same_as_a_full_read(snapshot_now, index)


def test_stopping_drops_the_log(busy: Cluster) -> None:
    snapshot_moves.stop_tracking()
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE name LIKE %s", [f"{snapshot_moves.MOVED_TABLE}%"])
        assert cursor.fetchall() == []
    _snapshot, index = snapshot()
    assert index.jobs_read == 4


def test_reasons_the_commit_wrote_are_taken_as_written(busy: Cluster) -> None:
    """The cycle's own pending reasons are not read again: the next snapshot has them as written."""
    waiting = busy.submit("fifth", "team-b", gpus=8)
    outcome = run_cycle(trigger="test")
    assert outcome.committed and waiting.pk not in outcome.admitted_ids
    snapshot_now, index = snapshot()
    assert index.jobs_read == 0
    seen = index.jobs[str(waiting.pk)]
    stored = Job.objects.get(pk=waiting.pk)
    assert stored.shown_code and (seen.reason_code, seen.reason_message, seen.position) == stored.shown_reason
    assert stored.reason_code == ""  # in its own table, not the job's columns
    same_as_a_full_read(snapshot_now, index)


def test_reasons_of_a_commit_rolled_back_are_read_again(busy: Cluster) -> None:
    waiting = busy.submit("fifth", "team-b", gpus=8)
    with pytest.raises(RuntimeError), transaction.atomic():
        run_cycle(trigger="test")
        raise RuntimeError("rolled back")
    snapshot_now, index = snapshot()
    assert index.jobs_read == 5 and index.jobs[str(waiting.pk)].reason_code == ""
    same_as_a_full_read(snapshot_now, index)
