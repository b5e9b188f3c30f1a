"""CPU and memory as managed resources (issue 24): a quota's cpu / memory_gib guarantees and its
cpu_limit / memory_gib_limit, through the API and the service. A pool manages a resource when a
root quota of it sets the guarantee; a limit is never below its guarantee; a refused write names
the field and the numbers and leaves nothing half written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from quotas import bounds, services
from quotas.models import AuditRecord, Node, Quota
from tests.quotas.conftest import fresh

pytestmark = pytest.mark.django_db


@pytest.fixture
def a100(make_nodes: Callable[..., list[Node]]) -> list[Node]:
    """Two nodes of 32 cores and 256 GiB each: 64 cores and 512 GiB in the pool."""
    return make_nodes(2, cpu=32, memory_gib=256)


def post(client: APIClient, **fields: Any) -> Any:
    return client.post("/api/v1/quotas/", {"gpus": 0, **fields}, format="json")


def test_a_platform_admin_sets_cpu_and_memory_guarantees_and_limits_and_reads_them_back(
    admin_client_api: APIClient, a100: list[Node]
) -> None:
    made = post(admin_client_api, name="team-a", gpus=8, cpu=32, cpu_limit=48, memory_gib=128, memory_gib_limit=256)

    assert made.status_code == 201, made.json()
    body = admin_client_api.get(f"/api/v1/quotas/{made.json()['id']}/").json()
    assert {key: body[key] for key in ("cpu", "cpu_limit", "memory_gib", "memory_gib_limit")} == {
        "cpu": 32,
        "cpu_limit": 48,
        "memory_gib": 128,
        "memory_gib_limit": 256,
    }
    changed = admin_client_api.patch(f"/api/v1/quotas/{body['id']}/", {"cpu_limit": None}, format="json")
    assert changed.status_code == 200, changed.json()
    assert fresh(Quota.objects.get(name="team-a")).cpu_limit is None
    assert list(AuditRecord.objects.filter(action="quota.update").values_list("before", "after")) == [
        ({"cpu_limit": 48}, {"cpu_limit": None})
    ]


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        pytest.param(
            {"cpu": 32, "cpu_limit": 16},
            "cpu_limit",
            "The cpu_limit of team-a (16 CPU cores) is below its guarantee of 32 CPU cores; "
            "the cpu_limit must be at least cpu.",
            id="cpu-limit-below-guarantee",
        ),
        pytest.param(
            {"memory_gib": 128, "memory_gib_limit": 64.5},
            "memory_gib_limit",
            "The memory_gib_limit of team-a (64.5 GiB of memory) is below its guarantee of 128 GiB of memory; "
            "the memory_gib_limit must be at least memory_gib.",
            id="memory-limit-below-guarantee",
        ),
        pytest.param(
            {"cpu": 96},
            "cpu",
            "team-a would need 96 CPU cores but the pool default has 64 − 0 = 64 left for its root quotas.",
            id="cpu-beyond-the-pool",
        ),
        pytest.param(
            {"memory_gib": 600},
            "memory_gib",
            "team-a would need 600 GiB of memory but the pool default has 512 − 0 = 512 left for its root quotas.",
            id="memory-beyond-the-pool",
        ),
        pytest.param(
            {"cpu_limit": 8},
            "cpu_limit",
            "team-a would set a cpu_limit but the pool default manages no CPU cores: no root quota of it sets "
            "cpu. Give a root quota a cpu guarantee first.",
            id="cpu-limit-where-cpu-is-not-managed",
        ),
        pytest.param({"cpu_limit": -1}, "cpu_limit", "cpu_limit must be at least 0, got -1.0.", id="negative"),
        pytest.param(
            {"memory_gib_limit": bounds.QUOTA_MEMORY_GIB_MAX + 1},
            "memory_gib_limit",
            "memory_gib_limit must be at most 1,000,000,000, got 1000000001.0.",
            id="beyond-the-bound",
        ),
        pytest.param({"cpu_limit": "8"}, "cpu_limit", "cpu_limit must be a number, got a string.", id="a-string"),
    ],
)
def test_bad_cpu_and_memory_settings_are_refused_by_field_and_number_and_nothing_is_written(
    admin_client_api: APIClient, a100: list[Node], fields: dict[str, Any], field: str, says: str
) -> None:
    refused = post(admin_client_api, name="team-a", **fields)

    assert refused.status_code == 400
    assert says in refused.json()[field]
    assert not Quota.objects.exists()
    assert not AuditRecord.objects.filter(action__startswith="quota.").exists()


def test_a_child_sets_cpu_only_where_its_parent_guarantees_cpu(admin_client_api: APIClient, a100: list[Node]) -> None:
    """The pool manages CPU (dept sets it), but plain guarantees none: its children have none to share."""
    services.create_quota(actor=None, name="dept", gpus=8, cpu=48)
    services.create_quota(actor=None, name="plain", gpus=0)

    within = post(admin_client_api, name="team-a", parent="dept", cpu=40, cpu_limit=64)
    under_plain = post(admin_client_api, name="team-c", parent="plain", cpu=4)
    limited_under_plain = post(admin_client_api, name="team-d", parent="plain", cpu_limit=4)

    assert within.status_code == 201, within.json()  # a limit may reach past the parent's guarantee
    assert under_plain.status_code == 400
    assert under_plain.json()["cpu"] == [
        "team-c sets 4 CPU cores but its parent plain guarantees no CPU cores; give plain a cpu guarantee first."
    ]
    assert limited_under_plain.status_code == 201, limited_under_plain.json()  # it may borrow up to 4 cores
    assert sorted(Quota.objects.values_list("name", flat=True)) == ["dept", "plain", "team-a", "team-d"]


def test_a_child_over_its_parents_cpu_is_refused_with_the_numbers(
    admin_client_api: APIClient, a100: list[Node]
) -> None:
    root = services.create_quota(actor=None, name="dept", gpus=8, cpu=48)
    services.create_quota(actor=None, name="team-b", parent=root, cpu=16)

    refused = post(admin_client_api, name="team-a", parent="dept", cpu=40)

    assert refused.status_code == 400
    assert refused.json()["cpu"] == ["team-a would need 40 CPU cores but dept has 48 − 16 = 32 left for its children."]
    assert not Quota.objects.filter(name="team-a").exists()


def test_scaling_cpu_below_the_limit_a_quota_keeps_is_refused_and_the_quota_is_unchanged(
    admin_client_api: APIClient, a100: list[Node]
) -> None:
    quota = services.create_quota(actor=None, name="team-a", gpus=8, cpu=16, cpu_limit=24)

    refused = admin_client_api.post(f"/api/v1/quotas/{quota.pk}/scale/", {"cpu": 32}, format="json")

    assert refused.status_code == 400
    assert refused.json()["cpu_limit"] == [
        "The cpu_limit of team-a (24 CPU cores) is below its guarantee of 32 CPU cores; "
        "the cpu_limit must be at least cpu."
    ]
    assert (fresh(quota).cpu, fresh(quota).cpu_limit) == (16, 24)


def test_a_root_cannot_stop_the_pool_managing_cpu_while_a_quota_still_limits_it(a100: list[Node]) -> None:
    root = services.create_quota(actor=None, name="dept", gpus=8, cpu=48)
    services.create_quota(actor=None, name="team-a", parent=root, cpu_limit=32)

    with pytest.raises(ValidationError) as refused:
        services.update_quota(actor=None, quota=root, cpu=None)

    assert refused.value.message_dict["cpu_limit"] == [
        "team-a would set a cpu_limit but the pool default manages no CPU cores: no root quota of it sets cpu. "
        "Give a root quota a cpu guarantee first."
    ]
    assert fresh(root).cpu == 48


def test_a_whole_tree_at_once_follows_the_same_cpu_rules(a100: list[Node]) -> None:
    with pytest.raises(ValidationError) as refused:
        services.create_quota_tree(
            actor=None,
            quotas=[
                services.NewQuota(name="dept", gpus=8, cpu=48, cpu_limit=40),
                services.NewQuota(name="team-a", parent="dept", memory_gib_limit=64),
            ],
        )

    assert refused.value.message_dict == {
        "cpu_limit": [
            "The cpu_limit of dept (40 CPU cores) is below its guarantee of 48 CPU cores; "
            "the cpu_limit must be at least cpu."
        ]
    }
    with pytest.raises(ValidationError) as unmanaged:
        services.create_quota_tree(
            actor=None,
            quotas=[
                services.NewQuota(name="dept", gpus=8, cpu=48, cpu_limit=64),
                services.NewQuota(name="team-a", parent="dept", memory_gib_limit=64),
            ],
        )
    assert "manages no GiB of memory" in unmanaged.value.message_dict["memory_gib_limit"][0]
    assert not Quota.objects.exists()
