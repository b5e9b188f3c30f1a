"""A job's life through the real services, cycle, engine and simulated executor."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from scheduling import services
from scheduling.clock import SimulatedClock, use_clock
from scheduling.models import Job, JobEvent, JobState, ReplicaPlacementRecord
from scheduling.selectors import build_snapshot
from tests.scheduling.conftest import Cluster


def kinds(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("at", "id").values_list("kind", flat=True))


@pytest.mark.parametrize(
    ("fields", "field", "numbers"),
    [
        ({"gpus": 0}, "gpus", "got 0"),
        ({"gpus": -2}, "gpus", "got -2"),
        ({"gpus": 1.5}, "gpus", "got 1.5"),
        ({"gpus": 2, "replicas": 2, "min_replicas": 4}, "min_replicas", "replicas 2 < min_replicas 4"),
        ({"gpus": 1, "replicas": 0}, "replicas", "got 0"),
        ({"gpus": 1, "kind": "batch"}, "kind", "'batch'"),
        ({"gpus": 1, "priority": 10}, "priority", "got 10"),
        ({"gpus": 1, "priority": 0}, "priority", "got 0"),
        ({"gpus": 1, "cpu": -1}, "cpu", "got -1"),
        ({"gpus": 1, "grace_seconds": -5}, "grace_seconds", "got -5"),
        ({"gpus": 1, "duration": -1}, "duration", "got -1"),
    ],
    ids=[
        "zero-gpus",
        "negative-gpus",
        "fraction-above-one",
        "replicas-below-min",
        "no-replicas",
        "unknown-kind",
        "priority-above-9",
        "priority-below-1",
        "negative-cpu",
        "negative-grace",
        "negative-duration",
    ],
)
def test_a_bad_submission_names_the_field_and_the_numbers(
    cluster: Cluster, fields: dict[str, Any], field: str, numbers: str
) -> None:
    fields = {"kind": "training", **fields}
    with pytest.raises(ValidationError) as refused:
        cluster.submit("bad", **fields)
    assert field in refused.value.message_dict
    assert numbers in " ".join(refused.value.message_dict[field])
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("kind", "priority", "preemptible"),
    [("inference", 7, False), ("notebook", 5, False), ("training", 3, True)],
    ids=["inference", "notebook", "training"],
)
def test_each_kind_has_its_default_priority_and_preemptibility(
    cluster: Cluster, kind: str, priority: int, preemptible: bool
) -> None:
    job = cluster.submit("job", kind=kind, gpus=1)
    assert (job.priority, job.preemptible) == (priority, preemptible)


def test_a_quota_not_bound_to_the_workspace_is_refused(cluster: Cluster) -> None:
    from quotas.models import Quota

    stray = Quota.objects.create(pool=cluster.pool, name="stray", parent=cluster.quotas["Quota1"], gpus=0)
    cluster.quotas["stray"] = stray
    with pytest.raises(ValidationError) as refused:
        cluster.submit("job", "stray", gpus=1)
    assert "stray is not bound to workspace lab" in refused.value.message_dict["quota"][0]


def test_a_submitted_job_is_admitted_placed_and_started(cluster: Cluster) -> None:
    cluster.submit("train", gpus=4, replicas=2)
    services.converge()
    job = cluster.job("train")
    assert job.state == JobState.RUNNING
    assert (job.allocated_gpus, job.running_replicas) == (8, 2)
    assert kinds(job) == ["submitted", "admitted", "started"]
    placements = list(ReplicaPlacementRecord.objects.filter(job=job))
    assert sum(len(p.devices) for p in placements) == 8
    assert job.shown_code == "" and job.shown_position is None


def test_a_job_that_cannot_run_waits_with_a_reason_and_a_position(cluster: Cluster) -> None:
    cluster.submit("huge", gpus=8, replicas=3)
    services.converge()
    job = cluster.job("huge")
    assert job.state == JobState.PENDING
    assert job.shown_code == "exceeds_cluster"
    assert "24" in job.shown_message and "16" in job.shown_message
    assert job.shown_position == 1


def test_a_job_with_a_duration_finishes_by_itself_and_frees_its_gpus() -> None:
    clock = SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))
    with use_clock(clock):
        from tests.scheduling.conftest import build_cluster

        cluster = build_cluster(node_gpus=(8,), tree=(("Quota1", None, 8), ("team-a", "Quota1", 8)))
        cluster.submit("first", gpus=8, duration=60)
        cluster.submit("second", gpus=8)
        services.converge()
        assert (cluster.state("first"), cluster.state("second")) == (JobState.RUNNING, JobState.PENDING)
        clock.advance(59)
        services.converge()
        assert cluster.state("first") == JobState.RUNNING
        clock.advance(1)
        services.converge()
        assert (cluster.state("first"), cluster.state("second")) == (JobState.SUCCEEDED, JobState.RUNNING)
        assert kinds(cluster.job("first"))[-1] == "finished"
        assert not ReplicaPlacementRecord.objects.filter(job=cluster.jobs["first"]).exists()


pytestmark = pytest.mark.django_db


def _borrow_everything(cluster: Cluster, **fields: Any) -> None:
    """team-a's preemptible training borrows team-b's idle guarantee."""
    cluster.submit("borrower", "team-a", gpus=8, replicas=2, **fields)
    services.converge()
    assert cluster.job("borrower").allocated_gpus == 16


def test_reclaim_with_a_grace_period_releases_after_it_and_requeues() -> None:
    from tests.scheduling.conftest import build_cluster

    clock = SimulatedClock()
    with use_clock(clock):
        cluster = build_cluster()
        _borrow_everything(cluster, grace_seconds=30)
        cluster.submit("owner", "team-b", gpus=8, kind="inference")
        services.converge()
        borrower = cluster.job("borrower")
        assert borrower.state == JobState.RELEASING
        assert borrower.allocated_gpus == 16  # it keeps its GPUs through the grace period
        assert borrower.beneficiary_id == cluster.jobs["owner"].pk
        evicted = JobEvent.objects.get(job=borrower, kind="evicted")
        assert evicted.rule == "reclaim" and evicted.beneficiary_id == cluster.jobs["owner"].pk
        owner = cluster.job("owner")
        assert (owner.state, owner.shown_code) == (JobState.PENDING, "waiting_for_eviction")

        clock.advance(29)
        services.converge()
        assert cluster.state("borrower") == JobState.RELEASING
        clock.advance(1)
        from scheduling.executors import get_executor

        assert get_executor().tick(clock.now()) == 1
        borrower = cluster.job("borrower")
        assert (borrower.state, borrower.preemptions, borrower.allocated_gpus) == (JobState.PENDING, 1, 0)
        assert kinds(borrower)[-2:] == ["evicted", "requeued"]
        assert not ReplicaPlacementRecord.objects.filter(job=borrower).exists()
        assert borrower.beneficiary_id == cluster.jobs["owner"].pk  # the promise outlives the release

        services.converge()
        assert cluster.state("owner") == JobState.RUNNING  # the GPUs went to the job they were freed for
        borrower = cluster.job("borrower")
        assert (borrower.state, borrower.beneficiary_id, borrower.preemptions) == (JobState.PENDING, None, 1)
        assert not services.run_cycle(trigger="test").decisions  # converged: no ping-pong


def test_without_a_grace_period_the_victim_is_released_in_the_same_commit(cluster: Cluster) -> None:
    _borrow_everything(cluster)
    cluster.submit("owner", "team-b", gpus=8, kind="inference")
    outcome = services.run_cycle(trigger="test")
    kinds_of = {d["job"]: d["kind"] for d in outcome.decisions}
    assert kinds_of == {"borrower": "evict", "owner": "admit"}
    assert cluster.state("owner") == JobState.RUNNING
    borrower = cluster.job("borrower")
    assert (borrower.state, borrower.preemptions, borrower.allocated_gpus) == (JobState.PENDING, 1, 0)
    assert kinds(borrower)[-2:] == ["evicted", "requeued"]


def test_a_victim_without_grace_stays_promised_while_its_beneficiary_waits_for_another() -> None:
    """The owner needs two victims: one with no grace period (back in the queue at once) and one
    releasing for 30 s. The first must not take its GPUs back meanwhile (it would be evicted twice
    for the owner): it names the owner until the owner starts, as a victim released after its grace."""
    from tests.scheduling.conftest import build_cluster

    clock = SimulatedClock()
    with use_clock(clock):
        cluster = build_cluster(
            node_gpus=(8, 8, 8), tree=(("Quota1", None, 24), ("team-a", "Quota1", 8), ("team-b", "Quota1", 16))
        )
        cluster.submit("own", "team-a", gpus=8, preemptible=False)
        cluster.submit("quick", "team-a", gpus=8, grace_seconds=0)
        cluster.submit("slow", "team-a", gpus=8, grace_seconds=30)
        services.converge()
        cluster.submit("owner", "team-b", gpus=8, replicas=2, kind="inference")
        services.converge()
        quick, owner = cluster.job("quick"), cluster.jobs["owner"]
        assert (quick.state, quick.beneficiary_id) == (JobState.PENDING, owner.pk)
        assert (cluster.state("slow"), cluster.state("owner")) == (JobState.RELEASING, JobState.PENDING)

        clock.advance(10)
        services.converge()
        assert (cluster.state("quick"), cluster.state("owner")) == (JobState.PENDING, JobState.PENDING)

        clock.advance(20)
        from scheduling.executors import get_executor

        get_executor().tick(clock.now())
        services.converge()
        assert cluster.state("owner") == JobState.RUNNING
        assert cluster.job("quick").beneficiary_id is None  # the promise is kept: it queues as anyone
        evicted = JobEvent.objects.filter(kind="evicted", job__name__in=["quick", "slow"]).count()
        assert evicted == 2 and not services.run_cycle(trigger="test").decisions


def test_a_victim_that_asked_not_to_be_requeued_fails(cluster: Cluster) -> None:
    _borrow_everything(cluster, requeue=False)
    cluster.submit("owner", "team-b", gpus=8, kind="inference")
    services.converge()
    borrower = cluster.job("borrower")
    assert (borrower.state, borrower.reason_code) == (JobState.FAILED, "preempted")
    assert borrower.finished_at is not None


def test_cancelling_a_running_job_frees_its_gpus_for_the_next(cluster: Cluster) -> None:
    cluster.submit("first", "team-a", gpus=8, replicas=2, kind="inference", priority=9, preemptible=False)
    cluster.submit("second", "team-b", gpus=8, kind="inference")
    services.converge()
    services.cancel_job(actor=None, job=cluster.jobs["first"])
    services.converge()
    assert cluster.state("first") == JobState.CANCELLED
    assert cluster.state("second") == JobState.RUNNING
    assert kinds(cluster.job("first"))[-1] == "cancelled"


@pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.CANCELLED], ids=["succeeded", "cancelled"])
def test_a_finished_job_cannot_be_cancelled_or_finished_again(cluster: Cluster, state: str) -> None:
    job = cluster.submit("job", gpus=1)
    services.converge()
    if state == JobState.SUCCEEDED:
        services.finish_job(job=job)
    else:
        services.cancel_job(actor=None, job=job)
    with pytest.raises(ValidationError) as refused:
        services.cancel_job(actor=None, job=job)
    assert f"already {state}" in refused.value.message_dict["state"][0]
    with pytest.raises(ValidationError):
        services.finish_job(job=job)


def test_a_pending_job_cannot_finish_but_can_fail(cluster: Cluster) -> None:
    job = cluster.submit("huge", gpus=8, replicas=3)
    with pytest.raises(ValidationError) as refused:
        services.finish_job(job=job)
    assert "pending" in refused.value.message_dict["state"][0]
    assert services.fail_job(job=job, message="image not found").state == JobState.FAILED


def test_a_dry_run_submission_says_what_would_happen_and_writes_nothing(cluster: Cluster) -> None:
    preview = services.preview_submit_job(
        actor=None,
        workspace=cluster.workspace,
        quota=cluster.quotas["team-a"],
        name="probe",
        kind="training",
        gpus=4,
    )
    assert isinstance(preview, services.SubmitPreview)
    assert preview.would_admit and preview.reason is None
    assert sum(len(p["devices"]) for p in preview.placements) == 4
    too_big = services.preview_submit_job(
        actor=None,
        workspace=cluster.workspace,
        quota=cluster.quotas["team-a"],
        name="probe",
        kind="training",
        gpus=8,
        replicas=3,
    )
    assert isinstance(too_big, services.SubmitPreview)
    assert not too_big.would_admit and too_big.reason is not None and too_big.reason["code"] == "exceeds_cluster"
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_a_restart_rebuilds_the_same_state_and_a_further_cycle_changes_nothing(cluster: Cluster) -> None:
    cluster.submit("a", gpus=4, replicas=2)
    cluster.submit("b", "team-b", gpus=0.5)
    cluster.submit("c", "team-b", gpus=0.5)
    services.converge()
    before, _ = build_snapshot(datetime.now(UTC))
    outcome = services.run_cycle(trigger="after-restart")
    after, _ = build_snapshot(datetime.now(UTC))
    assert outcome.committed and outcome.decisions == ()
    assert {j.id: (j.state, j.placements) for j in before.jobs} == {j.id: (j.state, j.placements) for j in after.jobs}
    fractional = [j for j in after.jobs if j.gpus == 0.5]
    assert all(j.placements[0].fraction == 0.5 for j in fractional)


def test_many_ends_reported_at_once_end_each_job_as_finish_job_would(cluster: Cluster) -> None:
    """finish_jobs (the Slurm executor's one write for every end one squeue showed): each running
    job ends succeeded or failed with its own event and audit record; a job that moved on meanwhile
    (cancelled) is left as it is and not in the answer."""
    from quotas.models import AuditRecord

    done, broken, cancelled = (cluster.submit(name, gpus=1) for name in ("done", "broken", "cancelled"))
    services.converge()
    services.cancel_job(actor=None, job=cancelled)
    ended = services.finish_jobs(
        [
            services.Ending(done.pk, True, "every replica exited with code 0"),
            services.Ending(broken.pk, False, "replica 0 exited with code 3"),
            services.Ending(cancelled.pk, True, "too late"),
        ]
    )
    assert [job.name for job in ended] == ["done", "broken"]
    states = dict(Job.objects.values_list("name", "state"))
    assert states == {"done": JobState.SUCCEEDED, "broken": JobState.FAILED, "cancelled": JobState.CANCELLED}
    assert JobEvent.objects.filter(job=broken, message="replica 0 exited with code 3").exists()
    audited = AuditRecord.objects.filter(object_type="job", action__in=("job.finish", "job.fail"))
    assert sorted(audited.values_list("action", "object_repr")) == [("job.fail", "broken"), ("job.finish", "done")]
