"""Requests are read as the schema types them: what DRF alone would coerce is a 400 naming the field.

Each row is a mistake schemathesis found accepted (ST201) before the strict reading.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

WORKSPACE = {"name": "team-x", "description": ""}
QUOTA = {"name": "Quota9", "gpus": 1}
NODE = {"name": "node-x", "gpus": 8}


@pytest.fixture
def admin_api(admin_client_api: APIClient) -> APIClient:
    call_command("load_demo")
    return admin_client_api


@pytest.mark.parametrize(
    ("path", "body", "field", "says"),
    [
        ("/api/v1/quotas/", {**QUOTA, "gpus": "5"}, "gpus", "gpus must be a number, got a string."),
        ("/api/v1/quotas/", {**QUOTA, "gpus": True}, "gpus", "gpus must be a number, got a boolean."),
        ("/api/v1/quotas/", {**QUOTA, "child_preemption": 1}, "child_preemption", "must be true or false, got a"),
        ("/api/v1/quotas/", {**QUOTA, "dry_run": "true"}, "dry_run", "dry_run must be true or false, got a string."),
        ("/api/v1/quotas/", {**QUOTA, "parent": ""}, "parent", "A quota name must not be empty; send null for none."),
        ("/api/v1/quotas/", {**QUOTA, "name": 7}, "name", "name must be a string, got a number."),
        ("/api/v1/nodes/", {**NODE, "dry_run": 0}, "dry_run", "dry_run must be true or false, got a number."),
        ("/api/v1/nodes/", {**NODE, "labels": {"zone": 0}}, "labels", "label 'zone' must be a string."),
        ("/api/v1/nodes/", {**NODE, "labels": []}, "labels", "labels must be an object, got a list."),
        ("/api/v1/workspaces/", {**WORKSPACE, "quotas": {}}, "quotas", "quotas must be a list, got an object."),
        # PostgreSQL can neither store nor compare NUL: a lookup by such a name was a 500 there.
        ("/api/v1/quotas/transfer/", {"from": "Kr]\x004", "to": "Quota1.2", "gpus": 1}, "from", "NUL character"),
        ("/api/v1/quotas/", {**QUOTA, "parent": "Quota1\x00"}, "parent", "must not contain the NUL character"),
        ("/api/v1/workspaces/", {**WORKSPACE, "quotas": ["Quota1\x00"]}, "quotas", "NUL character"),
    ],
)
def test_a_value_of_the_wrong_json_kind_is_refused_naming_the_field(
    admin_api: APIClient, path: str, body: dict[str, Any], field: str, says: str
) -> None:
    answer = admin_api.post(path, body, format="json")
    assert answer.status_code == 400, answer.content
    assert says in " ".join(answer.json()[field])


@pytest.mark.parametrize(
    ("query", "field", "says"),
    [
        ("/api/v1/nodes/?state=", "state", "state must not be empty; leave it out to list everything."),
        ("/api/v1/quotas/?child_preemption=", "child_preemption", "must not be empty"),
        ("/api/v1/quotas/?child_preemption=maybe", "child_preemption", "maybe"),
        ("/api/v1/quotas/?rank=0.5", "rank", "whole number"),
    ],
)
def test_a_query_value_outside_the_schema_is_refused(admin_api: APIClient, query: str, field: str, says: str) -> None:
    answer = admin_api.get(query)
    assert answer.status_code == 400, answer.content
    assert says in " ".join(answer.json()[field])


def test_dry_run_in_the_query_takes_only_true_or_false(admin_api: APIClient) -> None:
    quota = admin_api.get("/api/v1/quotas/?name=Quota1.2").json()["results"][0]
    refused = admin_api.delete(f"/api/v1/quotas/{quota['id']}/?dry_run=yes")
    assert refused.status_code == 400
    assert refused.json()["dry_run"] == ["dry_run must be true or false, got 'yes'."]
    previewed = admin_api.delete(f"/api/v1/quotas/{quota['id']}/?dry_run=true")
    assert previewed.status_code == 200 and previewed.json()["valid"] is False


def test_a_text_filter_may_be_empty(admin_api: APIClient) -> None:
    # An empty string is a string: the schema allows it for a text filter, so it means "no filter".
    # The demo's quotas: Quota1's tree in the default pool, Batch's in a100.
    assert admin_api.get("/api/v1/quotas/?name=").json()["count"] == 6


@pytest.mark.parametrize(
    "path", ["/api/v1/nope/", "/api/v1/workspaces/%C3%8C/roles/%C3%94%0A/", "/api/v2/", "/api/%0A"]
)
def test_an_address_under_api_that_names_nothing_is_a_json_404(admin_client_api: APIClient, path: str) -> None:
    answer = admin_client_api.get(path)
    assert answer.status_code == 404
    assert answer["Content-Type"] == "application/json"
    assert answer.json()["detail"].startswith("There is no API endpoint at /api/")
