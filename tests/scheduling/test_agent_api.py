"""The agent protocol without a real agent: node tokens in a permission matrix, register, and the
heartbeat's desired state (starts, stops, exits, evictions, lost nodes), bounded and idempotent."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from console.services import issue_token
from quotas import bounds
from quotas.models import AuditRecord, Node, NodeAgent, NodeExecutor, NodeState
from quotas.node_agents import heartbeat_record_seconds, issue_node_token
from quotas.services.nodes import set_node_state
from scheduling import services
from scheduling.agent_beat import replica_ranks
from scheduling.executors import get_executor
from scheduling.models import AgentProcess, Job, JobEvent, JobEventKind, JobState
from tests.scheduling.conftest import Cluster

HEARTBEAT = "/api/v1/agent/heartbeat/"
REGISTER = "/api/v1/agent/register/"


@pytest.fixture
def agent_cluster(cluster: Cluster) -> Cluster:
    """gpu-1 and gpu-2 run agents; the engine packs, so a small job lands on gpu-1."""
    Node.objects.filter(name__in=["gpu-1", "gpu-2"]).update(executor=NodeExecutor.AGENT, last_heartbeat=timezone.now())
    return cluster


def _submit(cluster: Cluster, name: str, quota: str = "team-a", **fields: Any) -> Job:
    """Submit, then run cycles as the trigger would after the commit (tests run in one transaction)."""
    job = cluster.submit(name, quota, **fields)
    services.converge()
    return job


def _token(name: str) -> str:
    return issue_node_token(actor=None, node=Node.objects.get(name=name))


def _node_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    return client


def _beat(client: APIClient, node: str, processes: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    answer = client.post(HEARTBEAT, {"node": node, "processes": processes or [], **extra}, format="json")
    assert answer.status_code == 200, answer.content
    body: dict[str, Any] = answer.json()
    return body


def _agent_of(job: Job) -> tuple[APIClient, str]:
    """A client with the node token of the node the job's first replica was placed on."""
    name = Job.objects.get(pk=job.pk).placements.first().node.name  # type: ignore[union-attr]
    return _node_client(_token(name)), name


def _running(start: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"replica": start["replica"], "state": "running", "pid": 4242, **fields}


# --- node tokens: who may issue them, where they open, where they do not -----------------------------


@pytest.mark.parametrize(("who", "expected"), [("anonymous", 401), ("member", 403), ("platform_admin", 201)])
def test_only_platform_admins_issue_node_tokens(
    who: str,
    expected: int,
    cluster: Cluster,
    member: AbstractUser,
    platform_admin: AbstractUser,
    client_for: Callable[[AbstractUser | None], APIClient],
) -> None:
    user = {"anonymous": None, "member": member, "platform_admin": platform_admin}[who]
    node = cluster.nodes["gpu-1"]
    answer = client_for(user).post(f"/api/v1/nodes/{node.pk}/token/")
    assert answer.status_code == expected, answer.content
    if expected == 201:
        token = answer.json()["token"]
        stored = NodeAgent.objects.get(node=node)
        assert token not in stored.token_hash and token.startswith("gqn_")
        assert AuditRecord.objects.filter(action="node.token", object_repr="gpu-1").exists()


def test_a_new_token_revokes_the_old_one(agent_cluster: Cluster) -> None:
    old = _token("gpu-1")
    new = _token("gpu-1")
    assert _node_client(old).post(HEARTBEAT, {"node": "gpu-1", "processes": []}, format="json").status_code == 401
    assert _node_client(new).post(HEARTBEAT, {"node": "gpu-1", "processes": []}, format="json").status_code == 200


