"""`submit_jobs`: a burst of jobs through one service call, exactly as if submitted one by one."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import PermissionDenied, ValidationError

from quotas.models import AuditRecord
from scheduling import events, services, triggers
from scheduling.clock import SimulatedClock, use_clock
from scheduling.job_writes import NewJobs
from scheduling.models import Job, JobEvent
from scheduling.services import JobSubmission
from tests.scheduling.conftest import Cluster
from workspaces import services as workspace_services

pytestmark = pytest.mark.django_db

SUBMISSIONS: tuple[dict[str, Any], ...] = (
    {"name": "train", "quota": "team-a", "kind": "training", "gpus": 4, "replicas": 2, "min_replicas": 1},
    {"name": "serve", "quota": "team-b", "kind": "inference", "gpus": 1, "cpu": 8, "memory_gib": 32},
    {"name": "dev", "quota": "team-a", "kind": "notebook", "gpus": 0.5, "priority": 2, "preemptible": True},
    {
        "name": "batch",
        "quota": "Quota1",
        "kind": "training",
        "gpus": 2,
        "duration": 60,
        "grace_seconds": 5,
        "requeue": False,
        "command": "python train.py",
    },
)


def submission(cluster: Cluster, fields: dict[str, Any]) -> JobSubmission:
    return JobSubmission(workspace=cluster.workspace, **{**fields, "quota": cluster.quotas[fields["quota"]]})


def written_rows() -> dict[str, list[Any]]:
    """Every row a submit writes, with the job's id replaced by its name (ids differ between runs)."""
    names = dict(Job.objects.values_list("id", "name"))
    skip = {"id"}
    return {
        "jobs": [{k: v for k, v in row.items() if k not in skip} for row in Job.objects.order_by("id").values()],
        "events": [
            (names[job_id], kind, at, message)
            for job_id, kind, at, message in JobEvent.objects.order_by("id").values_list(
                "job_id", "kind", "at", "message"
            )
        ],
        "audit": [
            (actor_id, names[int(object_id)], object_type, object_repr, after)
            for actor_id, object_id, object_type, object_repr, after in AuditRecord.objects.filter(action="job.submit")
            .order_by("id")
            .values_list("actor_id", "object_id", "object_type", "object_repr", "after")
        ],
    }


def forget_jobs() -> None:
    AuditRecord.objects.filter(action="job.submit").delete()
    Job.objects.all().delete()


@pytest.mark.parametrize("as_member", [False, True], ids=["scenario-runner", "member"])
def test_a_batch_writes_the_same_rows_as_one_by_one_submits(
    cluster: Cluster, member: AbstractUser, as_member: bool
) -> None:
    actor = member if as_member else None
    with use_clock(SimulatedClock(datetime(2025, 1, 1, tzinfo=UTC))):
        for fields in SUBMISSIONS:
            services.submit_job(actor=actor, **vars_of(submission(cluster, fields)))
        one_by_one = written_rows()
        forget_jobs()

        jobs = services.submit_jobs(actor=actor, submissions=[submission(cluster, f) for f in SUBMISSIONS])

    assert [job.name for job in jobs] == [fields["name"] for fields in SUBMISSIONS]
    assert [job.pk for job in jobs] == list(Job.objects.order_by("id").values_list("id", flat=True))
    assert written_rows() == one_by_one
    assert len(one_by_one["events"]) == len(one_by_one["audit"]) == len(SUBMISSIONS)
    assert one_by_one["events"][0][3] == "2 × 4 GPUs to team-a in lab, priority 3"


def vars_of(job: JobSubmission) -> dict[str, Any]:
    return {name: getattr(job, name) for name in JobSubmission.__dataclass_fields__}


@pytest.mark.parametrize(
    ("bad", "field", "numbers"),
    [
        pytest.param({"gpus": 1.5}, "gpus", "got 1.5", id="fraction-above-one"),
        pytest.param(
            {"replicas": 2, "min_replicas": 3}, "min_replicas", "replicas 2 < min_replicas 3", id="min-replicas"
        ),
        pytest.param({"priority": 12}, "priority", "got 12", id="priority"),
        pytest.param({"quota": "stray"}, "quota", "stray is not bound to workspace lab", id="unbound-quota"),
    ],
)
def test_a_bad_job_in_the_middle_writes_nothing_and_is_named(
    cluster: Cluster, bad: dict[str, Any], field: str, numbers: str
) -> None:
    from quotas.models import Quota

    cluster.quotas["stray"] = Quota.objects.create(pool=cluster.pool, name="stray", parent=cluster.quotas["Quota1"])
    batch = [
        {"name": "first", "quota": "team-a", "kind": "training", "gpus": 1},
        {"name": "second", "quota": "team-a", "kind": "training", "gpus": 1, **bad},
        {"name": "third", "quota": "team-b", "kind": "training", "gpus": 1},
    ]
    with pytest.raises(ValidationError) as refused:
        services.submit_jobs(actor=None, submissions=[submission(cluster, fields) for fields in batch])

    (message,) = refused.value.message_dict[field]
    assert message.startswith("job 'second' (2 of 3): ")
    assert numbers in message
    assert not Job.objects.exists()
    assert not JobEvent.objects.exists()
    assert not AuditRecord.objects.filter(action="job.submit").exists()


