"""build_snapshot: the engine's view of the database, read as raw rows and reused where unchanged."""

from __future__ import annotations

from datetime import UTC, datetime

from scheduling.models import Job, ReplicaPlacementRecord
from scheduling.selectors import build_snapshot
from tests.scheduling.conftest import Cluster

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def engine_job(cluster: Cluster, name: str) -> object:
    snapshot, _index = build_snapshot(NOW)
    return next(job for job in snapshot.jobs if job.id == str(cluster.jobs[name].pk))


def test_times_states_and_replicas_arrive_as_the_engine_wants_them(cluster: Cluster) -> None:
    submitted = cluster.submit("train", gpus=2, priority=4)
    started = datetime(2026, 11, 21, 11, 59, 30, 250000, tzinfo=UTC)
    Job.objects.filter(pk=submitted.pk).update(state="running", started_at=started, allocated_gpus=2)
    ReplicaPlacementRecord.objects.create(job=submitted, node=cluster.nodes["gpu-2"], devices=[4, 5])
    snapshot, index = build_snapshot(NOW)
    (job,) = snapshot.jobs
    assert (job.quota, job.workspace, job.priority, job.state) == ("team-a", "lab", 4, "running")
    assert job.submitted_at == submitted.submitted_at.timestamp() and job.started_at == started.timestamp()
    assert [(p.node, p.devices, p.fraction) for p in job.placements] == [("gpu-2", (4, 5), 1.0)]
    assert index.jobs[job.id].revision == submitted.revision and index.jobs[job.id].name == "train"


def test_an_unchanged_job_is_reused_and_a_changed_one_is_read_anew(cluster: Cluster) -> None:
    cluster.submit("steady")
    cluster.submit("bumped", priority=2)
    steady, bumped = engine_job(cluster, "steady"), engine_job(cluster, "bumped")
    Job.objects.filter(pk=cluster.jobs["bumped"].pk).update(priority=8)
    assert engine_job(cluster, "steady") is steady
    fresh = engine_job(cluster, "bumped")
    assert fresh is not bumped and fresh.priority == 8  # type: ignore[attr-defined]
    ReplicaPlacementRecord.objects.create(job=cluster.jobs["steady"], node=cluster.nodes["gpu-1"], devices=[0])
    Job.objects.filter(pk=cluster.jobs["steady"].pk).update(state="running")
    placed = engine_job(cluster, "steady")
    assert placed.placements[0].devices == (0,)  # type: ignore[attr-defined]
    cluster.quotas["team-a"].name = "team-alpha"
    cluster.quotas["team-a"].save()
    assert engine_job(cluster, "steady").quota == "team-alpha"  # type: ignore[attr-defined]
