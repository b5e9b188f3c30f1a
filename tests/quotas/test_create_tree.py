"""create_quota_tree: a whole tree in one call, with create_quota's rules and messages, all or nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from quotas import services
from quotas.models import AuditRecord, Node, Quota
from quotas.services import NewQuota

TREE = [
    NewQuota(name="org", gpus=96, child_preemption=True),
    NewQuota(name="org.a", parent="org", gpus=48, limit=64),
    NewQuota(name="org.b", parent="org", gpus=40, weight=2.0, rank=1),
    NewQuota(name="org.a.x", parent="org.a", gpus=8, min_runtime_seconds=30),
    NewQuota(name="other", gpus=32, queue_policy="fifo"),
]


@pytest.fixture
def cluster(make_nodes: Callable[..., list[Node]]) -> list[Node]:
    return make_nodes(16)  # 128 GPUs


def test_a_valid_tree_is_created_with_one_audit_record(cluster: list[Node]) -> None:
    before = AuditRecord.objects.count()
    created = services.create_quota_tree(actor=None, quotas=TREE)
    assert [quota.name for quota in created] == [spec.name for spec in TREE]
    assert all(quota.pk is not None for quota in created)
    by_name = {quota.name: quota for quota in Quota.objects.all()}
    assert by_name["org.a.x"].parent_id == by_name["org.a"].pk
    assert by_name["org.a"].parent_id == by_name["org"].pk and by_name["other"].parent_id is None
    assert (by_name["org.a"].limit, by_name["org.b"].weight, by_name["org.b"].rank) == (64, 2.0, 1)
    assert by_name["org"].child_preemption and by_name["org.a.x"].min_runtime_seconds == 30
    assert by_name["other"].queue_policy == "fifo"
    assert AuditRecord.objects.count() == before + 1
    record = AuditRecord.objects.latest("id")
    assert record.action == "quota.create_tree"
    assert record.after is not None
    assert [entry["parent"] for entry in record.after["quotas"]] == [None, "org", "org", "org.a", None]


def test_it_grows_an_existing_tree(cluster: list[Node]) -> None:
    services.create_quota(actor=None, name="org", gpus=64)
    services.create_quota(actor=None, name="org.a", parent="org", gpus=32)
    services.create_quota_tree(actor=None, quotas=[NewQuota(name="org.b", parent="org", gpus=32)])
    assert Quota.objects.get(name="org.b").parent == Quota.objects.get(name="org")


def test_the_same_tree_as_create_quota_builds_it(cluster: list[Node]) -> None:
    services.create_quota_tree(actor=None, quotas=TREE)
    fields = ("name", "gpus", "cpu", "memory_gib", "limit", "weight", "rank", "queue_policy", "min_runtime_seconds")
    by_tree = sorted(Quota.objects.values_list(*fields))
    for quota in sorted(Quota.objects.all(), key=lambda quota: -len(quota.name)):  # children first
        quota.delete()
    created: dict[str, Quota] = {}
    for spec in TREE:
        options = {k: v for k, v in vars_of(spec).items() if k not in ("name", "parent")}
        created[spec.name] = services.create_quota(
            actor=None, name=spec.name, parent=created[spec.parent] if spec.parent else None, **options
        )
    assert sorted(Quota.objects.values_list(*fields)) == by_tree


def vars_of(spec: NewQuota) -> dict[str, Any]:
    return {name: getattr(spec, name) for name in spec.__slots__}


BROKEN = [
    pytest.param(
        [
            NewQuota(name="org", gpus=96),
            NewQuota(name="org.a", parent="org", gpus=60),
            NewQuota(name="org.b", parent="org", gpus=40),
        ],
        "gpus",
        "org.b would need 40 GPUs but org has 96 − 60 = 36 left for its children.",
        id="children-above-parent",
    ),
    pytest.param(
        [NewQuota(name="a", gpus=100), NewQuota(name="b", gpus=40)],
        "gpus",
        "b would need 40 GPUs but the pool default has 128 − 100 = 28 left for its root quotas.",
        id="roots-above-capacity",
    ),
    pytest.param(
        [NewQuota(name="a", gpus=16, limit=8)],
        "limit",
        "The limit of a (8 GPUs) is below its guarantee of 16 GPUs; the limit must be at least gpus.",
        id="limit-below-gpus",
    ),
    pytest.param(
        [NewQuota(name="a", gpus=-2)],
        "gpus",
        "gpus of a must be at least 0, got -2 GPUs.",
        id="negative",
    ),
    pytest.param(
        [NewQuota(name="a", gpus=8), NewQuota(name="a", gpus=8)],
        "name",
        "A quota named 'a' already exists; quota names are unique.",
        id="duplicate-in-the-tree",
    ),
    pytest.param(
        [NewQuota(name="taken", gpus=8)],
        "name",
        "A quota named 'taken' already exists; quota names are unique.",
        id="name-already-used",
    ),
    pytest.param(
        [NewQuota(name="a", parent="nowhere", gpus=8)],
        "parent",
        "There is no quota named 'nowhere'.",
        id="unknown-parent",
    ),
    pytest.param(
        [NewQuota(name="a.x", parent="a", gpus=8), NewQuota(name="a", gpus=16)],
        "parent",
        "The parent of a.x, a, must come before it.",
        id="parent-after-child",
    ),
    pytest.param(
        [NewQuota(name="a", gpus=8, queue_policy="random")],
        "queue_policy",
        "queue_policy 'random' is not one of",
        id="unknown-policy",
    ),
]


@pytest.mark.parametrize(("quotas", "field", "message"), BROKEN)
def test_a_broken_rule_writes_nothing(cluster: list[Node], quotas: list[NewQuota], field: str, message: str) -> None:
    services.create_quota(actor=None, name="taken", gpus=0)
    quotas_before = sorted(Quota.objects.values_list("name", flat=True))
    audit_before = AuditRecord.objects.count()
    with pytest.raises(ValidationError) as refused:
        services.create_quota_tree(actor=None, quotas=quotas)
    messages = refused.value.message_dict[field]
    assert any(text.startswith(message) for text in messages), messages
    assert sorted(Quota.objects.values_list("name", flat=True)) == quotas_before
    assert AuditRecord.objects.count() == audit_before


def test_the_message_matches_create_quota(cluster: list[Node]) -> None:
    services.create_quota(actor=None, name="org", gpus=96)
    services.create_quota(actor=None, name="org.a", parent="org", gpus=60)
    with pytest.raises(ValidationError) as one:
        services.create_quota(actor=None, name="org.b", parent="org", gpus=40)
    with pytest.raises(ValidationError) as tree:
        services.create_quota_tree(actor=None, quotas=[NewQuota(name="org.b", parent="org", gpus=40)])
    assert one.value.message_dict == tree.value.message_dict


def test_only_platform_admins_may(cluster: list[Node], django_user_model: Any) -> None:
    from django.core.exceptions import PermissionDenied

    user = django_user_model.objects.create_user(username="u", password="p")
    with pytest.raises(PermissionDenied):
        services.create_quota_tree(actor=user, quotas=TREE)
    assert not Quota.objects.exists()
