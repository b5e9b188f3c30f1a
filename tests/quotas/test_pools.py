"""Resource pools through the API (issue 24): a platform admin makes pools, moves nodes into
them and roots quotas in them; each pool's tree keeps its own rules, and every sentence names
the pool."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from rest_framework.test import APIClient

from quotas import services
from quotas.models import AuditRecord, Node, Quota, ResourcePool


def post(client: APIClient, path: str, body: dict[str, Any]) -> Any:
    return client.post(f"/api/v1/{path}", body, format="json")


@pytest.fixture
def two_pools(db: None, admin_client_api: APIClient) -> APIClient:
    """The default pool with one 8-GPU node and a root of 8; the pool a100 with one 8-GPU node."""
    assert post(admin_client_api, "nodes/", {"name": "h-1", "gpus": 8, "cpu": 96, "memory_gib": 768}).status_code == 201
    assert post(admin_client_api, "quotas/", {"name": "vision", "gpus": 8}).status_code == 201
    created = post(admin_client_api, "pools/", {"name": "a100", "placement": "spread", "description": "A100 40 GB"})
    assert created.status_code == 201, created.content
    assert created.json() == {
        "id": created.json()["id"],
        "name": "a100",
        "placement": "spread",
        "description": "A100 40 GB",
    }
    node = post(admin_client_api, "nodes/", {"name": "a-1", "gpus": 8, "pool": "a100", "gpu_model": "A100"})
    assert node.status_code == 201, node.content
    assert node.json()["pool"] == "a100"
    return admin_client_api


def test_a_root_names_its_pool_and_its_children_inherit_it(two_pools: APIClient) -> None:
    root = post(two_pools, "quotas/", {"name": "batch", "pool": "a100", "gpus": 8})
    child = post(two_pools, "quotas/", {"name": "batch.nightly", "parent": "batch", "gpus": 4})

    assert (root.status_code, root.json()["pool"]) == (201, "a100")
    assert (child.status_code, child.json()["pool"]) == (201, "a100")
    vision = Quota.objects.get(name="vision")
    assert two_pools.get(f"/api/v1/quotas/{vision.pk}/").json()["pool"] == "default"
    assert [row["name"] for row in two_pools.get("/api/v1/quotas/?pool=a100").json()["results"]] == [
        "batch",
        "batch.nightly",
    ]
    assert [row["name"] for row in two_pools.get("/api/v1/nodes/?pool=a100").json()["results"]] == ["a-1"]


def test_the_roots_of_a_pool_fit_that_pool_and_the_sentence_names_it(two_pools: APIClient) -> None:
    # The default pool's 8 GPUs are all guaranteed, but a100's are not: each pool has its own room.
    refused = post(two_pools, "quotas/", {"name": "batch", "pool": "a100", "gpus": 16})

    assert refused.status_code == 400
    assert refused.json()["gpus"] == [
        "batch would need 16 GPUs but the pool a100 has 8 − 0 = 8 left for its root quotas."
    ]
    assert post(two_pools, "quotas/", {"name": "batch", "pool": "a100", "gpus": 8}).status_code == 201


def test_a_child_cannot_name_another_pool_than_its_parents(two_pools: APIClient) -> None:
    refused = post(two_pools, "quotas/", {"name": "vision.a", "parent": "vision", "pool": "a100", "gpus": 1})

    assert refused.status_code == 400
    assert refused.json()["pool"] == [
        "vision.a would be a child of vision, which is in the pool default, not a100; a child has its parent's pool."
    ]


def test_quota_names_are_unique_across_pools(two_pools: APIClient) -> None:
    refused = post(two_pools, "quotas/", {"name": "vision", "pool": "a100", "gpus": 1})

    assert refused.status_code == 400
    assert refused.json()["name"] == ["A quota named 'vision' already exists; quota names are unique."]


def test_a_quota_stays_in_its_pool(two_pools: APIClient) -> None:
    vision = Quota.objects.get(name="vision")
    refused = two_pools.patch(f"/api/v1/quotas/{vision.pk}/", {"pool": "a100"}, format="json")

    assert refused.status_code == 400
    assert "vision is in the pool default" in refused.json()["pool"][0]


def test_an_unknown_pool_is_named(two_pools: APIClient) -> None:
    refused = post(two_pools, "nodes/", {"name": "x-1", "gpus": 8, "pool": "v100"})

    assert (refused.status_code, refused.json()["pool"]) == (400, ["There is no pool named v100."])


def test_a_pool_holding_nodes_or_quotas_is_not_deleted_and_the_refusal_names_them(two_pools: APIClient) -> None:
    post(two_pools, "quotas/", {"name": "batch", "pool": "a100", "gpus": 8})
    a100 = ResourcePool.objects.get(name="a100")

    refused = two_pools.delete(f"/api/v1/pools/{a100.pk}/")

    assert refused.status_code == 400
    assert refused.json()["pool"] == [
        "The pool a100 holds 1 node(s) (a-1); move or delete them first.",
        "The pool a100 holds 1 quota(s) (batch); delete them first.",
    ]
    empty = post(two_pools, "pools/", {"name": "spare"}).json()
    assert two_pools.delete(f"/api/v1/pools/{empty['id']}/").status_code == 204
    assert list(AuditRecord.objects.filter(object_type="pool").values_list("action", flat=True)) == [
        "pool.delete",
        "pool.create",
        "pool.create",
    ]


def test_pool_names_are_unique_and_bounded(two_pools: APIClient) -> None:
    clash = post(two_pools, "pools/", {"name": "a100"})
    too_long = post(two_pools, "pools/", {"name": "p" * 101})
    bad_policy = post(two_pools, "pools/", {"name": "b", "placement": "random"})

    assert clash.json()["name"] == ["A pool named 'a100' already exists; pool names are unique."]
    assert too_long.json()["name"] == ["name has at most 100 characters."]
    assert bad_policy.status_code == 400 and "placement" in bad_policy.json()


def test_a_node_moves_between_pools_and_takes_its_gpus_along(two_pools: APIClient) -> None:
    post(two_pools, "nodes/", {"name": "h-2", "gpus": 8})
    h2 = Node.objects.get(name="h-2")

    moved = two_pools.patch(f"/api/v1/nodes/{h2.pk}/", {"pool": "a100"}, format="json")

    assert (moved.status_code, moved.json()["pool"]) == (200, "a100")
    # a100 has 16 GPUs now, so a root of 16 fits there.
    assert post(two_pools, "quotas/", {"name": "batch", "pool": "a100", "gpus": 16}).status_code == 201
    record = AuditRecord.objects.filter(action="node.move").get()
    assert (record.before, record.after) == ({"pool": "default"}, {"pool": "a100"})


def test_a_move_that_would_leave_the_roots_without_their_gpus_is_refused(two_pools: APIClient) -> None:
    h1 = Node.objects.get(name="h-1")

    refused = two_pools.patch(f"/api/v1/nodes/{h1.pk}/", {"pool": "a100"}, format="json")

    assert refused.status_code == 400
    assert refused.json()["gpus"] == [
        "Moving h-1 to the pool a100 would leave the pool default 0 GPUs, but its root quotas guarantee 8 GPUs."
    ]
    assert Node.objects.get(pk=h1.pk).pool.name == "default"


def test_only_platform_admins_write_pools(db: None, django_user_model: Any) -> None:
    someone = django_user_model.objects.create_user(username="someone")

    with pytest.raises(PermissionDenied, match="Only platform admins may create pools"):
        services.create_pool(actor=someone, name="p")
    assert not ResourcePool.objects.filter(name="p").exists()
