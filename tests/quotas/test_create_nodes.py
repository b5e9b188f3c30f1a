"""`create_nodes`: a cluster's nodes through one service call, exactly as if created one by one."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import PermissionDenied, ValidationError

from quotas import services, signals
from quotas.models import AuditRecord, GpuDevice, Node, NodeState
from quotas.services import NewNode

pytestmark = pytest.mark.django_db

NODES = (
    NewNode(name="gpu-1", gpus=8, cpu=96, memory_gib=768, gpu_model="H100"),
    NewNode(name="gpu-2", gpus=4, cpu=48.5, gpu_model="A100", labels={"rack": "r2"}),
    NewNode(name="cpu-1", gpus=0, cpu=128, state=NodeState.NOT_READY),
)


def written_rows() -> dict[str, list[Any]]:
    """Every row a node creation writes, with ids replaced by node names (ids differ between runs)."""
    names = dict(Node.objects.values_list("id", "name"))
    return {
        "nodes": [
            {k: v for k, v in row.items() if k not in {"id", "created_at"}}
            for row in Node.objects.order_by("id").values()
        ],
        "devices": [
            (names[node_id], index, model)
            for node_id, index, model in GpuDevice.objects.order_by("node_id", "index").values_list(
                "node_id", "index", "model"
            )
        ],
        "audit": [
            (actor_id, action, object_type, names[int(object_id)], object_repr, after)
            for actor_id, action, object_type, object_id, object_repr, after in AuditRecord.objects.order_by(
                "id"
            ).values_list("actor_id", "action", "object_type", "object_id", "object_repr", "after")
        ],
    }


def test_create_nodes_writes_the_same_rows_as_one_by_one_creates(platform_admin: AbstractUser) -> None:
    for spec in NODES:
        services.create_node(
            actor=platform_admin,
            name=spec.name,
            gpus=spec.gpus,
            cpu=spec.cpu,
            memory_gib=spec.memory_gib,
            gpu_model=spec.gpu_model,
            labels=spec.labels,
            state=spec.state,
        )
    one_by_one = written_rows()
    AuditRecord.objects.all().delete()
    Node.objects.all().delete()

    created = services.create_nodes(actor=platform_admin, nodes=NODES)

    assert [node.name for node in created] == ["gpu-1", "gpu-2", "cpu-1"]
    assert [node.pk for node in created] == list(Node.objects.order_by("id").values_list("id", flat=True))
    assert written_rows() == one_by_one
    assert len(one_by_one["devices"]) == 12
    assert len(one_by_one["audit"]) == 3


@pytest.mark.parametrize(
    ("bad", "field", "message"),
    [
        pytest.param(
            NewNode(name="gpu-2", gpus=-1),
            "gpus",
            "nodes[1]: gpus of gpu-2 must be a whole number of devices ≥ 0, got -1.",
            id="negative-gpus",
        ),
        pytest.param(
            NewNode(name="gpu-2", gpus=2, cpu=-4),
            "cpu",
            "nodes[1]: cpu of gpu-2 must be at least 0, got -4.",
            id="negative-cpu",
        ),
        pytest.param(
            NewNode(name="gpu-1", gpus=2),
            "name",
            "nodes[1]: A node named 'gpu-1' is also nodes[0]; node names are unique.",
            id="twice-in-the-set",
        ),
        pytest.param(
            NewNode(name="old", gpus=2),
            "name",
            "nodes[1]: A node named 'old' already exists; node names are unique.",
            id="already-exists",
        ),
    ],
)
def test_a_bad_node_in_the_middle_writes_nothing_and_is_named(bad: NewNode, field: str, message: str) -> None:
    services.create_node(actor=None, name="old", gpus=1)
    before = (Node.objects.count(), GpuDevice.objects.count(), AuditRecord.objects.count())

    with pytest.raises(ValidationError) as refused:
        services.create_nodes(actor=None, nodes=[NewNode(name="gpu-1", gpus=8), bad, NewNode(name="gpu-3", gpus=8)])

    assert refused.value.message_dict == {field: [message]}
    assert (Node.objects.count(), GpuDevice.objects.count(), AuditRecord.objects.count()) == before


def test_only_platform_admins_create_nodes(make_user: Any) -> None:
    with pytest.raises(PermissionDenied, match="Only platform admins may change the inventory"):
        services.create_nodes(actor=make_user("dana"), nodes=NODES)
    assert not Node.objects.exists()


def test_create_nodes_announces_them_once_after_commit(django_capture_on_commit_callbacks: Any) -> None:
    heard: list[dict[str, Any]] = []

    def on_change(sender: Any, **kwargs: Any) -> None:
        heard.append(kwargs)

    signals.inventory_changed.connect(on_change)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            created = services.create_nodes(actor=None, nodes=NODES)
    finally:
        signals.inventory_changed.disconnect(on_change)

    assert [(event["action"], event["node_ids"]) for event in heard] == [("node.create", [node.pk for node in created])]
