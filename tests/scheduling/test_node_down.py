"""A node that goes down takes its replicas with it: their jobs go back to the queue (or fail
when they asked not to be requeued) and the next cycle places them on the ready nodes."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from quotas.services import set_node_state
from scheduling import services
from scheduling.models import JobEvent, JobState
from tests.scheduling.conftest import Cluster, build_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_nodes(db: None) -> Cluster:
    return build_cluster(node_gpus=(8, 8, 8))


def _node_of(cluster: Cluster, name: str) -> str:
    return cluster.job(name).placements.get().node.name


def test_marking_a_node_down_moves_its_job_to_a_ready_node(
    three_nodes: Cluster, platform_admin: AbstractUser, client_for: Any, django_capture_on_commit_callbacks: Any
) -> None:
    three_nodes.submit("train", gpus=8)
    services.converge()
    first_node = _node_of(three_nodes, "train")

    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(platform_admin).post(f"/api/v1/nodes/{three_nodes.nodes[first_node].pk}/down/")

    assert response.status_code == 200, response.content
    job = three_nodes.job("train")
    assert (job.state, job.preemptions) == (JobState.RUNNING, 1)
    assert _node_of(three_nodes, "train") != first_node
    assert JobEvent.objects.filter(job=job, kind="requeued", message=f"node {first_node} went down").exists()


def test_a_job_that_asked_not_to_be_requeued_fails_with_the_node(
    three_nodes: Cluster, platform_admin: Any, django_capture_on_commit_callbacks: Any
) -> None:
    three_nodes.submit("once", gpus=8, requeue=False)
    services.converge()
    node = three_nodes.nodes[_node_of(three_nodes, "once")]

    with django_capture_on_commit_callbacks(execute=True):
        set_node_state(actor=platform_admin, node=node, state="not_ready")

    job = three_nodes.job("once")
    assert job.state == JobState.FAILED
    assert f"node {node.name} went down" in job.reason_message


def test_jobs_on_other_nodes_are_left_alone(
    three_nodes: Cluster, platform_admin: Any, django_capture_on_commit_callbacks: Any
) -> None:
    three_nodes.submit("here", gpus=8)
    three_nodes.submit("there", quota="team-b", gpus=8)
    services.converge()
    down = three_nodes.nodes[_node_of(three_nodes, "here")]

    with django_capture_on_commit_callbacks(execute=True):
        set_node_state(actor=platform_admin, node=down, state="not_ready")

    assert three_nodes.job("there").preemptions == 0
    assert three_nodes.job("here").preemptions == 1
