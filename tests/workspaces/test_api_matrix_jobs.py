"""The jobs rows of the permission matrix: every jobs endpoint and method, every persona, a job of
the own workspace (workspace-b, owned by its developer) versus one of the foreign workspace.

Statuses: 404 where the user may not see the job (or the workspace it would go to), 403 with a
reason where they see it but their role forbids the action, 401 for anonymous. Lists never hold
a foreign row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from quotas.models import Node
from scheduling import services as job_services
from scheduling.models import Job
from tests.workspaces.permissions import Endpoint, PermissionWorld, build_world, matrix_cases, row

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db: None, settings: Any) -> PermissionWorld:
    settings.SCHEDULER_TRIGGER = "none"  # the rows are about who may do what, not about scheduling
    world = build_world()
    Node.objects.create(pool=world.pool, name="gpu-1", gpus=8)
    own_owner = world.users["developer"]
    foreign_owner = world.foreign_users["developer"]
    for name, workspace, quota, owner in (
        ("own-job", world.own, world.quotas["Quota1.1"], own_owner),
        ("foreign-job", world.foreign, world.quotas["Quota1.2"], foreign_owner),
    ):
        job_services.submit_job(actor=owner, workspace=workspace, quota=quota, name=name, kind="training", gpus=1)
    return world


def _ids(world: PermissionWorld) -> dict[str, Any]:
    return {
        "own_job": Job.objects.get(name="own-job").pk,
        "foreign_job": Job.objects.get(name="foreign-job").pk,
    }


def submit_to(workspace: str, quota: str) -> Callable[[PermissionWorld], dict[str, Any]]:
    def body(world: PermissionWorld) -> dict[str, Any]:
        return {"name": "probe", "workspace": workspace, "quota": quota, "kind": "training", "gpus": 1}

    return body


ENDPOINTS = [
    Endpoint("jobs-list", "GET", "/api/v1/jobs/"),
    Endpoint("job-own-get", "GET", "/api/v1/jobs/{own_job}/"),
    Endpoint("job-foreign-get", "GET", "/api/v1/jobs/{foreign_job}/"),
    Endpoint("job-own-events", "GET", "/api/v1/jobs/{own_job}/events/"),
    Endpoint("job-foreign-events", "GET", "/api/v1/jobs/{foreign_job}/events/"),
    Endpoint("job-submit-own", "POST", "/api/v1/jobs/", submit_to("workspace-b", "Quota1.1")),
    Endpoint("job-submit-foreign", "POST", "/api/v1/jobs/", submit_to("workspace-c", "Quota1.2")),
    Endpoint("job-own-cancel", "POST", "/api/v1/jobs/{own_job}/cancel/"),
    Endpoint("job-foreign-cancel", "POST", "/api/v1/jobs/{foreign_job}/cancel/"),
    Endpoint("job-own-patch", "PATCH", "/api/v1/jobs/{own_job}/", lambda world: {"priority": 9}),
    Endpoint("job-own-delete", "DELETE", "/api/v1/jobs/{own_job}/"),
]


SEES_OWN_JOB = row(
    platform_admin=200,
    workspace_admin=200,
    developer=200,  # the owner
    operator=200,
    labeling_admin=200,
    visitor=200,
    custom_role=200,
    authorized_non_member=404,  # sees only the jobs it submitted itself
    non_member=404,
)
ONLY_PLATFORM_ADMIN = row(
    platform_admin=200,
    workspace_admin=404,
    developer=404,
    operator=404,
    labeling_admin=404,
    visitor=404,
    custom_role=404,
    authorized_non_member=404,
    non_member=404,
)
NOT_A_JOB_METHOD = row(  # jobs change through submit and cancel only
    platform_admin=405,
    workspace_admin=405,
    developer=405,
    operator=405,
    labeling_admin=405,
    visitor=405,
    custom_role=405,
    authorized_non_member=405,
    non_member=405,
)

EXPECTED: dict[str, dict[str, int]] = {
    "jobs-list": row(
        platform_admin=200,
        workspace_admin=200,
        developer=200,
        operator=200,
        labeling_admin=200,
        visitor=200,
        custom_role=200,
        authorized_non_member=200,
        non_member=200,
    ),
    "job-own-get": SEES_OWN_JOB,
    "job-foreign-get": ONLY_PLATFORM_ADMIN,
    "job-own-events": SEES_OWN_JOB,
    "job-foreign-events": ONLY_PLATFORM_ADMIN,
    "job-submit-own": row(
        platform_admin=201,
        workspace_admin=201,
        developer=201,
        operator=201,
        labeling_admin=201,
        visitor=403,  # reads only
        custom_role=201,  # "submitter" holds job.submit and the rule names it
        authorized_non_member=201,  # named in the rule of Quota1.1
        non_member=400,  # "no workspace named 'workspace-b' that you may submit to": existence not revealed
    ),
    "job-submit-foreign": row(
        platform_admin=201,
        workspace_admin=400,
        developer=400,
        operator=400,
        labeling_admin=400,
        visitor=400,
        custom_role=400,
        authorized_non_member=400,
        non_member=400,
    ),
    "job-own-cancel": row(
        platform_admin=200,
        workspace_admin=200,
        developer=200,  # the owner
        operator=200,  # manages every job of the workspace
        labeling_admin=403,
        visitor=403,
        custom_role=403,
        authorized_non_member=404,
        non_member=404,
    ),
    "job-foreign-cancel": ONLY_PLATFORM_ADMIN,
    "job-own-patch": NOT_A_JOB_METHOD,
    "job-own-delete": NOT_A_JOB_METHOD,
}


@pytest.mark.parametrize(("endpoint", "persona", "status"), matrix_cases(ENDPOINTS, EXPECTED))
def test_jobs_endpoints(
    world: PermissionWorld,
    persona_client: Callable[[str], APIClient],
    endpoint: Endpoint,
    persona: str,
    status: int,
) -> None:
    ids = {**world.ids(), **_ids(world)}
    payload = endpoint.body(world) if endpoint.body else None
    response = getattr(persona_client(persona), endpoint.method.lower())(
        endpoint.url.format(**ids), payload, format="json"
    )
    assert response.status_code == status, response.content
    if status == 403:
        assert response.json()["detail"], "a 403 says why"
    if status == 400 and endpoint.method == "POST":
        assert set(response.json()) == {"workspace"}
    if endpoint.name == "jobs-list" and status == 200:
        names = {job["name"] for job in response.json()["results"]}
        visible = {
            "platform_admin": {"own-job", "foreign-job"},
            "authorized_non_member": set(),
            "non_member": set(),
        }.get(persona, {"own-job"})
        assert names == visible


def test_a_refused_cancel_changes_nothing(world: PermissionWorld, persona_client: Callable[[str], APIClient]) -> None:
    job = Job.objects.get(name="own-job")
    response = persona_client("visitor").post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.state == "pending"