@pytest.mark.parametrize(
    ("credential", "path", "expected"),
    [
        ("own node token", HEARTBEAT, 200),
        ("other node's token", HEARTBEAT, 403),
        ("user token", HEARTBEAT, 401),
        ("platform admin session", HEARTBEAT, 401),
        ("none", HEARTBEAT, 401),
        ("own node token", "/api/v1/jobs/", 401),
        ("node token as a user token", "/api/v1/jobs/", 401),
        ("own node token", "/api/v1/nodes/", 401),
        ("user token", "/api/v1/jobs/", 200),
    ],
)
def test_node_tokens_open_their_own_agent_endpoints_and_nothing_else(
    credential: str, path: str, expected: int, agent_cluster: Cluster, platform_admin: User
) -> None:
    own, other = _token("gpu-1"), _token("gpu-2")
    client = APIClient()
    if credential == "own node token":
        client.credentials(HTTP_AUTHORIZATION=f"Node {own}")
    elif credential == "other node's token":
        client.credentials(HTTP_AUTHORIZATION=f"Node {other}")
    elif credential == "node token as a user token":
        client.credentials(HTTP_AUTHORIZATION=f"Token {own}")
    elif credential == "user token":
        client.credentials(HTTP_AUTHORIZATION=f"Token {issue_token(user=platform_admin).key}")
    elif credential == "platform admin session":
        client.force_login(platform_admin)
    if path == HEARTBEAT:
        answer = client.post(path, {"node": "gpu-1", "processes": []}, format="json")
    else:
        answer = client.get(path)
    assert answer.status_code == expected, answer.content


def test_a_node_token_cannot_report_or_stop_another_nodes_replicas(agent_cluster: Cluster) -> None:
    job = _submit(agent_cluster, "train", gpus=8)  # fills one node
    one, own = _agent_of(job)
    other = "gpu-2" if own == "gpu-1" else "gpu-1"
    two = _node_client(_token(other))
    (start,) = _beat(one, own)["starts"]
    # The other node's agent claims the replica, then says it exited with 1: nothing of the job
    # changes, and that agent is only told to stop a process it should not hold.
    answer = _beat(two, other, [{"replica": start["replica"], "state": "running", "pid": 7}])
    assert answer["starts"] == [] and [stop["replica"] for stop in answer["stops"]] == [start["replica"]]
    _beat(two, other, [{"replica": start["replica"], "state": "exited", "exit_code": 1, "log": ["forged"]}])
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    assert not AgentProcess.objects.filter(node__name=other).exists()
    assert _beat(one, own)["starts"][0]["replica"] == start["replica"]


# --- register ---------------------------------------------------------------------------------------


def _gpus(count: int, model: str = "") -> list[dict[str, Any]]:
    return [{"index": i, "uuid": f"GPU-fake-{i}", "model": model, "memory_mib": 81559} for i in range(count)]


