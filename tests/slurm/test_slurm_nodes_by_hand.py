"""Slurm nodes come from the Slurm sync only: a platform admin cannot make a node a Slurm node by
hand (nothing would run the jobs placed on it), through the API or the services."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils.html import escape
from rest_framework.test import APIClient

from quotas.models import Node, NodeExecutor, ResourcePool
from quotas.services.nodes import SLURM_BY_HAND, NewNode, create_nodes, update_node

pytestmark = pytest.mark.django_db


@pytest.fixture
def node() -> Node:
    pool = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)[0]
    return Node.objects.create(pool=pool, name="gpu-1", gpus=8)


def test_the_api_refuses_a_slurm_node_by_hand_naming_the_field(admin_client_api: APIClient, node: Node) -> None:
    created = admin_client_api.post("/api/v1/nodes/", {"name": "gpu-2", "gpus": 8, "executor": "slurm"}, format="json")
    assert created.status_code == 400 and SLURM_BY_HAND in created.json()["executor"]
    changed = admin_client_api.patch(f"/api/v1/nodes/{node.pk}/", {"executor": "slurm"}, format="json")
    assert changed.status_code == 400 and SLURM_BY_HAND in changed.json()["executor"]
    assert Node.objects.get(pk=node.pk).executor == NodeExecutor.SIMULATED
    assert not Node.objects.filter(name="gpu-2").exists()


def test_the_sync_itself_may_and_an_admin_may_still_edit_a_slurm_node(
    platform_admin: AbstractUser, node: Node
) -> None:
    (slurm_node,) = create_nodes(actor=None, nodes=[NewNode(name="n1", gpus=2, executor=NodeExecutor.SLURM)])
    edited = update_node(actor=platform_admin, node=slurm_node, labels={"rack": "a"})
    assert (edited.executor, edited.labels) == (NodeExecutor.SLURM, {"rack": "a"})
    with pytest.raises(ValidationError) as refused:
        update_node(actor=platform_admin, node=node, executor=NodeExecutor.SLURM)
    assert refused.value.message_dict["executor"] == [SLURM_BY_HAND]


def test_add_node_says_why_slurm_is_not_chosen_by_hand(platform_admin: AbstractUser) -> None:
    page = Client()
    page.force_login(get_user_model().objects.get(pk=platform_admin.pk))
    fields = {"name": "gpu-2", "gpus": "8", "step": "preview"}
    chose_slurm = page.post("/nodes/new/", {**fields, "executor": "slurm"}).content.decode()
    assert escape(SLURM_BY_HAND) in chose_slurm
    unknown = page.post("/nodes/new/", {**fields, "executor": "kubelet"}).content.decode()
    assert "Runs jobs with must be Simulated or Node agent, not kubelet." in unknown
    assert escape("Slurm nodes are not added by hand: they come from the Slurm cluster's inventory") in unknown
    assert not Node.objects.filter(name="gpu-2").exists()
