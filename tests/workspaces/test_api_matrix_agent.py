"""The node-agent rows of the permission matrix (issue 13): a job's logs follow the job's own
visibility; only platform admins issue node tokens; and no user, whatever the role, reaches the
agent endpoints (they take node tokens only: a user is authenticated there and still refused).

The node-token side (a node token on its own node, on another node, on the user API) is in
tests/scheduling/test_agent_api.py.
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
    settings.SCHEDULER_TRIGGER = "none"
    world = build_world()
    Node.objects.create(pool=world.pool, name="gpu-1", gpus=8, executor="agent")
    for name, workspace, quota, owner in (
        ("own-job", world.own, world.quotas["Quota1.1"], world.users["developer"]),
        ("foreign-job", world.foreign, world.quotas["Quota1.2"], world.foreign_users["developer"]),
    ):
        job_services.submit_job(actor=owner, workspace=workspace, quota=quota, name=name, kind="training", gpus=1)
    return world


ENDPOINTS = [
    Endpoint("job-own-logs", "GET", "/api/v1/jobs/{own_job}/logs/"),
    Endpoint("job-foreign-logs", "GET", "/api/v1/jobs/{foreign_job}/logs/"),
    Endpoint("node-token", "POST", "/api/v1/nodes/{node}/token/"),
    Endpoint("agent-register", "POST", "/api/v1/agent/register/", lambda world: {"node": "gpu-1", "gpus": []}),
    Endpoint("agent-heartbeat", "POST", "/api/v1/agent/heartbeat/", lambda world: {"node": "gpu-1", "processes": []}),
]

NO_USER = row(
    platform_admin=403,
    workspace_admin=403,
    developer=403,
    operator=403,
    labeling_admin=403,
    visitor=403,
    custom_role=403,
    authorized_non_member=403,
    non_member=403,
)
EXPECTED: dict[str, dict[str, int]] = {
    "job-own-logs": row(
        platform_admin=200,
        workspace_admin=200,
        developer=200,
        operator=200,
        labeling_admin=200,
        visitor=200,
        custom_role=200,
        authorized_non_member=404,
        non_member=404,
    ),
    "job-foreign-logs": row(
        platform_admin=200,
        workspace_admin=404,
        developer=404,
        operator=404,
        labeling_admin=404,
        visitor=404,
        custom_role=404,
        authorized_non_member=404,
        non_member=404,
    ),
    "node-token": row(
        platform_admin=201,
        workspace_admin=403,
        developer=403,
        operator=403,
        labeling_admin=403,
        visitor=403,
        custom_role=403,
        authorized_non_member=403,
        non_member=403,
    ),
    "agent-register": NO_USER,
    "agent-heartbeat": NO_USER,
}


@pytest.mark.parametrize(("endpoint", "persona", "status"), matrix_cases(ENDPOINTS, EXPECTED))
def test_agent_endpoints(
    world: PermissionWorld,
    persona_client: Callable[[str], APIClient],
    endpoint: Endpoint,
    persona: str,
    status: int,
) -> None:
    ids = {
        **world.ids(),
        "own_job": Job.objects.get(name="own-job").pk,
        "foreign_job": Job.objects.get(name="foreign-job").pk,
        "node": Node.objects.get(name="gpu-1").pk,
    }
    payload = endpoint.body(world) if endpoint.body else None
    response = getattr(persona_client(persona), endpoint.method.lower())(
        endpoint.url.format(**ids), payload, format="json"
    )
    assert response.status_code == status, response.content
    if status == 403:
        assert response.json()["detail"], "a 403 says why"
    if status == 200 and endpoint.name.endswith("logs"):
        assert response.json() == {"lines": [], "truncated": False}
