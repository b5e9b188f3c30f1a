"""A running worker's snapshot reads in full only the jobs whose rows moved (scheduling.snapshot):
whatever wrote the change, a service, a hand edit, another process, the next cycle sees it, and
its snapshot is the one a full read would give."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from scheduling import pending_reasons
from scheduling import snapshot as snapshots
from scheduling.clock import get_clock
from scheduling.cycle import run_cycle
from scheduling.models import Job, JobState, ReplicaPlacementRecord
from scheduling.providers import commit_turn
from scheduling.snapshot import build_snapshot
from tests.scheduling.conftest import Cluster, build_cluster
from workspaces.models import Workspace

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),  # each write its own transaction, as another process's
    pytest.mark.skipif(
        "connection.vendor != 'postgresql'", reason="row versions (xmin, ctid) are PostgreSQL's; SQLite reads all"
    ),
]


@pytest.fixture
def busy(settings: Any) -> Cluster:
    """Eight GPUs held, three jobs waiting, after cycles enough that nothing moves any more."""
    settings.SCHEDULER_TRIGGER = "none"
    cluster = build_cluster(node_gpus=(8,))
    cluster.submit("holder", gpus=8, preemptible=False)
    for name in ("first", "second", "third"):
        cluster.submit(name, "team-b", gpus=4)
    for _ in range(3):
        run_cycle(trigger="test")
    assert cluster.state("holder") == JobState.RUNNING and cluster.state("first") == JobState.PENDING
    return cluster


def incremental() -> tuple[Any, snapshots.SnapshotIndex]:
    return build_snapshot(get_clock().now(), incremental=True)


def same_as_a_full_read(snapshot: Any, index: snapshots.SnapshotIndex) -> None:
    full, full_index = build_snapshot(get_clock().now())
    assert snapshot.jobs == full.jobs
    assert index.jobs == full_index.jobs


def test_nothing_changed_reads_no_job_row(busy: Cluster) -> None:
    snapshot, index = incremental()
    assert index.jobs_read == 0
    assert len(snapshot.jobs) == 4
    same_as_a_full_read(snapshot, index)


def test_a_hand_edit_that_records_nothing_is_read_by_the_next_cycle(busy: Cluster) -> None:
    """No SchedulingChange, no fence move, no signal: only the row's new version tells."""
    Job.objects.filter(pk=busy.jobs["second"].pk).update(priority=9)
    snapshot, index = incremental()
    assert index.jobs_read == 1
    assert next(job for job in snapshot.jobs if job.id == str(busy.jobs["second"].pk)).priority == 9
    same_as_a_full_read(*incremental())
    # The cycle decides on it: a job that now fits is admitted.
    Job.objects.filter(pk=busy.jobs["third"].pk).update(gpus=0.5, quota=busy.quotas["team-a"])
    Job.objects.filter(pk=busy.jobs["holder"].pk).update(state=JobState.SUCCEEDED)
    ReplicaPlacementRecord.objects.filter(job=busy.jobs["holder"]).delete()
    outcome = run_cycle(trigger="test")
    assert outcome.committed and busy.jobs["third"].pk in outcome.admitted_ids


def test_placements_workspaces_and_new_or_gone_jobs_are_seen(busy: Cluster) -> None:
    placement = ReplicaPlacementRecord.objects.get(job=busy.jobs["holder"])
    ReplicaPlacementRecord.objects.filter(pk=placement.pk).update(devices=[0, 1, 2, 3, 4, 5, 6, 7][::-1])
    snapshot, index = incremental()
    assert index.jobs_read == 1
    holder = next(job for job in snapshot.jobs if job.id == str(busy.jobs["holder"].pk))
    assert holder.placements[0].devices == (7, 6, 5, 4, 3, 2, 1, 0)
    Workspace.objects.filter(pk=busy.workspace.pk).update(name="lab-renamed")
    snapshot, index = incremental()
    assert index.jobs_read == 4 and {job.workspace for job in snapshot.jobs} == {"lab-renamed"}
    busy.submit("fourth", "team-b", gpus=2)
    Job.objects.filter(pk=busy.jobs["first"].pk).update(state=JobState.CANCELLED)
    snapshot, index = incremental()
    assert index.jobs_read == 1
    assert {job.id for job in snapshot.jobs} == {
        str(busy.jobs[name].pk) for name in ("holder", "second", "third", "fourth")
    }
    same_as_a_full_read(snapshot, index)


def test_a_fence_moved_by_another_writer_reads_no_more_but_enough_cycles_make_a_full_read(
    busy: Cluster, settings: Any
) -> None:
    """Another writer's commit (a node edit's turn here; the worker's other process's cycle) moves
    the fence: what it wrote moved row versions, so the next cycle still reads only those."""
    commit_turn()  # a node edit's turn: not this worker's commit
    assert incremental()[1].jobs_read == 0
    run_cycle(trigger="test")
    settings.SCHEDULER_FULL_CYCLE_BEATS = 2
    reads = [incremental()[1].jobs_read for _ in range(4)]
    # The safety net: a full read every SCHEDULER_FULL_CYCLE_BEATS reads (two were read above).
    assert reads == [4, 0, 0, 4]


def test_renamed_quotas_and_nodes_make_a_full_read(busy: Cluster) -> None:
    busy.quotas["team-b"].name = "team-bee"
    busy.quotas["team-b"].save()
    snapshot, index = incremental()
    assert index.jobs_read == 4
    assert {job.quota for job in snapshot.jobs} == {"team-a", "team-bee"}
    assert connection.vendor == "postgresql"


def test_the_reasons_a_commit_wrote_are_not_read_again(busy: Cluster) -> None:
    """The commit writes reasons into their own table, not the job rows, and hands them to the
    snapshot's memory: the next snapshot reads none of those jobs again, and is right."""
    busy.submit("fourth", "team-b", gpus=4, priority=9)  # first in team-b's queue: the others move back
    outcome = run_cycle(trigger="test")
    assert outcome.committed
    fourth = Job.objects.get(pk=busy.jobs["fourth"].pk)
    assert fourth.state == JobState.PENDING and fourth.shown_code and fourth.shown_position == 1
    snapshot, index = incremental()
    assert index.jobs_read == 0
    assert index.jobs[str(fourth.pk)].reason_message == fourth.shown_message
    same_as_a_full_read(snapshot, index)


def test_reasons_another_process_wrote_are_read_by_the_next_cycle(busy: Cluster) -> None:
    """A reason lives in a table of its own and moves no job row: its row's version is part of the
    job's mark, so a reason written by the worker's other process (its commit, not this one's
    memory) is read again, and only that job."""
    second = Job.objects.get(pk=busy.jobs["second"].pk)
    with transaction.atomic():  # as a commit writes them (the rows go through a temporary table)
        written = pending_reasons.write_versions([(second.pk, second.revision, "quota", "from elsewhere", 7)])
    assert list(written) == [second.pk] and written[second.pk]
    snapshot, index = incremental()
    assert index.jobs_read == 1
    assert (index.jobs[str(second.pk)].reason_message, index.jobs[str(second.pk)].position) == (
        "from elsewhere",
        7,
    )
    same_as_a_full_read(snapshot, index)
    # Written again by the other process: a new version, read again.
    with transaction.atomic():
        pending_reasons.write([(second.pk, second.revision, "quota", "and again", 8)])
    assert incremental()[1].jobs_read == 1