def test_a_matching_registration_leaves_the_node_ready(agent_cluster: Cluster) -> None:
    answer = _node_client(_token("gpu-1")).post(REGISTER, {"node": "gpu-1", "gpus": _gpus(8)}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["mismatch"] == [] and answer.json()["state"] == "ready"
    assert NodeAgent.objects.get(node__name="gpu-1").registered_devices[7]["uuid"] == "GPU-fake-7"


def test_the_agents_version_shows_in_the_nodes_api_and_page(agent_cluster: Cluster, platform_admin: Any) -> None:
    from django.test import Client

    registered = {"node": "gpu-1", "version": "0.1.0", "gpus": _gpus(8)}
    assert _node_client(_token("gpu-1")).post(REGISTER, registered, format="json").status_code == 200
    api = APIClient()
    api.force_authenticate(platform_admin)
    versions = {node["name"]: node["agent_version"] for node in api.get("/api/v1/nodes/").json()["results"]}
    assert versions.pop("gpu-1") == "0.1.0"
    assert set(versions.values()) == {""}  # the others have not registered (gpu-2 has no token yet)
    page = Client()
    page.force_login(platform_admin)
    assert "Registered 8 GPUs · Agent 0.1.0" in page.get("/nodes/").content.decode()


def test_a_version_beyond_its_bound_is_refused_naming_it(agent_cluster: Cluster) -> None:
    registered = {"node": "gpu-1", "version": "9" * 41, "gpus": _gpus(8)}
    answer = _node_client(_token("gpu-1")).post(REGISTER, registered, format="json")
    assert answer.status_code == 400
    assert answer.json() == {"version": ["version has at most 40 characters."]}
    assert NodeAgent.objects.get(node__name="gpu-1").registered_at is None


def test_a_missing_gpu_is_audited_and_cordons_the_node(agent_cluster: Cluster) -> None:
    answer = _node_client(_token("gpu-1")).post(REGISTER, {"node": "gpu-1", "gpus": _gpus(7)}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["mismatch"] == ["GPU 7 is in the inventory but the host does not have it"]
    assert answer.json()["cordoned"] is True
    assert Node.objects.get(name="gpu-1").state == NodeState.CORDONED
    assert AuditRecord.objects.filter(action="node.agent_mismatch", object_repr="gpu-1").exists()
    # The scheduler places nothing new there: the job goes to gpu-2.
    for number in range(3):
        job = _submit(agent_cluster, f"after-{number}", gpus=1)
        assert Job.objects.get(pk=job.pk).placements.get().node.name == "gpu-2"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"node": "gpu-1", "gpus": _gpus(bounds.NODE_GPUS_MAX + 1)}, "gpus"),
        ({"node": "gpu-1", "gpus": [*_gpus(1), *_gpus(1)]}, "gpus"),
        ({"node": "gpu-1", "gpus": [{"index": 0, "uuid": "x" * 101, "model": "", "memory_mib": 1}]}, "gpus[0].uuid"),
        ({"node": "gpu-1", "gpus": "8"}, "gpus"),
    ],
)
def test_registrations_beyond_the_bounds_are_400s_naming_the_field(
    body: dict[str, Any], field: str, agent_cluster: Cluster
) -> None:
    answer = _node_client(_token("gpu-1")).post(REGISTER, body, format="json")
    assert answer.status_code == 400, answer.content
    assert any(key.startswith(field) for key in answer.json()), answer.json()


@pytest.mark.parametrize(
    ("processes", "field"),
    [
        ([{"replica": 1, "state": "running"}] * 2, "processes"),
        ([{"replica": n, "state": "running"} for n in range(bounds.AGENT_PROCESSES_MAX + 1)], "processes"),
        ([{"replica": 1, "state": "exited"}], "processes[0].exit_code"),
        (
            [{"replica": 1, "state": "running", "log": ["x"] * (bounds.AGENT_LOG_LINES_PER_BEAT + 1)}],
            "processes[0].log",
        ),
        ([{"replica": 1, "state": "gone"}], "processes[0].state"),
    ],
)
def test_beats_beyond_the_bounds_are_400s_naming_the_field(
    processes: list[dict[str, Any]], field: str, agent_cluster: Cluster
) -> None:
    answer = _node_client(_token("gpu-1")).post(HEARTBEAT, {"node": "gpu-1", "processes": processes}, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json(), answer.json()


# --- heartbeat: the desired state ---------------------------------------------------------------------


def test_an_admitted_job_is_a_start_once_then_running_once_reported(agent_cluster: Cluster) -> None:
    job = _submit(agent_cluster, "train", gpus=2, replicas=2, command="python train.py")
    client, node = _agent_of(job)
    before = _beat(client, node)
    assert before == _beat(client, node)  # asked twice: the same answer, nothing changed
    starts = before["starts"]
    assert [(s["rank"], s["gpus"], s["command"]) for s in starts] == [
        (0, [0, 1], "python train.py"),
        (1, [2, 3], "python train.py"),
    ]
    assert starts[1]["environment"]["GQC_REPLICA_RANK"] == "1"
    assert starts[1]["environment"]["GQC_QUOTA"] == "team-a"
    # The beat's read states the rank rule in SQL; the slurm executor's replica_ranks in Python.
    assert {s["replica"]: s["rank"] for s in starts} == replica_ranks({job.pk})
    assert not JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).exists()
    after = _beat(client, node, [_running(s) for s in starts])
    assert after["starts"] == [] and after["stops"] == []
    assert JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count() == 2
    _beat(client, node, [_running(s) for s in starts])
    assert JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count() == 2


