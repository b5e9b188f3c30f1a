"""Issue 27, the console's half: whose an agent's state directory is (the registration's identity
and its decision on the processes it holds), and a start the agent never takes up, requeued after
AGENT_START_BEATS heartbeats with an event and a warning on its node. The agent process itself is in
tests/console/test_gqc_agent.py and, live, tests/scheduling/test_agent_identity_live.py."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from quotas import bounds
from quotas.models import AuditRecord, Installation, Node, NodeAgent
from quotas.node_agents import installation_identity, issue_node_token
from scheduling import agent_services, services
from scheduling.agent_services import ProcessReport
from scheduling.models import AgentProcess, AgentProcessState, Job, JobEvent, JobEventKind, JobState
from tests.scheduling.conftest import Cluster
from tests.scheduling.test_agent_api import REGISTER, _beat, _node_client, _running, _submit, agent_cluster

__all__ = ["agent_cluster"]  # the fixture, shared with test_agent_api


def _register(client: APIClient, **state: Any) -> dict[str, Any]:
    gpus = [{"index": i, "uuid": f"GPU-{i}", "model": "", "memory_mib": 81920} for i in range(8)]
    answer = client.post(REGISTER, {"node": "gpu-1", "gpus": gpus, **state}, format="json")
    assert answer.status_code == 200, answer.content
    body: dict[str, Any] = answer.json()
    return body


def _gpu_1(cluster: Cluster) -> APIClient:
    return _node_client(issue_node_token(actor=None, node=cluster.nodes["gpu-1"]))


def _beat_at(moment: datetime, processes: list[ProcessReport] | None = None) -> agent_services.Desired:
    """gpu-1's agent beats at `moment` (what the view does at its own now)."""
    agent = NodeAgent.objects.select_related("node").get(node__name="gpu-1")
    return agent_services.heartbeat(agent=agent, processes=processes or [], now=moment)


# --- the console's identity, and whose the state directory is --------------------------------------


def test_the_registration_names_this_console_and_the_node_and_the_identity_is_made_once(
    agent_cluster: Cluster,
) -> None:
    client = _gpu_1(agent_cluster)
    first, second = _register(client), _register(client)
    assert first["console"] == second["console"] == installation_identity()
    assert uuid.UUID(first["console"])
    assert first["node_id"] == agent_cluster.nodes["gpu-1"].pk
    assert Installation.objects.count() == 1
    assert first["adopt"] == first["stop"] == []  # a fresh state directory holds nothing
    assert not AuditRecord.objects.filter(action="node.agent_state").exists()


def _held_on_gpu_1(cluster: Cluster) -> tuple[APIClient, dict[str, Any]]:
    """A job running on gpu-1 whose process (pid 4242) the console has seen."""
    job = _submit(cluster, "train", gpus=1, command="sleep 100")
    client = _gpu_1(cluster)
    (start,) = _beat(client, "gpu-1")["starts"]
    _beat(client, "gpu-1", [_running(start)])
    return client, {"replica": start["replica"], "job": job.pk, "pid": 4242}


def test_its_own_state_directory_keeps_every_process_as_a_restart_does(agent_cluster: Cluster) -> None:
    client, held = _held_on_gpu_1(agent_cluster)
    answer = _register(
        client, state_console=installation_identity(), state_node_id=agent_cluster.nodes["gpu-1"].pk, held=[held]
    )
    assert (answer["adopt"], answer["stop"]) == ([held["replica"]], [])


def test_another_consoles_processes_are_stopped_though_their_ids_match_this_consoles(agent_cluster: Cluster) -> None:
    client, held = _held_on_gpu_1(agent_cluster)
    other = str(uuid.uuid4())
    answer = _register(client, state_console=other, state_node_id=1, held=[held])
    # The same replica id, the same pid: another console's numbering all the same.
    assert (answer["adopt"], answer["stop"]) == ([], [held["replica"]])
    assert answer["stop_grace_seconds"] == agent_services.FOREIGN_STOP_GRACE_SECONDS
    record = AuditRecord.objects.get(action="node.agent_state")
    assert record.before is not None and record.before["console"] == other
    assert record.after == {
        "console": installation_identity(),
        "node_id": agent_cluster.nodes["gpu-1"].pk,
        "adopted": [],
        "stopped": [held["replica"]],
    }


def test_a_directory_that_records_no_console_keeps_only_what_this_nodes_rows_show_running(
    agent_cluster: Cluster,
) -> None:
    """A state directory older than identities, after an upgrade: its processes are this console's
    when the node's rows know them, same replica and same pid."""
    client, held = _held_on_gpu_1(agent_cluster)
    stranger = {"replica": held["replica"] + 1000, "job": 1, "pid": 4343}
    reused_pid = {**held, "pid": 999}
    answer = _register(client, state_console="", held=[held, stranger])
    assert (answer["adopt"], answer["stop"]) == ([held["replica"]], [stranger["replica"]])
    answer = _register(client, state_console="", held=[reused_pid])
    assert (answer["adopt"], answer["stop"]) == ([], [held["replica"]])


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ({"state_console": "x" * 37}, "state_console"),
        ({"state_node_id": -1}, "state_node_id"),
        ({"held": [{"replica": 1, "job": 1, "pid": 1}] * 2}, "held"),
        (
            {"held": [{"replica": n, "job": 1, "pid": 1} for n in range(bounds.AGENT_PROCESSES_MAX + 1)]},
            "held",
        ),
        ({"held": [{"replica": 1, "job": 1, "pid": bounds.AGENT_PID_MAX + 1}]}, "held[0].pid"),
    ],
)
def test_a_state_beyond_its_bounds_is_a_400_naming_the_field(
    state: dict[str, Any], field: str, agent_cluster: Cluster
) -> None:
    gpus = [{"index": 0, "uuid": "GPU-0", "model": "", "memory_mib": 1}]
    answer = _gpu_1(agent_cluster).post(REGISTER, {"node": "gpu-1", "gpus": gpus, **state}, format="json")
    assert answer.status_code == 400, answer.content
    assert any(key.startswith(field) for key in answer.json()), answer.json()