def test_a_single_submit_keeps_its_messages_without_the_batch_prefix(cluster: Cluster) -> None:
    with pytest.raises(ValidationError) as refused:
        cluster.submit("alone", gpus=1.5)
    assert refused.value.message_dict["gpus"][0].startswith("a fraction of a GPU must be below 1")


@pytest.fixture
def capped(cluster: Cluster, member: AbstractUser) -> Cluster:
    """Developers of lab may hold at most 4 GPUs of team-a each."""
    workspace_services.set_scheduling_config(
        actor=None,
        workspace=cluster.workspace,
        rules=[
            {
                "quota": "team-a",
                "roles": ["developer"],
                "caps": [{"priority_min": 1, "priority_max": 9, "max_gpus_per_user": 4}],
            }
        ],
    )
    cluster.submit("held", gpus=1, actor=member)
    return cluster


def test_the_per_user_cap_counts_the_earlier_jobs_of_the_same_batch(capped: Cluster, member: AbstractUser) -> None:
    batch = [
        {"name": "a", "quota": "team-a", "kind": "training", "gpus": 2},
        {"name": "b", "quota": "team-b", "kind": "training", "gpus": 8},  # another quota: not counted
        {"name": "c", "quota": "team-a", "kind": "training", "gpus": 1},
        {"name": "d", "quota": "team-a", "kind": "training", "gpus": 1},
    ]
    with pytest.raises(ValidationError) as refused:
        services.submit_jobs(actor=member, submissions=[submission(capped, fields) for fields in batch])

    assert refused.value.message_dict == {
        "gpus": [
            "job 'd' (4 of 4): asks 1 GPUs while dev-dana already uses 4 on team-a; "
            "the cap per user for priority 3 is 4: 4 + 1 > 4"
        ]
    }
    assert list(Job.objects.values_list("name", flat=True)) == ["held"]

    jobs = services.submit_jobs(actor=member, submissions=[submission(capped, fields) for fields in batch[:3]])
    assert [job.name for job in jobs] == ["a", "b", "c"]
    assert all(job.owner_id == member.pk for job in jobs)


def test_a_role_refusal_names_the_job(cluster: Cluster, make_user: Any) -> None:
    outsider = make_user("outsider")
    batch = [{"name": "x", "quota": "team-a", "kind": "training", "gpus": 1}]
    with pytest.raises(PermissionDenied, match=r"^job 'x' \(1 of 1\): non-member 'outsider' may not use team-a"):
        services.submit_jobs(actor=outsider, submissions=[submission(cluster, fields) for fields in batch])
    assert not Job.objects.exists()


def test_a_batch_asks_for_one_cycle_and_publishes_each_job(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    requests: list[str] = []
    published: list[dict[str, Any]] = []

    def request_cycle(reason: str) -> bool:
        requests.append(reason)
        return True

    def publish_many(batch: list[dict[str, Any]]) -> bool:
        published.extend(batch)
        return True

    monkeypatch.setattr(triggers, "request_cycle", request_cycle)
    # One batch for the commit (its live topics are read back together), each job an event in it.
    monkeypatch.setattr(events, "publish_many", publish_many)

    with django_capture_on_commit_callbacks(execute=True):
        jobs = services.submit_jobs(actor=None, submissions=[submission(cluster, f) for f in SUBMISSIONS])

    assert requests == ["submit"]
    assert published == [
        {"kind": "job", "id": job.pk, "name": job.name, "state": "pending", "quota_id": job.quota_id} for job in jobs
    ]


def test_an_empty_batch_writes_and_asks_nothing(cluster: Cluster, django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        assert services.submit_jobs(actor=None, submissions=[]) == []
    assert callbacks == []
    assert not Job.objects.exists()


def test_every_field_of_a_job_shape_is_a_job_column() -> None:
    # A submission's job is built positionally from these (job_writes.NewJobs): a field of the
    # shape that no column takes would otherwise be dropped without a word.
    columns = {field.attname for field in Job._meta.concrete_fields}
    assert {spec.name for spec in dataclasses.fields(JobSubmission)} - {"workspace", "quota"} <= columns


def test_a_built_job_is_the_job_keyword_arguments_make(cluster: Cluster) -> None:
    workspace, quota = cluster.workspace, cluster.quotas["team-a"]
    now = datetime(2025, 1, 1, tzinfo=UTC)
    columns: dict[str, Any] = {"name": "train", "kind": "training", "gpus": 2.0, "priority": 3, "submitted_at": now}
    built = NewJobs().build(dict(columns), {"workspace": workspace, "quota": quota, "owner": None})
    made = Job(**columns, workspace=workspace, quota=quota, owner=None)
    fields = [field.attname for field in Job._meta.concrete_fields]
    assert [getattr(built, name) for name in fields] == [getattr(made, name) for name in fields]
    assert built._state.adding and built.workspace is workspace and built.quota is quota
    assert built.environment == {} and built.environment is not NewJobs().build({}, {}).environment