def test_exit_zero_of_every_replica_succeeds_the_job(agent_cluster: Cluster) -> None:
    job = _submit(agent_cluster, "train", gpus=1, replicas=2, command="true")
    client, node = _agent_of(job)
    first, second = _beat(client, node)["starts"]
    _beat(client, node, [{"replica": first["replica"], "state": "exited", "exit_code": 0}, _running(second)])
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING  # one replica still runs
    answer = _beat(client, node, [{"replica": second["replica"], "state": "exited", "exit_code": 0}])
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    assert answer["starts"] == []  # never started again
    assert not AgentProcess.objects.filter(job=job).exists()  # the rows do not pile up


def test_a_process_first_reported_exited_ends_its_job_without_a_row_written(agent_cluster: Cluster) -> None:
    """A short job's process is usually first seen exited: its row would be written only to be
    forgotten in the same beat (issue 25's drain), so the beat writes neither."""
    job = _submit(agent_cluster, "short", gpus=1, command="true")
    client, node = _agent_of(job)
    (start,) = _beat(client, node)["starts"]
    exited = [{"replica": start["replica"], "state": "exited", "exit_code": 0, "pid": 4242}]
    with CaptureQueriesContext(connection) as beat:
        answer = _beat(client, node, exited)
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    assert list(JobEvent.objects.filter(job=job).values_list("kind", flat=True).order_by("id"))[-2:] == [
        JobEventKind.STARTED,
        JobEventKind.FINISHED,
    ]
    # The start's event, written as a plain row (scheduling.bulk) as the model's were.
    started = JobEvent.objects.get(job=job, kind=JobEventKind.STARTED)
    finished = JobEvent.objects.get(job=job, kind=JobEventKind.FINISHED)
    assert started.message == f"replica 0 started on {node} (pid 4242)"
    assert (started.rule, started.beneficiary_id) == ("", None)
    assert started.at <= finished.at and started.pk < finished.pk
    assert answer["starts"] == [] and answer["stops"] == []
    assert not AgentProcess.objects.filter(job=job).exists()
    writes = [q["sql"] for q in beat.captured_queries if q["sql"].split()[0] in ("INSERT", "UPDATE", "DELETE")]
    assert writes and not [sql for sql in writes if "scheduling_agentprocess" in sql]
    assert _beat(client, node, exited)["starts"] == []  # the same report again changes nothing
    assert JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count() == 1


def test_a_beat_that_frees_devices_asks_the_agent_back_soon_once(agent_cluster: Cluster, settings: Any) -> None:
    """What the next cycle places on the freed devices would otherwise wait a whole heartbeat."""
    settings.AGENT_HEARTBEAT_SECONDS = 5.0
    settings.AGENT_FOLLOW_UP_SECONDS = 1.0
    job = _submit(agent_cluster, "train", gpus=1, command="true")
    client, node = _agent_of(job)
    (start,) = _beat(client, node)["starts"]
    assert _beat(client, node, [_running(start)])["heartbeat_seconds"] == 5.0  # running: nothing freed
    freed = _beat(client, node, [{"replica": start["replica"], "state": "exited", "exit_code": 0}])
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    assert freed["heartbeat_seconds"] == 1.0
    assert _beat(client, node)["heartbeat_seconds"] == 5.0  # the follow-up beat: back to the heartbeat


