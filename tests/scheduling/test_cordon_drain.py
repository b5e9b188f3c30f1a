"""Cordon, drain and uncordon through the services and the API, with the runtime's cycle behind
them: a cordoned node keeps its jobs and takes no new ones; a drained node's jobs are evicted
(rule `drain`, after their grace period) and placed elsewhere; every change is audited with its
actor; a dry run previews the jobs a drain evicts and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import PermissionDenied, ValidationError
from rest_framework.test import APIClient

from quotas import services as quota_services
from quotas.models import AuditRecord, NodeState
from scheduling import services
from scheduling.clock import SimulatedClock, use_clock
from scheduling.executors import get_executor
from scheduling.models import JobEvent, JobState
from tests.scheduling.conftest import Cluster, build_cluster

pytestmark = pytest.mark.django_db

ClientFor = Callable[[AbstractUser | None], APIClient]


@pytest.fixture
def three_nodes(db: None) -> Cluster:
    return build_cluster(node_gpus=(8, 8, 8))


def _node_of(cluster: Cluster, name: str) -> str:
    return cluster.job(name).placements.get().node.name


def test_cordon_keeps_the_job_and_sends_new_ones_elsewhere(
    three_nodes: Cluster, platform_admin: AbstractUser, django_capture_on_commit_callbacks: Any
) -> None:
    three_nodes.submit("stays", gpus=4)
    services.converge()
    node = three_nodes.nodes[_node_of(three_nodes, "stays")]

    with django_capture_on_commit_callbacks(execute=True):
        quota_services.cordon_node(actor=platform_admin, node=node)

    node.refresh_from_db()
    assert node.state == NodeState.CORDONED
    three_nodes.submit("new", gpus=4)
    services.converge()
    assert (three_nodes.state("stays"), _node_of(three_nodes, "stays")) == (JobState.RUNNING, node.name)
    assert _node_of(three_nodes, "new") != node.name  # pack would have chosen the half-full node
    assert three_nodes.job("stays").preemptions == 0
    record = AuditRecord.objects.get(action="node.cordon")
    assert (record.actor, record.before, record.after) == (platform_admin, {"state": "ready"}, {"state": "cordoned"})


def test_drain_dry_run_previews_the_eviction_and_changes_nothing(
    three_nodes: Cluster, platform_admin: AbstractUser
) -> None:
    three_nodes.submit("train", gpus=8)
    services.converge()
    node = three_nodes.nodes[_node_of(three_nodes, "train")]

    outcome = quota_services.preview_drain_node(actor=platform_admin, node=node)

    assert outcome["valid"] and outcome["preview"] is not None
    (evicted,) = outcome["preview"]["evict"]
    assert (evicted["job"], evicted["rule"], evicted["quota"]) == ("train", "drain", "team-a")
    assert f"node {node.name} is draining" in evicted["reason"]
    node.refresh_from_db()
    assert node.state == NodeState.READY
    assert three_nodes.state("train") == JobState.RUNNING
    assert not AuditRecord.objects.filter(action="node.drain").exists()


def test_drain_evicts_after_the_grace_period_and_the_job_runs_elsewhere(platform_admin: AbstractUser) -> None:
    clock = SimulatedClock()
    with use_clock(clock):
        cluster = build_cluster(node_gpus=(8, 8, 8))
        cluster.submit("serve", gpus=8, kind="inference", grace_seconds=30)
        services.converge()
        drained = cluster.nodes[_node_of(cluster, "serve")]

        quota_services.drain_node(actor=platform_admin, node=drained)
        services.converge()

        job = cluster.job("serve")
        assert job.state == JobState.RELEASING  # SIGTERM; its GPUs stay held through the grace
        event = JobEvent.objects.get(job=job, kind="evicted")
        assert event.rule == "drain" and event.beneficiary_id is None
        assert event.message.startswith(f"node {drained.name} is draining")

        clock.advance(30)
        assert get_executor().tick(clock.now()) == 1
        assert cluster.state("serve") == JobState.PENDING
        services.converge()
        job = cluster.job("serve")
        assert (job.state, job.preemptions) == (JobState.RUNNING, 1)
        assert _node_of(cluster, "serve") != drained.name


def test_uncordon_returns_the_node_to_ready(three_nodes: Cluster, platform_admin: AbstractUser) -> None:
    node = three_nodes.nodes["gpu-1"]
    quota_services.drain_node(actor=platform_admin, node=node)
    quota_services.uncordon_node(actor=platform_admin, node=node)
    node.refresh_from_db()
    assert node.state == NodeState.READY
    assert list(AuditRecord.objects.filter(object_type="node").values_list("action", flat=True)) == [
        "node.uncordon",
        "node.drain",
    ]


def test_a_node_that_is_down_is_not_cordoned(three_nodes: Cluster, platform_admin: AbstractUser) -> None:
    node = three_nodes.nodes["gpu-1"]
    quota_services.set_node_state(actor=platform_admin, node=node, state=NodeState.NOT_READY)
    with pytest.raises(ValidationError, match="gpu-1 is not ready"):
        quota_services.cordon_node(actor=platform_admin, node=node)
    refused = quota_services.preview_uncordon_node(actor=platform_admin, node=node)
    assert not refused["valid"] and "state" in refused["errors"]


def test_only_platform_admins_cordon(three_nodes: Cluster, make_user: Callable[..., AbstractUser]) -> None:
    with pytest.raises(PermissionDenied):
        quota_services.cordon_node(actor=make_user("dev"), node=three_nodes.nodes["gpu-1"])


@pytest.mark.parametrize(
    ("action", "state"),
    [("cordon", NodeState.CORDONED), ("drain", NodeState.DRAINING), ("uncordon", NodeState.READY)],
)
def test_api_actions(
    three_nodes: Cluster, platform_admin: AbstractUser, client_for: ClientFor, action: str, state: str
) -> None:
    node = three_nodes.nodes["gpu-2"]
    node.state = NodeState.CORDONED if action == "uncordon" else NodeState.READY
    node.save()
    api = client_for(platform_admin)

    preview = api.post(f"/api/v1/nodes/{node.pk}/{action}/", {"dry_run": True}, format="json")
    assert preview.status_code == 200, preview.content
    assert set(preview.json()) == {"valid", "errors", "preview"}
    node.refresh_from_db()
    assert node.state != state

    done = api.post(f"/api/v1/nodes/{node.pk}/{action}/", format="json")
    assert done.status_code == 200, done.content
    assert done.json()["state"] == state


def test_api_drain_triggers_a_cycle_that_moves_the_job(
    three_nodes: Cluster, platform_admin: AbstractUser, client_for: ClientFor, django_capture_on_commit_callbacks: Any
) -> None:
    three_nodes.submit("train", gpus=8)
    services.converge()
    first = _node_of(three_nodes, "train")
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(platform_admin).post(f"/api/v1/nodes/{three_nodes.nodes[first].pk}/drain/")
    assert response.status_code == 200, response.content
    job = three_nodes.job("train")
    assert (job.state, job.preemptions) == (JobState.RUNNING, 1)
    assert _node_of(three_nodes, "train") != first


def test_api_refuses_others(
    three_nodes: Cluster, make_user: Callable[..., AbstractUser], client_for: ClientFor
) -> None:
    node = three_nodes.nodes["gpu-1"]
    assert client_for(make_user("dev")).post(f"/api/v1/nodes/{node.pk}/cordon/").status_code == 403
    assert client_for(None).post(f"/api/v1/nodes/{node.pk}/drain/").status_code == 401
    node.refresh_from_db()
    assert node.state == NodeState.READY


def test_api_down_node_is_a_400_naming_the_state(
    three_nodes: Cluster, platform_admin: AbstractUser, client_for: ClientFor
) -> None:
    node = three_nodes.nodes["gpu-1"]
    quota_services.set_node_state(actor=platform_admin, node=node, state=NodeState.NOT_READY)
    response = client_for(platform_admin).post(f"/api/v1/nodes/{node.pk}/drain/")
    assert response.status_code == 400
    assert "gpu-1 is not ready" in str(response.json())


def test_schema_documents_the_actions(admin_client_api: APIClient) -> None:
    schema = admin_client_api.get("/api/schema/", {"format": "json"}).json()
    for action in ("cordon", "drain", "uncordon"):
        operation = schema["paths"][f"/api/v1/nodes/{{id}}/{action}/"]["post"]
        assert operation["description"]
        assert any(parameter["name"] == "dry_run" for parameter in operation["parameters"])
