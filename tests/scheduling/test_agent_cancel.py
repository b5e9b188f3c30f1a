"""A cancel on an agent node waits for the process, as an eviction does: the job keeps its devices
(releasing, `cancelling`) until its agent reports the process gone or its node is lost, and only
then is it cancelled and are its devices free for the next job. Simulated nodes cancel at once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import AbstractUser
from django.utils import timezone
from rest_framework.test import APIClient

from quotas.models import Node, NodeExecutor
from quotas.node_agents import heartbeat_record_seconds
from scheduling import lifecycle, services
from scheduling.executors import get_executor
from scheduling.models import Job, JobEvent, JobEventKind, JobState
from tests.scheduling.conftest import Cluster
from tests.scheduling.test_agent_api import _agent_of, _beat, _running, _submit, agent_cluster

__all__ = ["agent_cluster"]  # the fixture, used by name below


def _cancel(client: APIClient, job: Job) -> dict[str, Any]:
    answer = client.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json")
    assert answer.status_code == 200, answer.content
    body: dict[str, Any] = answer.json()
    return body


def _holding_both_agent_nodes(cluster: Cluster) -> tuple[Job, APIClient, str, dict[str, Any]]:
    """One 8-GPU job running on an agent node, the other agent node full as well."""
    Node.objects.exclude(name__in=["gpu-1", "gpu-2"]).update(state="cordoned")
    job = _submit(cluster, "train", gpus=8, grace_seconds=30, command="sleep 1000")
    filler = _submit(cluster, "filler", gpus=8, command="sleep 1000")
    client, node = _agent_of(job)
    (start,) = _beat(client, node)["starts"]
    _beat(client, node, [_running(start)])
    assert Job.objects.get(pk=filler.pk).state == JobState.RUNNING
    return job, client, node, start


def test_a_cancelled_job_keeps_its_devices_until_its_agent_reports_the_process_gone(
    agent_cluster: Cluster, admin_client_api: APIClient, settings: Any
) -> None:
    settings.NODE_LOST_SECONDS = 600  # the clock below passes the grace, not the lost-node limit
    job, client, node, start = _holding_both_agent_nodes(agent_cluster)
    answer = _cancel(admin_client_api, job)
    assert answer["state"] == "releasing"
    stopping = Job.objects.get(pk=job.pk)
    assert (stopping.state, stopping.reason_code, stopping.allocated_gpus) == (JobState.RELEASING, "cancelling", 8)
    waiting = _submit(agent_cluster, "next", gpus=8, command="sleep 1")
    assert Job.objects.get(pk=waiting.pk).state == JobState.PENDING  # the devices are still busy
    # The agent is told to stop it with the job's grace; a second cancel changes nothing.
    assert _beat(client, node, [_running(start)])["stops"] == [
        {"replica": start["replica"], "job": job.pk, "grace_seconds": 30.0}
    ]
    _cancel(admin_client_api, job)
    # The clock passes any grace: nothing frees the devices but the agent's report.
    get_executor().tick(timezone.now() + timedelta(seconds=120))
    services.converge()
    assert Job.objects.get(pk=job.pk).state == JobState.RELEASING
    assert Job.objects.get(pk=waiting.pk).state == JobState.PENDING
    _beat(client, node, [{"replica": start["replica"], "state": "exited", "exit_code": -15}])
    services.converge()
    cancelled = Job.objects.get(pk=job.pk)
    assert (cancelled.state, cancelled.allocated_gpus, cancelled.preemptions) == (JobState.CANCELLED, 0, 0)
    assert not cancelled.placements.exists()
    assert Job.objects.get(pk=waiting.pk).state == JobState.RUNNING
    assert [e.message for e in JobEvent.objects.filter(job=job, kind=JobEventKind.CANCELLED).order_by("id")] == [
        "cancelled by platform-admin; its devices are freed once its processes have stopped",
        "cancelled by platform-admin; its processes stopped; devices freed",
    ]


def test_a_cancelled_job_whose_node_is_lost_is_cancelled_not_requeued(
    agent_cluster: Cluster, settings: Any, admin_client_api: APIClient
) -> None:
    settings.NODE_LOST_SECONDS = 30
    settings.NODE_LOST_GRACE_SECONDS = 30
    job, _client, node, _start = _holding_both_agent_nodes(agent_cluster)
    _cancel(admin_client_api, job)
    other = "gpu-2" if node == "gpu-1" else "gpu-1"
    Node.objects.filter(name=other).update(last_heartbeat=timezone.now() + timedelta(hours=1))
    lost = timezone.now() + timedelta(seconds=30 + heartbeat_record_seconds() + 1)
    get_executor().tick(lost)
    assert Job.objects.get(pk=job.pk).state == JobState.RELEASING
    get_executor().tick(lost + timedelta(seconds=31))
    cancelled = Job.objects.get(pk=job.pk)
    assert (cancelled.state, cancelled.preemptions) == (JobState.CANCELLED, 0)
    assert JobEvent.objects.filter(job=job, kind=JobEventKind.CANCELLED, message__contains=f"node {node} lost").exists()
    assert not JobEvent.objects.filter(job=job, kind=JobEventKind.REQUEUED).exists()


def test_a_cancel_on_a_simulated_node_frees_the_devices_at_once(cluster: Cluster, admin_client_api: APIClient) -> None:
    job = _submit(cluster, "train", gpus=2, command="sleep 1000")
    assert Job.objects.get(pk=job.pk).placements.get().node.executor == NodeExecutor.SIMULATED
    assert _cancel(admin_client_api, job)["state"] == "cancelled"
    assert Job.objects.get(pk=job.pk).allocated_gpus == 0


def test_an_evicted_job_cancelled_while_it_stops_ends_cancelled(
    agent_cluster: Cluster, platform_admin: AbstractUser
) -> None:
    job, client, node, start = _holding_both_agent_nodes(agent_cluster)
    Job.objects.filter(pk=job.pk).update(state=JobState.RELEASING)  # as an eviction leaves it
    services.cancel_job(actor=platform_admin, job=Job.objects.get(pk=job.pk))
    assert Job.objects.get(pk=job.pk).reason_code == lifecycle.CANCELLING
    _beat(client, node, [{"replica": start["replica"], "state": "exited", "exit_code": -15}])
    ended = Job.objects.get(pk=job.pk)
    assert (ended.state, ended.preemptions) == (JobState.CANCELLED, 0)