def test_a_non_zero_exit_fails_the_job_with_the_code_and_the_last_lines(agent_cluster: Cluster) -> None:
    job = _submit(agent_cluster, "train", gpus=1, command="exit 3")
    client, node = _agent_of(job)
    (start,) = _beat(client, node)["starts"]
    _beat(client, node, [{"replica": start["replica"], "state": "exited", "exit_code": 3, "log": ["boom", "bad"]}])
    failed = Job.objects.get(pk=job.pk)
    assert failed.state == JobState.FAILED and failed.allocated_gpus == 0
    event = JobEvent.objects.get(job=job, kind=JobEventKind.FAILED)
    assert "exited with code 3" in event.message and "boom\nbad" in event.message


def test_an_eviction_is_a_stop_with_the_grace_and_devices_stay_held_until_the_process_is_gone(
    agent_cluster: Cluster,
) -> None:
    low = _submit(agent_cluster, "low", "team-b", gpus=8, grace_seconds=5, command="sleep 100")
    low2 = _submit(agent_cluster, "low2", "team-b", gpus=8, grace_seconds=5, command="sleep 100")
    one, two = _node_client(_token("gpu-1")), _node_client(_token("gpu-2"))
    holding = {n: _beat(c, n)["starts"] for n, c in (("gpu-1", one), ("gpu-2", two))}
    for n, c in (("gpu-1", one), ("gpu-2", two)):
        _beat(c, n, [_running(s) for s in holding[n]])
    high = _submit(agent_cluster, "high", "team-a", gpus=8, command="sleep 100")
    evicted = Job.objects.get(pk__in=[low.pk, low2.pk], state=JobState.RELEASING)
    node = evicted.placements.get().node.name
    client = one if node == "gpu-1" else two
    (start,) = holding[node]
    answer = _beat(client, node, [_running(start)])
    assert [(s["replica"], s["grace_seconds"]) for s in answer["stops"]] == [(start["replica"], 5.0)]
    assert answer["starts"] == []
    # The grace is over on the clock, but the process still runs: the devices stay held.
    get_executor().tick(timezone.now() + timedelta(seconds=60))
    assert Job.objects.get(pk=evicted.pk).state == JobState.RELEASING
    assert Job.objects.get(pk=high.pk).state == JobState.PENDING
    answer = _beat(client, node, [{"replica": start["replica"], "state": "exited", "exit_code": -15}])
    services.converge()
    requeued = Job.objects.get(pk=evicted.pk)
    assert requeued.state == JobState.PENDING and requeued.preemptions == 1
    assert Job.objects.get(pk=high.pk).state == JobState.RUNNING
    assert [s["job"] for s in _beat(client, node)["starts"]] == [high.pk]


def test_a_cancelled_job_is_a_stop(agent_cluster: Cluster) -> None:
    job = _submit(agent_cluster, "train", gpus=1, grace_seconds=2, command="sleep 100")
    client, node = _agent_of(job)
    (start,) = _beat(client, node)["starts"]
    _beat(client, node, [_running(start)])
    services.cancel_job(actor=None, job=job)
    answer = _beat(client, node, [_running(start)])
    assert answer["stops"] == [{"replica": start["replica"], "job": job.pk, "grace_seconds": 2.0}]


def test_a_beat_costs_the_same_queries_for_one_replica_and_for_many(agent_cluster: Cluster) -> None:
    client, node = _agent_of(_submit(agent_cluster, "one", gpus=1, command="sleep 100"))
    starts = _beat(client, node)["starts"]
    _beat(client, node, [_running(s, log=["a"]) for s in starts])  # the log rows exist from here on
    with CaptureQueriesContext(connection) as small:
        _beat(client, node, [_running(s, log=["a"]) for s in starts])
    for number in range(7):
        _submit(agent_cluster, f"many-{number}", gpus=1, command="sleep 100")
    starts = _beat(client, node)["starts"] + starts
    assert len(starts) == 8
    _beat(client, node, [_running(s, log=["a"]) for s in starts])
    with CaptureQueriesContext(connection) as large:
        _beat(client, node, [_running(s, log=["a"]) for s in starts])
    assert len(large) == len(small), (
        [q["sql"][:60] for q in small.captured_queries],
        [q["sql"][:60] for q in large.captured_queries],
    )