# --- a start never taken up -----------------------------------------------------------------------------


def _asked(cluster: Cluster, settings: Any) -> tuple[Job, int, datetime]:
    """A one-replica job on gpu-1 whose start its agent was just asked for (heartbeat 2 s, 3 beats)."""
    settings.AGENT_HEARTBEAT_SECONDS = 2.0
    settings.AGENT_START_BEATS = 3
    job = _submit(cluster, "train", gpus=1, command="echo hi")
    (start,) = _beat(_gpu_1(cluster), "gpu-1")["starts"]
    asked = Job.objects.get(pk=job.pk).placements.get().start_asked_at
    assert asked is not None
    return job, start["replica"], asked


def test_a_start_not_taken_up_within_the_beats_goes_back_to_the_queue_and_the_node_is_warned(
    agent_cluster: Cluster, settings: Any
) -> None:
    job, replica, asked = _asked(agent_cluster, settings)
    # Asked again and again within 6 s: the first ask's clock is kept, and the job waits.
    for seconds in (2, 4, 5.9):
        desired = _beat_at(asked + timedelta(seconds=seconds))
        assert [start.replica for start in desired.starts] == [replica]
    assert Job.objects.get(pk=job.pk).placements.get().start_asked_at == asked
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    given_up = _beat_at(asked + timedelta(seconds=6))
    assert given_up.starts == []
    requeued = Job.objects.get(pk=job.pk)
    assert requeued.state == JobState.PENDING and requeued.preemptions == 0 and requeued.allocated_gpus == 0
    event = JobEvent.objects.filter(job=job, kind=JobEventKind.REQUEUED).get()
    assert event.message == "the agent on gpu-1 did not start it within 6 s"
    agent = NodeAgent.objects.get(node__name="gpu-1")
    assert agent.start_missed == f"did not start job {job.pk} within 6 s"
    assert agent.start_missed_at == asked + timedelta(seconds=6)


def test_a_start_reported_in_time_is_kept_and_a_start_taken_up_clears_the_warning(
    agent_cluster: Cluster, settings: Any
) -> None:
    job, _replica, asked = _asked(agent_cluster, settings)
    _beat_at(asked + timedelta(seconds=6))  # missed: requeued, warned
    services.converge()  # placed again
    (again,) = Job.objects.get(pk=job.pk).placements.all()
    later = asked + timedelta(seconds=7)
    assert [start.replica for start in _beat_at(later).starts] == [again.pk]
    _beat_at(later + timedelta(seconds=1), [ProcessReport(replica=again.pk, state=AgentProcessState.RUNNING, pid=7)])
    _beat_at(later + timedelta(seconds=60), [ProcessReport(replica=again.pk, state=AgentProcessState.RUNNING, pid=7)])
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    assert AgentProcess.objects.filter(replica=again.pk, state=AgentProcessState.RUNNING).exists()
    agent = NodeAgent.objects.get(node__name="gpu-1")
    assert (agent.start_missed_at, agent.start_missed) == (None, "")


def test_the_first_ask_costs_one_statement_and_asking_again_none(agent_cluster: Cluster) -> None:
    _submit(agent_cluster, "train", gpus=1, command="echo hi")
    client = _gpu_1(agent_cluster)
    with CaptureQueriesContext(connection) as first:
        _beat(client, "gpu-1")
    with CaptureQueriesContext(connection) as again:
        _beat(client, "gpu-1")

    def stamps(beat: CaptureQueriesContext) -> list[str]:
        return [
            q["sql"] for q in beat.captured_queries if q["sql"].startswith("UPDATE") and "start_asked_at" in q["sql"]
        ]

    assert len(stamps(first)) == 1
    assert stamps(again) == []


def test_the_deadline_follows_the_settings(agent_cluster: Cluster, settings: Any) -> None:
    job, _replica, asked = _asked(agent_cluster, settings)
    settings.AGENT_START_BEATS = 5
    _beat_at(asked + timedelta(seconds=9.9))
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    _beat_at(asked + timedelta(seconds=10))
    assert JobEvent.objects.get(job=job, kind=JobEventKind.REQUEUED).message == (
        "the agent on gpu-1 did not start it within 10 s"
    )


def test_a_simulated_node_is_never_asked_for_a_start(agent_cluster: Cluster, settings: Any) -> None:
    _gpu_1(agent_cluster)  # its token: an agent that beats
    Node.objects.filter(name="gpu-1").update(executor="simulated")
    job = _submit(agent_cluster, "train", gpus=1, command="echo hi")
    started = Job.objects.get(pk=job.pk).started_at
    assert started is not None
    assert Job.objects.get(pk=job.pk).placements.get().node.name == "gpu-1"
    assert _beat_at(started + timedelta(seconds=60)).starts == []
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    assert Job.objects.get(pk=job.pk).placements.get().start_asked_at is None
