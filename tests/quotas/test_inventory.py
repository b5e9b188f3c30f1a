"""Nodes, their GPU devices, the pool's capacity, and `manage.py load_inventory`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from quotas import selectors, services
from quotas.models import AuditRecord, GpuDevice, Node, NodeState, Quota


def devices(node: Node) -> list[tuple[int, str]]:
    return list(GpuDevice.objects.filter(node=node).values_list("index", "model"))


def test_a_node_gets_one_device_per_gpu_and_follows_its_count(db: None) -> None:
    node = services.create_node(actor=None, name="gpu-1", gpus=4, gpu_model="A100")
    assert devices(node) == [(0, "A100"), (1, "A100"), (2, "A100"), (3, "A100")]

    node = services.update_node(actor=None, node=node, gpus=2, gpu_model="H100")
    assert devices(node) == [(0, "H100"), (1, "H100")]

    node = services.update_node(actor=None, node=node, gpus=3)
    assert devices(node) == [(0, "H100"), (1, "H100"), (2, "H100")]


def test_capacity_counts_every_node_ready_or_not(pai_cluster: list[Node]) -> None:
    services.set_node_state(actor=None, node=pai_cluster[0], state=NodeState.NOT_READY)

    capacity = selectors.pool_capacity(pool=pai_cluster[0].pool)

    assert capacity == {
        "gpus": 128,
        "cpu": 1536,
        "memory_gib": 12288,
        "nodes": 16,
        "ready_nodes": 15,
        "ready_gpus": 120,
    }


def test_a_node_down_keeps_the_guarantees_valid(pai_tree: dict[str, Quota]) -> None:
    node = Node.objects.get(name="gpu-3")

    node = services.set_node_state(actor=None, node=node, state=NodeState.NOT_READY)
    services.scale_quota(actor=None, quota=pai_tree["Quota1"], gpus=128)

    assert node.state == "not_ready"


@pytest.mark.parametrize(
    ("operation", "field", "message"),
    [
        pytest.param(
            lambda node: services.update_node(actor=None, node=node, gpus=4),
            "gpus",
            "Changing gpu-3 from 8 GPUs to 4 GPUs would leave the pool default 124 GPUs, but its root quotas "
            "guarantee 128 GPUs.",
            id="fewer-gpus",
        ),
        pytest.param(
            lambda node: services.delete_node(actor=None, node=node),
            "gpus",
            "Removing gpu-3 would leave the pool default 120 GPUs, but its root quotas guarantee 128 GPUs.",
            id="remove",
        ),
    ],
)
def test_the_inventory_cannot_shrink_below_the_roots_guarantees(
    pai_tree: dict[str, Quota], operation: Any, field: str, message: str
) -> None:
    node = Node.objects.get(name="gpu-3")

    with pytest.raises(ValidationError) as refused:
        operation(node)

    assert refused.value.message_dict == {field: [message]}
    assert Node.objects.get(name="gpu-3").gpus == 8
    assert GpuDevice.objects.filter(node__name="gpu-3").count() == 8


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        pytest.param({"gpus": -1}, "gpus", "gpus of gpu-x must be a whole number of devices ≥ 0, got -1.", id="gpus"),
        pytest.param({"gpus": 2.5}, "gpus", "gpus of gpu-x must be a whole number of devices ≥ 0, got 2.5.", id="frac"),
        pytest.param({"gpus": 8, "cpu": -4}, "cpu", "cpu of gpu-x must be at least 0, got -4.", id="cpu"),
        pytest.param(
            {"gpus": 8, "state": "broken"},
            "state",
            "state 'broken' of gpu-x is not one of ready, not_ready, cordoned, draining.",
            id="state",
        ),
    ],
)
def test_a_node_with_bad_amounts_is_refused(db: None, fields: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        services.create_node(actor=None, name="gpu-x", **fields)

    assert refused.value.message_dict == {field: [message]}
    assert not Node.objects.exists()


def test_node_names_are_unique(pai_cluster: list[Node]) -> None:
    with pytest.raises(ValidationError) as refused:
        services.create_node(actor=None, name="gpu-1", gpus=8)

    assert refused.value.message_dict == {"name": ["A node named 'gpu-1' already exists; node names are unique."]}


INVENTORY = """
name: two-racks
description: extra keys of a scenario file are ignored
nodes:
  - {name: gpu, count: 3, gpus: 8, cpu: 96, memory_gib: 768, gpu_model: A100}
  - {name: big, gpus: 16, labels: {zone: b}}