# --- lost nodes -------------------------------------------------------------------------------------------


def test_a_silent_node_goes_not_ready_then_its_jobs_are_requeued_and_a_returning_agent_stops_them(
    agent_cluster: Cluster, settings: Any
) -> None:
    settings.NODE_LOST_SECONDS = 30
    settings.NODE_LOST_GRACE_SECONDS = 30
    job = _submit(agent_cluster, "train", gpus=8, command="sleep 100")
    client, node = _agent_of(job)
    other = "gpu-2" if node == "gpu-1" else "gpu-1"
    (start,) = _beat(client, node)["starts"]
    _beat(client, node, [_running(start)])
    Node.objects.filter(name=other).update(last_heartbeat=timezone.now() + timedelta(hours=1))  # stays alive
    now = timezone.now()
    executor = get_executor()
    executor.tick(now + timedelta(seconds=29))
    assert Node.objects.get(name=node).state == NodeState.READY
    # The stored beat may lag the real one by heartbeat_record_seconds: the check waits that much more.
    lost_at = now + timedelta(seconds=30 + heartbeat_record_seconds() + 1)
    executor.tick(lost_at)
    assert Node.objects.get(name=node).state == NodeState.NOT_READY
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING  # still within the grace
    executor.tick(lost_at + timedelta(seconds=31))
    services.converge()
    moved = Job.objects.get(pk=job.pk)
    assert moved.state == JobState.RUNNING and moved.placements.get().node.name == other
    assert JobEvent.objects.filter(
        job=job, kind=JobEventKind.REQUEUED, message__contains=f"lost with node {node}"
    ).exists()
    answer = _beat(client, node, [_running(start)])
    assert [s["replica"] for s in answer["stops"]] == [start["replica"]]
    assert Node.objects.get(name=node).state == NodeState.READY


def test_a_node_lost_before_its_token_was_issued_is_ready_once_its_agent_registers(
    agent_cluster: Cluster, settings: Any
) -> None:
    """The drain benchmark's 64 agents: nodes made first, tokens issued one by one after; the
    last nodes went not ready before their agent rows existed, and stayed so after registering."""
    settings.NODE_LOST_SECONDS = 30
    Node.objects.filter(name="gpu-1").update(last_heartbeat=None)  # never beaten: the clock is its creation
    get_executor().tick(timezone.now() + timedelta(seconds=30 + heartbeat_record_seconds() + 1))
    assert Node.objects.get(name="gpu-1").state == NodeState.NOT_READY
    assert not NodeAgent.objects.filter(node__name="gpu-1").exists()
    registered = {"node": "gpu-1", "version": "0.1.0", "gpus": _gpus(8)}
    assert _node_client(_token("gpu-1")).post(REGISTER, registered, format="json").status_code == 200
    assert Node.objects.get(name="gpu-1").state == NodeState.READY


def test_a_node_an_admin_took_down_before_its_token_stays_down_when_its_agent_registers(
    agent_cluster: Cluster, settings: Any
) -> None:
    admin = get_user_model().objects.create_superuser(username="root-down", email="", password=None)
    set_node_state(actor=admin, node=Node.objects.get(name="gpu-1"), state=NodeState.NOT_READY)
    registered = {"node": "gpu-1", "version": "0.1.0", "gpus": _gpus(8)}
    assert _node_client(_token("gpu-1")).post(REGISTER, registered, format="json").status_code == 200
    assert Node.objects.get(name="gpu-1").state == NodeState.NOT_READY


