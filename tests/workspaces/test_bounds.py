"""The sizes a workspace admin sends are bounded (quotas.bounds): at the bound taken, above it a
400 naming the field path, the bound and what was sent."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from quotas import bounds
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def workspace(admin_client_api: APIClient) -> dict[str, Any]:
    created: dict[str, Any] = admin_client_api.post(
        "/api/v1/quotas/", {"name": "team", "gpus": 0}, format="json"
    ).json()
    answer = admin_client_api.post("/api/v1/workspaces/", {"name": "lab", "quotas": [created["name"]]}, format="json")
    assert answer.status_code == 201, answer.json()
    workspace: dict[str, Any] = answer.json()
    return workspace


@pytest.mark.parametrize(
    ("field", "at_bound", "above", "says"),
    [
        pytest.param("name", "w" * 100, "w" * 101, "name has at most 100 characters.", id="name"),
        pytest.param(
            "description", "d" * 2_000, "d" * 2_001, "description has at most 2,000 characters.", id="description"
        ),
    ],
)
def test_a_workspace_at_the_bound_is_taken_and_above_it_refused(
    admin_client_api: APIClient, field: str, at_bound: str, above: str, says: str
) -> None:
    fields = {"name": "ws", field: above}
    refused = admin_client_api.post("/api/v1/workspaces/", fields, format="json")
    taken = admin_client_api.post("/api/v1/workspaces/", {**fields, field: at_bound}, format="json")

    assert refused.json() == {field: [says]}
    assert taken.status_code == 201
    assert Workspace.objects.count() == 1


def test_a_role_lists_a_bounded_number_of_permissions(admin_client_api: APIClient, workspace: dict[str, Any]) -> None:
    url = f"/api/v1/workspaces/{workspace['id']}/roles/"
    refused = admin_client_api.post(
        url, {"name": "r", "permissions": ["job.submit"] * (bounds.ROLE_PERMISSIONS_MAX + 1)}, format="json"
    )
    taken = admin_client_api.post(
        url, {"name": "r", "permissions": ["job.submit"] * bounds.ROLE_PERMISSIONS_MAX}, format="json"
    )

    assert refused.status_code == 400 and "permissions" in refused.json()
    assert taken.status_code == 201, taken.json()


def rule(**fields: Any) -> dict[str, Any]:
    return {"quota": "team", "roles": ["developer"], **fields}


@pytest.mark.parametrize(
    ("rules_at_bound", "rules_above", "field"),
    [
        pytest.param([rule()] * 100, [rule()] * 101, "rules", id="rules"),
        pytest.param(
            [rule(roles=["developer"] * 100)], [rule(roles=["developer"] * 101)], "rules[0].roles", id="roles"
        ),
        pytest.param(
            [rule(caps=[{"priority_min": 1, "priority_max": 9, "max_gpus_per_job": 1}] * 9)],
            [rule(caps=[{"priority_min": 1, "priority_max": 9, "max_gpus_per_job": 1}] * 10)],
            "rules[0].caps",
            id="caps",
        ),
        pytest.param(
            [rule(caps=[{"priority_min": 1, "priority_max": 9, "max_gpus_per_job": bounds.CAP_GPUS_MAX}])],
            [rule(caps=[{"priority_min": 1, "priority_max": 9, "max_gpus_per_job": bounds.CAP_GPUS_MAX + 1}])],
            "rules[0].caps[0].max_gpus_per_job",
            id="cap-gpus",
        ),
    ],
)
def test_scheduling_rules_are_bounded(
    admin_client_api: APIClient,
    workspace: dict[str, Any],
    rules_at_bound: list[dict[str, Any]],
    rules_above: list[dict[str, Any]],
    field: str,
) -> None:
    url = f"/api/v1/workspaces/{workspace['id']}/scheduling-config/"
    refused = admin_client_api.put(url, {"rules": rules_above}, format="json")
    taken = admin_client_api.put(url, {"rules": rules_at_bound}, format="json")

    assert refused.status_code == 400
    assert "at most" in refused.json()[field][0], refused.json()
    assert taken.status_code == 200, taken.json()
