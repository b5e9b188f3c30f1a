"""SCHEDULING.md: never more GPUs on a node than it has. An edit that would take away a GPU a job
holds (Edit node, the API, the local agent's node at a start) is refused with the GPUs and jobs
named; the GPUs nobody holds may go."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from quotas.models import Node
from quotas.services import update_node
from scheduling import services
from scheduling.models import Job
from tests.scheduling.conftest import Cluster, build_cluster

FREE_TREE = (("Quota1", None, 0.0), ("team-a", "Quota1", 0.0))


def _running(cluster: Cluster, name: str, gpus: float) -> list[int]:
    job = cluster.submit(name, "team-a", gpus=gpus, command="sleep 60")
    services.converge()
    return [int(i) for placement in Job.objects.get(pk=job.pk).placements.all() for i in placement.devices]


def test_gpus_a_job_holds_keep_the_node_at_its_size(db: None) -> None:
    cluster = build_cluster(node_gpus=(4,), tree=FREE_TREE)
    assert _running(cluster, "two", 2) == [0, 1]
    with pytest.raises(ValidationError) as refused:
        update_node(actor=None, node=Node.objects.get(name="gpu-1"), gpus=1)
    assert refused.value.message_dict["gpus"] == [
        "gpu-1 cannot go down to 1 GPUs while jobs hold the GPUs it would lose (GPU 1 by two); "
        "drain the node, or let them end, first"
    ]
    node = Node.objects.get(name="gpu-1")
    assert (node.gpus, node.devices.count()) == (4, 4)
    # The two GPUs nobody holds may go.
    assert update_node(actor=None, node=node, gpus=2).gpus == 2


def test_fractions_on_a_device_hold_it_too(db: None) -> None:
    cluster = build_cluster(node_gpus=(2,), tree=FREE_TREE)
    _running(cluster, "whole", 1)
    assert _running(cluster, "half", 0.5) == [1]
    with pytest.raises(ValidationError, match=r"\(GPU 1 by half\)"):
        update_node(actor=None, node=Node.objects.get(name="gpu-1"), gpus=1)


def test_the_api_answers_400_naming_gpus(db: None, platform_admin: Any) -> None:
    cluster = build_cluster(node_gpus=(2,), tree=FREE_TREE)
    _running(cluster, "pair", 2)
    api = APIClient()
    api.force_authenticate(platform_admin)
    node = Node.objects.get(name="gpu-1")
    answer = api.patch(f"/api/v1/nodes/{node.pk}/", {"gpus": 1}, format="json")
    assert answer.status_code == 400
    assert "GPU 1 by pair" in answer.json()["gpus"][0]
    assert Node.objects.get(pk=node.pk).gpus == 2