def test_the_nodes_api_sets_the_executor_and_shows_state_and_last_heartbeat(
    cluster: Cluster, admin_client_api: APIClient, member: AbstractUser, client_for: Any
) -> None:
    node = cluster.nodes["gpu-1"]
    changed = admin_client_api.patch(f"/api/v1/nodes/{node.pk}/", {"executor": "agent"}, format="json")
    assert changed.status_code == 200, changed.content
    assert Node.objects.get(pk=node.pk).executor == NodeExecutor.AGENT
    read = client_for(member).get(f"/api/v1/nodes/{node.pk}/").json()
    assert (read["executor"], read["state"], read["last_heartbeat"]) == ("agent", "ready", None)
    refused = admin_client_api.patch(f"/api/v1/nodes/{node.pk}/", {"executor": "kubernetes"}, format="json")
    assert refused.status_code == 400 and "executor" in refused.json()


def test_the_embedded_defaults_local_agent_gets_an_agent_node_and_a_fresh_token(db: None) -> None:
    from console.launcher import _local_agent_command
    from quotas.node_agents import prepare_local_agent

    first = prepare_local_agent(name="local", gpus=2)
    node = Node.objects.get(name="local")
    assert (node.executor, node.gpus, node.devices.count()) == (NodeExecutor.AGENT, 2, 2)
    second = prepare_local_agent(name="local", gpus=2)  # every start: a new token, the old one revoked
    assert _node_client(first).post(HEARTBEAT, {"node": "local", "processes": []}, format="json").status_code == 401
    assert _node_client(second).post(HEARTBEAT, {"node": "local", "processes": []}, format="json").status_code == 200
    command = _local_agent_command(8123, "127.0.0.1", 2)
    assert command[1:3] == ["-m", "gqc.agent"] and "--fake-gpus" in command and "http://127.0.0.1:8123" in command
    assert "--fake-gpus" not in _local_agent_command(8123, "127.0.0.1", None)  # CONSOLE_LOCAL_AGENT_GPUS=nvml


def test_the_local_node_takes_the_size_and_model_its_agent_will_register(db: None) -> None:
    # Started once on stand-ins, then on a host's own GPUs (CONSOLE_LOCAL_AGENT_GPUS=nvml):
    # the node must match, or the registration would cordon it.
    from quotas.node_agents import prepare_local_agent

    prepare_local_agent(name="local", gpus=2)
    token = prepare_local_agent(name="local", gpus=4, gpu_model="NVIDIA H200")
    node = Node.objects.get(name="local")
    assert (node.gpus, node.gpu_model) == (4, "NVIDIA H200")
    assert list(node.devices.order_by("index").values_list("index", "model")) == [(i, "NVIDIA H200") for i in range(4)]
    devices = [{"index": i, "uuid": f"GPU-{i}", "model": "NVIDIA H200", "memory_mib": 143_771} for i in range(4)]
    registered = _node_client(token).post(REGISTER, {"node": "local", "gpus": devices}, format="json")
    assert registered.status_code == 200 and registered.json()["mismatch"] == []


def test_a_local_node_the_guarantees_need_is_not_shrunk(db: None) -> None:
    from django.core.exceptions import ValidationError

    from quotas.node_agents import prepare_local_agent
    from quotas.services import create_quota

    prepare_local_agent(name="local", gpus=4)
    create_quota(actor=None, name="team-a", gpus=4)
    with pytest.raises(ValidationError):
        prepare_local_agent(name="local", gpus=1)
    assert Node.objects.get(name="local").gpus == 4


