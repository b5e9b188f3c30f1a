"""Every size a platform admin sends has a bound (quotas.bounds): the value at the bound is taken,
the next one is a 400 naming the field, the bound and the value, in the API and in the service.
A node of 10^9 GPUs once built 10^9 device rows in memory and took the console down."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from quotas import bounds, services
from quotas.models import GpuDevice, Node, Quota

pytestmark = pytest.mark.django_db

# field, the largest value taken, the smallest refused, what the refusal says
NODE_BOUNDS = [
    pytest.param("gpus", bounds.NODE_GPUS_MAX, 65, "at most 64", id="gpus"),
    pytest.param("cpu", bounds.NODE_CPU_MAX, 4_096.5, "at most 4,096", id="cpu"),
    pytest.param("memory_gib", bounds.NODE_MEMORY_GIB_MAX, 65_537, "at most 65,536", id="memory"),
    pytest.param("name", "n" * 100, "n" * 101, "at most 100 characters", id="name"),
    pytest.param("gpu_model", "m" * 100, "m" * 101, "at most 100 characters", id="gpu-model"),
]
QUOTA_BOUNDS = [
    pytest.param("limit", bounds.QUOTA_GPUS_MAX, 1_000_001, "at most 1,000,000", id="limit"),
    pytest.param("weight", bounds.QUOTA_WEIGHT_MAX, 10_001, "at most 10,000", id="weight"),
    pytest.param("rank", bounds.QUOTA_RANK_MAX, 1_000_001, "at most 1,000,000", id="rank"),
    pytest.param("rank", -bounds.QUOTA_RANK_MAX, -1_000_001, "at least -1,000,000", id="negative-rank"),
    pytest.param("min_runtime_seconds", 31_536_000, 31_536_001, "at most 31,536,000", id="min-runtime"),
    pytest.param("name", "q" * 100, "q" * 101, "at most 100 characters", id="name"),
]


def node(**fields: Any) -> dict[str, Any]:
    return {"name": "gpu-x", "gpus": 8, "cpu": 96, "memory_gib": 768, **fields}


@pytest.mark.parametrize(("field", "at_bound", "above", "says"), NODE_BOUNDS)
def test_a_node_at_the_bound_is_taken_and_above_it_refused(
    admin_client_api: APIClient, field: str, at_bound: Any, above: Any, says: str
) -> None:
    refused = admin_client_api.post("/api/v1/nodes/", node(**{field: above}), format="json")
    taken = admin_client_api.post("/api/v1/nodes/", node(**{field: at_bound}), format="json")

    assert refused.status_code == 400
    assert says in refused.json()[field][0]
    assert taken.status_code == 201, taken.json()
    assert Node.objects.count() == 1


@pytest.mark.parametrize(("field", "at_bound", "above", "says"), NODE_BOUNDS)
def test_the_inventory_service_refuses_the_same_sizes(field: str, at_bound: Any, above: Any, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        services.create_node(actor=None, **node(**{field: above}))

    assert says in refused.value.message_dict[field][0]


def test_a_node_of_a_billion_gpus_is_refused_before_any_device_is_built(admin_client_api: APIClient) -> None:
    refused = admin_client_api.post("/api/v1/nodes/", node(gpus=10**9), format="json")

    assert refused.status_code == 400
    assert refused.json() == {"gpus": ["gpus must be at most 64, got 1000000000."]}
    with pytest.raises(ValidationError, match="at most 64"):
        services.create_node(actor=None, name="huge", gpus=10**9)
    assert not GpuDevice.objects.exists()


def test_labels_are_bounded_in_number_and_length(admin_client_api: APIClient) -> None:
    most = {f"k{index}": "v" for index in range(bounds.NODE_LABELS_MAX)}
    too_many = {**most, "one-more": "v"}

    assert admin_client_api.post("/api/v1/nodes/", node(labels=most), format="json").status_code == 201
    refused = admin_client_api.post("/api/v1/nodes/", node(name="gpu-y", labels=too_many), format="json")
    long_value = admin_client_api.post("/api/v1/nodes/", node(name="gpu-z", labels={"k": "v" * 201}), format="json")

    assert refused.json() == {"labels": ["labels hold at most 64 entries, got 65."]}
    assert long_value.json() == {"labels.k": ["a label has at most 200 characters."]}


@pytest.mark.parametrize(("field", "at_bound", "above", "says"), QUOTA_BOUNDS)
def test_a_quota_at_the_bound_is_taken_and_above_it_refused(
    admin_client_api: APIClient, field: str, at_bound: Any, above: Any, says: str
) -> None:
    refused = admin_client_api.post("/api/v1/quotas/", {"name": "team", "gpus": 0, field: above}, format="json")
    taken = admin_client_api.post("/api/v1/quotas/", {"name": "team", "gpus": 0, field: at_bound}, format="json")

    assert refused.status_code == 400
    assert says in refused.json()[field][0]
    assert taken.status_code == 201, taken.json()


@pytest.mark.parametrize(("field", "at_bound", "above", "says"), QUOTA_BOUNDS)
def test_the_quota_service_refuses_the_same_sizes(field: str, at_bound: Any, above: Any, says: str) -> None:
    with pytest.raises(ValidationError) as refused:
        services.create_quota(actor=None, **{"name": "team", "gpus": 0, field: above})

    assert says in refused.value.message_dict[field][0]


@pytest.mark.parametrize(
    ("field", "most"),
    [("gpus", "1,000,000"), ("cpu", "100,000,000"), ("memory_gib", "1,000,000,000")],
)
def test_a_guarantee_is_bounded_before_the_pool_is_asked(admin_client_api: APIClient, field: str, most: str) -> None:
    at_bound = float(most.replace(",", ""))
    refused = admin_client_api.post("/api/v1/quotas/", {"name": "team", field: at_bound + 1}, format="json")
    beyond_pool = admin_client_api.post("/api/v1/quotas/", {"name": "team", field: at_bound}, format="json")

    assert f"at most {most}" in refused.json()[field][0]
    # At the bound, the only objection left is the pool's capacity, a rule of the tree.
    assert beyond_pool.status_code == 400
    assert not any("at most" in message for message in beyond_pool.json().get(field, []))
    assert not Quota.objects.exists()


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("limit=1001", "limit must be from 1 to 1,000, got 1001."),
        ("limit=0", "limit must be from 1 to 1,000, got 0."),
        ("offset=false", "offset must be a whole number, got 'false'."),
        ("limit=", "limit must be a whole number, got ''."),
        ("offset=", "offset must be a whole number, got ''."),
        ("offset=-1", "offset must be a whole number, got '-1'."),
        ("offset=1000000001", "offset must be from 0 to 1,000,000,000, got 1000000001."),
    ],
)
def test_a_page_outside_its_bounds_is_refused(admin_client_api: APIClient, query: str, says: str) -> None:
    answer = admin_client_api.get(f"/api/v1/nodes/?{query}")

    assert answer.status_code == 400
    assert says in next(iter(answer.json().values()))


def test_the_largest_page_is_served(admin_client_api: APIClient) -> None:
    assert admin_client_api.get("/api/v1/nodes/?limit=1000&offset=1000000000").status_code == 200
