"""The quotas API (API.md): every endpoint for a platform admin, a signed-in member and an anonymous caller."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

from quotas import hooks, services
from quotas.models import AuditRecord, Node, Quota
from tests.quotas.conftest import fresh
from workspaces.services import add_member, create_workspace

Tree = dict[str, Quota]
ClientFor = Callable[[AbstractUser | None], APIClient]

QUOTA_FIELDS = {
    "id",
    "name",
    "pool",  # by name: a root's pool, or its parent's (issue 24)
    "parent",
    "gpus",
    "cpu",
    "memory_gib",
    "limit",
    "cpu_limit",
    "memory_gib_limit",
    "weight",
    "effective_weight",
    "rank",
    "child_preemption",
    "same_level_preemption",
    "queue_policy",
    "min_runtime_seconds",
    "status",
}
NODE_FIELDS = {
    *("id", "name", "gpus", "cpu", "memory_gib", "gpu_model", "labels", "state", "executor", "last_heartbeat"),
    "agent_version",  # read-only: what its node agent registered with (docs/agent.md)
    "pool",  # by name (issue 24)
}


def call(client: APIClient, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    return getattr(client, method)(path, body, format="json")


# (method, path template, body, status for a platform admin); {Quota1.1} and {gpu-1} become ids.
ENDPOINTS = [
    pytest.param("get", "/api/v1/quotas/", None, 200, id="quota-list"),
    pytest.param("get", "/api/v1/quotas/{Quota1.1}/", None, 200, id="quota-detail"),
    pytest.param("post", "/api/v1/quotas/", {"name": "Quota1.3", "parent": "Quota1"}, 201, id="quota-create"),
    pytest.param("patch", "/api/v1/quotas/{Quota1.1}/", {"rank": 2}, 200, id="quota-patch"),
    pytest.param("put", "/api/v1/quotas/{Quota1.1}/", {"name": "Quota1.1", "gpus": 40}, 200, id="quota-put"),
    pytest.param("delete", "/api/v1/quotas/{Quota1.1}/", None, 204, id="quota-delete"),
    pytest.param("post", "/api/v1/quotas/{Quota1.1}/scale/", {"gpus": 40}, 200, id="quota-scale"),
    pytest.param(
        "post", "/api/v1/quotas/transfer/", {"from": "Quota1.2", "to": "Quota1.1", "gpus": 8}, 200, id="transfer"
    ),
    pytest.param("get", "/api/v1/nodes/", None, 200, id="node-list"),
    pytest.param("get", "/api/v1/nodes/{gpu-1}/", None, 200, id="node-detail"),
    pytest.param("post", "/api/v1/nodes/", {"name": "gpu-17", "gpus": 8}, 201, id="node-create"),
    pytest.param("patch", "/api/v1/nodes/{gpu-1}/", {"gpu_model": "H100"}, 200, id="node-patch"),
    pytest.param("post", "/api/v1/nodes/{gpu-1}/down/", {}, 200, id="node-down"),
    pytest.param("post", "/api/v1/nodes/{gpu-1}/up/", {}, 200, id="node-up"),
    pytest.param("delete", "/api/v1/nodes/{spare}/", None, 204, id="node-delete"),
]


def resolve(path: str, tree: Tree) -> str:
    ids = {name: quota.pk for name, quota in tree.items()}
    ids.update(dict(Node.objects.values_list("name", "pk")))
    return re.sub(r"\{([^}]+)\}", lambda match: str(ids[match.group(1)]), path)


@pytest.fixture
def cluster(pai_tree: Tree) -> Tree:
    services.create_node(actor=None, name="spare", gpus=4)
    return pai_tree


@pytest.mark.parametrize(("method", "path", "body", "admin_status"), ENDPOINTS)
def test_platform_admins_read_and_write(
    cluster: Tree, admin_client_api: APIClient, method: str, path: str, body: Any, admin_status: int
) -> None:
    response = call(admin_client_api, method, resolve(path, cluster), body)

    assert response.status_code == admin_status, response.content


@pytest.mark.parametrize(("method", "path", "body", "admin_status"), ENDPOINTS)
def test_members_read_but_may_not_write(  # members of a workspace bound to Quota1.1
    cluster: Tree,
    make_user: Callable[..., AbstractUser],
    client_for: ClientFor,
    method: str,
    path: str,
    body: Any,
    admin_status: int,
) -> None:
    member = make_user("member")
    workspace = create_workspace(actor=None, name="team-b", quotas=[cluster["Quota1.1"]])
    add_member(actor=None, workspace=workspace, user=member, role="developer")
    before = AuditRecord.objects.count()

    response = call(client_for(member), method, resolve(path, cluster), body)

    assert response.status_code == (200 if method == "get" else 403), response.content
    assert AuditRecord.objects.count() == before


@pytest.mark.parametrize(("method", "path", "body", "admin_status"), ENDPOINTS)
def test_anonymous_callers_are_told_to_sign_in(
    cluster: Tree, client_for: ClientFor, method: str, path: str, body: Any, admin_status: int
) -> None:
    response = call(client_for(None), method, resolve(path, cluster), body)

    assert response.status_code == 401


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        pytest.param("admin", 200, id="admin"),
        pytest.param("member", 403, id="member"),
        pytest.param(None, 401, id="anon"),
    ],
)
def test_the_audit_log_is_for_platform_admins(
    pai_tree: Tree,
    platform_admin: AbstractUser,
    make_user: Callable[..., AbstractUser],
    client_for: ClientFor,
    who: str | None,
    expected: int,
) -> None:
    user = {"admin": platform_admin, "member": make_user("member"), None: None}[who]

    assert client_for(user).get("/api/v1/audit-log/").status_code == expected


def test_a_quota_reads_as_in_the_api_reference(pai_tree: Tree, admin_client_api: APIClient) -> None:
    body = admin_client_api.get(f"/api/v1/quotas/{pai_tree['Quota1.1'].pk}/").json()

    assert set(body) == QUOTA_FIELDS
    assert body["parent"] == "Quota1"
    assert (body["gpus"], body["weight"], body["effective_weight"]) == (48, None, 48)
    assert set(body["status"]) == {"fair_share", "allocated", "allocated_self", "running", "pending"}


def test_the_status_comes_from_the_scheduler_once_per_page(pai_tree: Tree, admin_client_api: APIClient) -> None:
    calls: list[list[str]] = []

    def status(quotas: list[Quota]) -> dict[int, hooks.QuotaStatus]:
        calls.append([quota.name for quota in quotas])
        return {
            quota.pk: hooks.QuotaStatus(fair_share=quota.gpus, allocated=1.5, allocated_self=0.5, running=2, pending=1)
            for quota in quotas
        }

    previous = hooks.register_status_provider(status)
    try:
        rows = admin_client_api.get("/api/v1/quotas/").json()["results"]
    finally:
        hooks.register_status_provider(previous)

    assert calls == [["Quota1", "Quota1.1", "Quota1.2"]]
    assert rows[1]["status"] == {"fair_share": 48, "allocated": 1.5, "allocated_self": 0.5, "running": 2, "pending": 1}


def test_a_node_reads_as_in_the_api_reference(pai_cluster: list[Node], admin_client_api: APIClient) -> None:
    body = admin_client_api.get(f"/api/v1/nodes/{pai_cluster[0].pk}/").json()

    assert set(body) == NODE_FIELDS
    assert {key: body[key] for key in ("name", "gpus", "cpu", "memory_gib", "state")} == {
        "name": "gpu-1",
        "gpus": 8,
        "cpu": 96,
        "memory_gib": 768,
        "state": "ready",
    }


def test_a_child_is_created_under_its_parent_by_name(pai_tree: Tree, admin_client_api: APIClient) -> None:
    services.scale_quota(actor=None, quota=pai_tree["Quota1.2"], gpus=72)

    response = admin_client_api.post(
        "/api/v1/quotas/", {"name": "Quota1.3", "parent": "Quota1", "gpus": 8, "limit": 16}, format="json"
    )

    assert response.status_code == 201, response.content
    created = Quota.objects.get(name="Quota1.3")
    assert (created.parent, created.gpus, created.limit) == (pai_tree["Quota1"], 8, 16)


def test_a_broken_rule_is_a_400_naming_the_field_and_the_numbers(pai_tree: Tree, admin_client_api: APIClient) -> None:
    response = admin_client_api.post(f"/api/v1/quotas/{pai_tree['Quota1.1'].pk}/scale/", {"gpus": 56}, format="json")

    assert response.status_code == 400
    assert response.json() == {
        "gpus": ["Quota1.1 would need 56 GPUs but Quota1 has 128 − 80 = 48 left for its children."]
    }
    assert fresh(pai_tree["Quota1.1"]).gpus == 48


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        pytest.param(
            {"name": "x", "parent": "Quota9"}, "parent", "There is no quota named Quota9.", id="unknown-parent"
        ),
        pytest.param(
            {"name": "x", "gpus": "many"}, "gpus", "gpus must be a number, got a string.", id="gpus-not-a-number"
        ),
        pytest.param(
            {"name": "x", "queue_policy": "lifo"}, "queue_policy", '"lifo" is not a valid choice.', id="policy"
        ),
    ],
)
def test_a_malformed_body_is_a_400_naming_the_field(
    pai_tree: Tree, admin_client_api: APIClient, body: dict[str, Any], field: str, message: str
) -> None:
    response = admin_client_api.post("/api/v1/quotas/", body, format="json")

    assert response.status_code == 400
    assert response.json()[field] == [message]


def test_the_pai_transfer_through_the_api(pai_tree: Tree, admin_client_api: APIClient) -> None:
    response = admin_client_api.post(
        "/api/v1/quotas/transfer/", {"from": "Quota1.2", "to": "Quota1.1", "gpus": 8}, format="json"
    )

    assert response.status_code == 200, response.content
    assert (response.json()["from"]["gpus"], response.json()["to"]["gpus"]) == (72, 56)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param(
            "post", "/api/v1/quotas/transfer/", {"from": "Quota1.2", "to": "Quota1.1", "gpus": 8}, id="transfer"
        ),
        pytest.param("post", "/api/v1/quotas/{Quota1.2}/scale/", {"gpus": 8}, id="scale"),
        pytest.param("post", "/api/v1/quotas/", {"name": "Quota2", "gpus": 0}, id="create"),
        pytest.param("patch", "/api/v1/quotas/{Quota1}/", {"child_preemption": False}, id="update"),
        pytest.param("delete", "/api/v1/quotas/{Quota1.2}/?dry_run=true", None, id="delete"),
        pytest.param("post", "/api/v1/nodes/{gpu-1}/down/", {}, id="node-down"),
    ],
)
def test_a_dry_run_answers_valid_errors_preview_and_changes_nothing(
    pai_tree: Tree, admin_client_api: APIClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    if body is not None:
        body = {**body, "dry_run": True}
    before = (list(Quota.objects.values()), list(Node.objects.values()), AuditRecord.objects.count())

    response = call(admin_client_api, method, resolve(path, pai_tree), body)

    assert response.status_code == 200, response.content
    answer = response.json()
    assert set(answer) == {"valid", "errors", "preview"}
    assert (answer["valid"], answer["errors"]) == (True, {})
    assert set(answer["preview"]) == {"admit", "evict", "tree", "shares"}
    assert (list(Quota.objects.values()), list(Node.objects.values()), AuditRecord.objects.count()) == before


def test_an_invalid_dry_run_names_the_errors(pai_tree: Tree, admin_client_api: APIClient) -> None:
    response = admin_client_api.post(
        "/api/v1/quotas/transfer/", {"from": "Quota1.2", "to": "Quota1.1", "gpus": 96, "dry_run": True}, format="json"
    )

    assert response.status_code == 200
    assert response.json() == {
        "valid": False,
        "errors": {"gpus": ["Quota1.2 has 80 GPUs; it cannot give 96 GPUs."]},
        "preview": None,
    }


def test_quotas_filter_by_parent_and_root(pai_tree: Tree, admin_client_api: APIClient) -> None:
    def names(query: str) -> list[str]:
        return [row["name"] for row in admin_client_api.get(f"/api/v1/quotas/?{query}").json()["results"]]

    assert names("parent=Quota1") == ["Quota1.1", "Quota1.2"]
    assert names("root=true") == ["Quota1"]
    assert names("name=Quota1.2") == ["Quota1.2"]


def test_nodes_go_down_and_up_and_filter_by_state(pai_cluster: list[Node], admin_client_api: APIClient) -> None:
    node = pai_cluster[2]

    assert admin_client_api.post(f"/api/v1/nodes/{node.pk}/down/").json()["state"] == "not_ready"
    not_ready = admin_client_api.get("/api/v1/nodes/?state=not_ready").json()["results"]
    assert [row["name"] for row in not_ready] == ["gpu-3"]
    assert admin_client_api.patch(f"/api/v1/nodes/{node.pk}/", {"state": "ready"}, format="json").json()["state"] == (
        "ready"
    )
    actions = list(AuditRecord.objects.filter(object_type="node", object_repr="gpu-3").order_by("id"))
    assert [record.action for record in actions] == ["node.create", "node.down", "node.up"]


def test_a_missing_object_is_a_404(admin_client_api: APIClient, db: None) -> None:
    assert admin_client_api.get("/api/v1/quotas/999/").status_code == 404
    assert admin_client_api.post("/api/v1/quotas/999/scale/", {"gpus": 1}, format="json").status_code == 404
    assert admin_client_api.post("/api/v1/nodes/999/down/").status_code == 404


def test_the_audit_log_is_newest_first_and_filters(
    pai_tree: Tree, platform_admin: AbstractUser, admin_client_api: APIClient
) -> None:
    services.scale_quota(actor=platform_admin, quota=pai_tree["Quota1.1"], gpus=40)

    rows = admin_client_api.get("/api/v1/audit-log/").json()["results"]
    assert set(rows[0]) == {"at", "actor", "action", "object_type", "object", "before", "after"}
    assert rows[0] == {
        **rows[0],
        "actor": "platform-admin",
        "action": "quota.scale",
        "object_type": "quota",
        "object": "Quota1.1",
        "before": {"gpus": 48},
        "after": {"gpus": 40},
    }
    assert [
        row["action"] for row in admin_client_api.get("/api/v1/audit-log/?actor=platform-admin").json()["results"]
    ] == ["quota.scale"]
    by_action = admin_client_api.get("/api/v1/audit-log/?action=quota.create&object_type=quota").json()
    assert [row["object"] for row in by_action["results"]] == ["Quota1.2", "Quota1.1", "Quota1"]
    assert admin_client_api.get("/api/v1/audit-log/?object_type=node").json()["count"] == 16


def test_the_schema_documents_scale_and_transfer(admin_client_api: APIClient) -> None:
    schema = admin_client_api.get("/api/schema/", {"format": "json"}).json()

    assert "/api/v1/quotas/{id}/scale/" in schema["paths"]
    assert "/api/v1/quotas/transfer/" in schema["paths"]
    assert "/api/v1/audit-log/" in schema["paths"]