def test_the_launcher_will_not_take_a_gpu_a_job_holds_from_the_local_node(
    db: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # bin/run once with 2 stand-ins and a job on both; then started with 1: the start stops, in words.
    from console import launcher
    from quotas.node_agents import prepare_local_agent
    from tests.scheduling.conftest import build_cluster

    monkeypatch.setattr(launcher, "LOCAL_AGENT_DIR", tmp_path)  # not the checkout's own var/agent
    cluster = build_cluster(node_gpus=(), tree=(("Quota1", None, 0.0), ("team-a", "Quota1", 0.0)))
    prepare_local_agent(name="local", gpus=2)
    _submit(cluster, "pair", gpus=2, command="sleep 60")
    with pytest.raises(launcher.LaunchError) as refused:
        launcher._prepare_local_agent(1)
    assert str(refused.value) == (
        "the node local cannot become 1 fake GPU: local cannot go down to 1 GPUs while jobs hold the GPUs it "
        "would lose (GPU 1 by pair); drain the node, or let them end, first"
    )
    assert Node.objects.get(name="local").gpus == 2 and not (tmp_path / "local.token").exists()


def test_without_nvml_the_launcher_says_so_in_one_sentence() -> None:
    from console.launcher import LaunchError, _local_agent_gpus
    from gqc.agent import NvmlGpus, NvmlUnavailable

    try:
        NvmlGpus()
    except NvmlUnavailable:
        pass
    else:
        pytest.skip("this host has NVML: benchmarks/agent_gpu_check.py checks it")
    with pytest.raises(LaunchError, match=r"^CONSOLE_LOCAL_AGENT_GPUS is nvml, but NVML does not answer on this host"):
        _local_agent_gpus(None)
    assert _local_agent_gpus(3) == (3, "", "3 fake GPUs")


# --- GPU samples: stored by telemetry after the beat -------------------------------------------------


def test_a_beats_gpu_samples_are_stored_with_the_job_on_each_gpu(
    agent_cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    from telemetry.models import GpuSample

    job = _submit(agent_cluster, "train", gpus=2, command="python train.py")
    client, node = _agent_of(job)
    held = Job.objects.get(pk=job.pk).placements.get().devices
    samples = [
        {"index": 0, "utilization": 91.5, "memory_used_mib": 40_960, "memory_total_mib": 81_920},
        {"index": 5, "utilization": 0.0, "memory_used_mib": 0},  # total left out: the registered size, or used
    ]
    with django_capture_on_commit_callbacks(execute=True):
        _beat(client, node, samples=samples)
    stored = {row.gpu: row for row in GpuSample.objects.filter(node_id=Node.objects.get(name=node).pk)}
    assert set(stored) == {0, 5}
    assert (stored[0].utilisation, stored[0].memory_used_mib, stored[0].memory_total_mib) == (91.5, 40_960, 81_920)
    assert stored[0].job_id == (job.pk if 0 in held else None)
    assert stored[5].job_id is None


def test_a_sample_beyond_the_bounds_is_a_400_naming_the_field(agent_cluster: Cluster) -> None:
    client = _node_client(_token("gpu-1"))
    answer = client.post(
        HEARTBEAT,
        {"node": "gpu-1", "processes": [], "samples": [{"index": 0, "utilization": 101, "memory_used_mib": 1}]},
        format="json",
    )
    assert answer.status_code == 400
    assert "utilization" in str(answer.json())


def test_the_answers_say_how_often_the_agent_sends_readings_and_a_beat_without_them_stores_none(
    agent_cluster: Cluster, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    """samples_seconds (TELEMETRY_SAMPLE_SECONDS) in registration's answer and in every beat's:
    the agent sends its GPUs' readings at most that often (gqc.pace.ReadingsPace) and leaves
    `samples` out of the beats in between."""
    from telemetry.models import GpuSample

    settings.TELEMETRY_SAMPLE_SECONDS = 7.5
    client = _node_client(_token("gpu-1"))
    registration = client.post(REGISTER, {"node": "gpu-1", "gpus": _gpus(8)}, format="json")
    assert registration.status_code == 200, registration.content
    assert registration.json()["samples_seconds"] == 7.5
    with django_capture_on_commit_callbacks(execute=True):
        assert _beat(client, "gpu-1")["samples_seconds"] == 7.5
    assert not GpuSample.objects.filter(node_id=Node.objects.get(name="gpu-1").pk).exists()