quotas:
  - {name: ignored, gpus: 1}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return path


def test_load_inventory_expands_counts_and_is_idempotent(db: None, tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, INVENTORY)

    call_command("load_inventory", str(path))
    first = capsys.readouterr().out
    call_command("load_inventory", str(path))
    second = capsys.readouterr().out

    assert list(Node.objects.values_list("name", "gpus", "gpu_model")) == [
        ("gpu-1", 8, "A100"),
        ("gpu-2", 8, "A100"),
        ("gpu-3", 8, "A100"),
        ("big", 16, ""),
    ]
    assert Node.objects.get(name="big").labels == {"zone": "b"}
    assert GpuDevice.objects.count() == 40
    assert not Quota.objects.exists()
    assert "4 created, 0 updated, 0 unchanged." in first
    assert "Pool default: 4 nodes (4 ready), 40 GPUs (40 ready)." in first
    assert "0 created, 0 updated, 4 unchanged." in second
    assert AuditRecord.objects.filter(action="node.create").count() == 4


def test_load_inventory_updates_nodes_by_name(db: None, tmp_path: Path, capsys: Any) -> None:
    call_command("load_inventory", str(write(tmp_path, INVENTORY)))

    call_command("load_inventory", str(write(tmp_path, "nodes:\n  - {name: big, gpus: 8}\n")))

    assert Node.objects.get(name="big").gpus == 8
    assert Node.objects.count() == 4, "nodes the file does not name stay"
    assert "0 created, 1 updated, 0 unchanged." in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "nodes:\n  - {name: gpu, count: 2, gpus: 8}\n  - {name: bad, gpus: -8}\n",
            "nodes[1] (bad): gpus of bad must be a whole number of devices ≥ 0, got -8.",
            id="negative-gpus",
        ),
        pytest.param(
            "nodes:\n  - {name: gpu, gpu: 8}\n",
            "nodes[0] (gpu): unknown field(s) gpu; "
            "known: count, cpu, gpu_model, gpus, labels, memory_gib, name, state.",
            id="unknown-field",
        ),
        pytest.param("nodes:\n  - {name: gpu}\n", "nodes[0] (gpu): gpus is required.", id="missing-gpus"),
        pytest.param(
            "nodes:\n  - {name: gpu, gpus: 8, count: 0}\n",
            "nodes[0] (gpu): count must be a whole number ≥ 1, got 0.",
            id="count-zero",
        ),
        pytest.param(
            "nodes:\n  - {name: gpu, count: 2, gpus: 8}\n  - {name: gpu-2, gpus: 8}\n",
            "nodes[1] (gpu-2): node gpu-2 is already defined by nodes[0].",
            id="duplicate-after-expansion",
        ),
        pytest.param("quotas: []\n", "has no top-level `nodes:` list.", id="no-nodes"),
        pytest.param("nodes: [\n", "is not valid YAML", id="not-yaml"),
    ],
)
def test_load_inventory_refuses_a_bad_file_whole(db: None, tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("load_inventory", str(write(tmp_path, text)))

    assert message in str(refused.value)
    assert refused.value.returncode == 2
    assert not Node.objects.exists(), "nothing is half written"


def test_load_inventory_names_a_missing_file(db: None, tmp_path: Path) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("load_inventory", str(tmp_path / "absent.yaml"))

    assert "Cannot read" in str(refused.value)
    assert refused.value.returncode == 2
