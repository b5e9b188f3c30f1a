"""The invariants the load and fault runs check afterwards: each breach is named in a sentence."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from quotas.models import Quota
from scheduling import services
from scheduling.models import Job, JobEvent, JobEventKind, JobState, ReplicaPlacementRecord
from scheduling.selectors import invariant_violations
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def busy(cluster: Cluster) -> Cluster:
    """Running, pending, cancelled and finished jobs, all through the services and a cycle."""
    cluster.submit("train-a", gpus=4)
    cluster.submit("train-b", "team-b", gpus=8)
    cluster.submit("waits", "team-b", gpus=8)
    cluster.submit("dropped", gpus=1)
    services.run_cycle(trigger="test")
    services.cancel_job(actor=None, job=cluster.job("dropped"))
    services.finish_job(job=cluster.job("train-a"))
    services.run_cycle(trigger="test")
    return cluster


def test_the_services_leave_no_violation(busy: Cluster) -> None:
    assert busy.state("train-b") == JobState.RUNNING
    assert invariant_violations() == []
    call_command("check_invariants")


def test_a_gpu_held_by_two_running_jobs_is_named(busy: Cluster) -> None:
    runner = busy.job("train-b")
    placement = ReplicaPlacementRecord.objects.filter(job=runner).first()
    assert placement is not None
    intruder = busy.submit("intruder", "team-b", gpus=1)
    Job.objects.filter(pk=intruder.pk).update(state=JobState.RUNNING, running_replicas=1, allocated_gpus=1)
    ReplicaPlacementRecord.objects.create(job=intruder, node=placement.node, devices=[placement.devices[0]])
    assert f"node {placement.node_id} GPU {placement.devices[0]} is held 2 times over" in invariant_violations()


def test_a_job_whose_placements_disagree_with_its_allocation_is_named(busy: Cluster) -> None:
    runner = busy.job("train-b")
    Job.objects.filter(pk=runner.pk).update(allocated_gpus=6)
    assert any("says 1 replicas and 6 GPUs, its placements hold 1 and 8" in v for v in invariant_violations())


def test_a_quota_above_its_limit_is_named(busy: Cluster) -> None:
    # train-b and waits (borrowing team-a's idle GPUs once train-a finished) run on team-b.
    assert busy.state("waits") == JobState.RUNNING
    Quota.objects.filter(pk=busy.quotas["team-b"].pk).update(limit=4)
    assert invariant_violations() == ["quota team-b holds 16 GPUs, above its limit of 4"]


def test_a_final_state_without_its_event_is_named(busy: Cluster) -> None:
    dropped = busy.job("dropped")
    JobEvent.objects.filter(job=dropped, kind=JobEventKind.CANCELLED).delete()
    assert f"job dropped ({dropped.pk}) is cancelled without a cancelled event" in invariant_violations()
    with pytest.raises(CommandError, match="1 invariant violation"):
        call_command("check_invariants")


def test_a_job_without_its_submitted_event_is_named(busy: Cluster) -> None:
    waits = busy.job("waits")
    JobEvent.objects.filter(job=waits, kind=JobEventKind.SUBMITTED).delete()
    assert f"job waits ({waits.pk}) has 0 submitted events" in invariant_violations()
