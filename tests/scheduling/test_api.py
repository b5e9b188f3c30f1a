"""The jobs and scheduler API as a member, a visitor, an outsider and a platform admin see it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

from quotas import hooks
from scheduling import services
from scheduling.lock import redis_client
from scheduling.models import Job, JobState
from scheduling.triggers import requested_key
from tests.scheduling.conftest import Cluster
from workspaces import services as workspace_services

pytestmark = pytest.mark.django_db

Clients = Callable[[AbstractUser | None], APIClient]


def body(**fields: Any) -> dict[str, Any]:
    return {"name": "train", "workspace": "lab", "quota": "team-a", "kind": "training", "gpus": 4, **fields}


@pytest.fixture
def submit(client_for: Clients, member: AbstractUser, django_capture_on_commit_callbacks: Any) -> Callable[..., Any]:
    """POST jobs/ as the member; the inline trigger runs the cycle on commit, as Celery would."""

    def post(**fields: Any) -> Any:
        with django_capture_on_commit_callbacks(execute=True):
            return client_for(member).post("/api/v1/jobs/", body(**fields), format="json")

    return post


def test_a_member_submits_and_the_job_runs(submit: Callable[..., Any], member: AbstractUser) -> None:
    response = submit(replicas=2, state="succeeded", allocated_gpus=99, owner="someone-else")
    assert response.status_code == 201, response.json()
    created = response.json()
    assert created["owner"] == member.username  # read-only fields are not taken from the body
    job = Job.objects.get(pk=created["id"])
    assert (job.state, job.allocated_gpus, job.owner_id) == (JobState.RUNNING, 8, member.pk)


def test_the_job_shows_every_figure(submit: Callable[..., Any], client_for: Clients, member: AbstractUser) -> None:
    job_id = submit(replicas=2).json()["id"]
    shown = client_for(member).get(f"/api/v1/jobs/{job_id}/").json()
    assert shown["state"] == "running"
    assert (shown["allocated_gpus"], shown["running_replicas"], shown["preemptions"]) == (8, 2, 0)
    assert shown["nodes"] and shown["reason"] is None and shown["started_at"]
    assert (shown["workspace"], shown["quota"], shown["priority"], shown["preemptible"]) == ("lab", "team-a", 3, True)


def test_a_waiting_job_shows_its_reason_and_position(
    submit: Callable[..., Any], client_for: Clients, member: AbstractUser
) -> None:
    job_id = submit(gpus=8, replicas=3).json()["id"]
    shown = client_for(member).get(f"/api/v1/jobs/{job_id}/").json()
    assert shown["state"] == "pending"
    assert shown["reason"]["code"] == "exceeds_cluster" and shown["position"] == 1


def test_a_dry_run_answers_200_with_the_preview_and_creates_nothing(submit: Callable[..., Any]) -> None:
    response = submit(dry_run=True)
    assert response.status_code == 200
    assert response.json()["would_admit"] is True and len(response.json()["placements"]) == 1
    refused = submit(dry_run=True, gpus=8, replicas=3).json()
    assert refused["would_admit"] is False and refused["reason"]["code"] == "exceeds_cluster"
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"replicas": 2, "min_replicas": 3}, "min_replicas"),
        ({"kind": "batch"}, "kind"),
        ({"workspace": "nowhere"}, "workspace"),
        ({"quota": "nowhere"}, "quota"),
    ],
    ids=["zero-gpus", "replicas-below-min", "unknown-kind", "unknown-workspace", "unknown-quota"],
)
def test_bad_input_is_a_400_naming_the_field(submit: Callable[..., Any], fields: dict[str, Any], field: str) -> None:
    response = submit(**fields)
    assert response.status_code == 400
    assert field in response.json()


def test_a_visitor_may_not_submit(cluster: Cluster, make_user: Any, client_for: Clients) -> None:
    visitor = make_user("vic")
    workspace_services.add_member(actor=None, workspace=cluster.workspace, user=visitor, role="visitor")
    response = client_for(visitor).post("/api/v1/jobs/", body(), format="json")
    assert response.status_code == 403
    assert "visitor" in response.json()["detail"]


def test_outsiders_see_no_job_and_anonymous_is_401(
    submit: Callable[..., Any], make_user: Any, client_for: Clients
) -> None:
    job_id = submit().json()["id"]
    outsider = make_user("otto")
    assert client_for(outsider).get(f"/api/v1/jobs/{job_id}/").status_code == 404
    assert client_for(outsider).post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 404
    assert client_for(outsider).get("/api/v1/jobs/").json()["count"] == 0
    assert client_for(None).get("/api/v1/jobs/").status_code == 401


def test_the_owner_cancels_and_the_events_tell_the_story(
    submit: Callable[..., Any], client_for: Clients, member: AbstractUser, django_capture_on_commit_callbacks: Any
) -> None:
    job_id = submit().json()["id"]
    preview = client_for(member).post(f"/api/v1/jobs/{job_id}/cancel/", {"dry_run": True}, format="json")
    assert preview.status_code == 200 and preview.json()["valid"] is True
    assert Job.objects.get(pk=job_id).state == JobState.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        cancelled = client_for(member).post(f"/api/v1/jobs/{job_id}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    events = client_for(member).get(f"/api/v1/jobs/{job_id}/events/").json()
    assert [event["kind"] for event in events] == ["submitted", "admitted", "started", "cancelled"]
    again = client_for(member).post(f"/api/v1/jobs/{job_id}/cancel/")
    assert again.status_code == 400 and "already cancelled" in again.json()["state"][0]


def test_another_developer_sees_but_may_not_cancel(
    submit: Callable[..., Any], cluster: Cluster, make_user: Any, client_for: Clients
) -> None:
    job_id = submit().json()["id"]
    colleague = make_user("cole")
    workspace_services.add_member(actor=None, workspace=cluster.workspace, user=colleague, role="developer")
    assert client_for(colleague).get(f"/api/v1/jobs/{job_id}/").status_code == 200
    refused = client_for(colleague).post(f"/api/v1/jobs/{job_id}/cancel/")
    assert refused.status_code == 403 and "owner" in refused.json()["detail"]


def test_the_job_list_filters_by_state(submit: Callable[..., Any], client_for: Clients, member: AbstractUser) -> None:
    submit(name="runs")
    submit(name="waits", gpus=8, replicas=3)
    listed = client_for(member).get("/api/v1/jobs/", {"state": "pending"}).json()
    assert [job["name"] for job in listed["results"]] == ["waits"]


def test_only_platform_admins_run_a_cycle(
    cluster: Cluster, member: AbstractUser, client_for: Clients, admin_client_api: APIClient
) -> None:
    cluster.submit("queued", gpus=4)
    assert client_for(member).post("/api/v1/scheduler/cycle/").status_code == 403
    ran = admin_client_api.post("/api/v1/scheduler/cycle/").json()
    assert ran["committed"] is True
    assert [(d["kind"], d["job"]) for d in ran["decisions"]] == [("admit", "queued")]
    status = admin_client_api.get("/api/v1/scheduler/status/").json()
    assert status["last_cycle_at"] and status["duration_ms"] >= 0
    assert status["decisions"] == ran["decisions"] and "lock_holder" in status
    assert client_for(member).get("/api/v1/scheduler/status/").json()["decisions"] is None


def test_a_manual_cycle_no_worker_finishes_in_time_answers_queued_within_the_wait(
    cluster: Cluster, admin_client_api: APIClient, settings: Any
) -> None:
    settings.SCHEDULER_TRIGGER = "celery"  # handed to a worker; none consumes this test's queue
    settings.SCHEDULER_API_LOCK_WAIT_SECONDS = 0.2
    try:
        answer = admin_client_api.post("/api/v1/scheduler/cycle/").json()
        queued_reason = redis_client().get(requested_key())
    finally:
        redis_client().delete(requested_key())

    assert (answer["ran"], answer["committed"], answer["queued"], answer["decisions"]) == (False, False, True, [])
    assert queued_reason == b"api:platform-admin"


def test_quota_status_is_filled_from_the_scheduler(cluster: Cluster) -> None:
    cluster.submit("a", gpus=4, replicas=2)
    cluster.submit("big", "team-b", gpus=8, replicas=3)
    services.converge()
    status = hooks.quota_status(list(cluster.quotas.values()))
    team_a, root = status[cluster.quotas["team-a"].pk], status[cluster.quotas["Quota1"].pk]
    assert (team_a["allocated"], team_a["allocated_self"], team_a["running"], team_a["pending"]) == (8, 8, 1, 0)
    assert (root["allocated"], root["allocated_self"], root["running"], root["pending"]) == (8, 0, 1, 1)
    assert root["fair_share"] == 16


def test_a_quota_preview_lists_what_the_next_cycle_would_do(cluster: Cluster) -> None:
    cluster.submit("queued", "team-b", gpus=4)
    preview = hooks.preview()
    assert [(entry["kind"], entry["job"], entry["quota"]) for entry in preview["admit"]] == [
        ("admit", "queued", "team-b")
    ]
    assert preview["evict"] == []
