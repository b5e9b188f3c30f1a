"""The heartbeat's cheap path: the hand-written reading of a beat agrees with the serializer, a
remembered token is refused once rotated, the node's row is not rewritten on every beat, a beat
costs a small fixed number of queries, and agents' GPU readings are written together."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console.api import _flatten
from quotas import bounds
from quotas.models import Node
from quotas.node_agents import heartbeat_record_seconds, issue_node_token
from scheduling.agent_services import ProcessReport
from scheduling.api.agent import AgentHeartbeatSerializer, accept_beat, read_beat
from tests.scheduling.conftest import Cluster
from tests.scheduling.test_agent_api import HEARTBEAT, _agent_of, _beat, _node_client, _running, _submit, agent_cluster

__all__ = ["agent_cluster"]  # the fixture, used by name below

_PROCESS = {"replica": 7, "state": "running", "pid": 42, "log": ["a", ""], "log_truncated": True}
_EXITED = {"replica": 8, "state": "exited", "exit_code": -9}
_SAMPLE = {"index": 3, "utilization": 50, "memory_used_mib": 10, "memory_total_mib": 80}

WELL_FORMED: list[dict[str, Any]] = [
    {"node": "gpu-1", "processes": []},
    {"node": "gpu-1", "processes": [], "samples": []},
    {"node": "gpu-1", "processes": [_PROCESS, _EXITED], "samples": [_SAMPLE, {**_SAMPLE, "index": 0}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "pid": None, "exit_code": None}]},
    {"node": "gpu-1", "processes": [{**_PROCESS, "log": ["x" * bounds.AGENT_LOG_LINE_MAX_LENGTH]}]},
    {"node": "gpu-1", "processes": [{**_EXITED, "exit_code": bounds.AGENT_EXIT_CODE_MAX}], "extra": 1},
    {"node": "n" * bounds.NAME_MAX_LENGTH, "processes": [], "samples": [{**_SAMPLE, "utilization": 99.5}]},
    {"node": "gpu-1", "processes": [{"replica": 2**63 - 1, "state": "running"}]},
    {"node": "gpu-1", "processes": [], "samples": [{"index": 63, "utilization": 0, "memory_used_mib": 0}]},
]

# Not the JSON kinds the schema names, yet DRF takes them (it trims and coerces): left to it.
COERCED: list[dict[str, Any]] = [
    {"node": " gpu-1 ", "processes": []},
    {"node": "gpu-1", "processes": [{"replica": 1.0, "state": "running"}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "log": [5]}]},
]

MALFORMED: list[Any] = [
    [],
    "beat",
    {},
    {"node": "gpu-1"},
    {"processes": []},
    {"node": "", "processes": []},
    {"node": "g" * (bounds.NAME_MAX_LENGTH + 1), "processes": []},
    {"node": "gpu\x001", "processes": []},
    {"node": 5, "processes": []},
    {"node": None, "processes": []},
    {"node": "gpu-1", "processes": {}},
    {"node": "gpu-1", "processes": None},
    {"node": "gpu-1", "processes": [None]},
    {"node": "gpu-1", "processes": ["7"]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running"}] * 2},
    {"node": "gpu-1", "processes": [{"replica": n, "state": "running"} for n in range(bounds.AGENT_PROCESSES_MAX + 1)]},
    {"node": "gpu-1", "processes": [{"replica": "1", "state": "running"}]},
    {"node": "gpu-1", "processes": [{"replica": True, "state": "running"}]},
    {"node": "gpu-1", "processes": [{"replica": -1, "state": "running"}]},
    {"node": "gpu-1", "processes": [{"replica": 2**63, "state": "running"}]},
    {"node": "gpu-1", "processes": [{"state": "running"}]},
    {"node": "gpu-1", "processes": [{"replica": 1}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "gone"}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": ["running"]}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "exited"}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "exited", "exit_code": None}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "exited", "exit_code": 256}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "exited", "exit_code": -256}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "pid": bounds.AGENT_PID_MAX + 1}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "pid": False}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "log": None}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "log": "line"}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "log": ["a\x00b"]}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "log": ["x" * 2001]}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "log": ["x"] * 201}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "log_truncated": 1}]},
    {"node": "gpu-1", "processes": [{"replica": 1, "state": "running", "log_truncated": None}]},
    {"node": "gpu-1", "processes": [], "samples": None},
    {"node": "gpu-1", "processes": [], "samples": {}},
    {"node": "gpu-1", "processes": [], "samples": [_SAMPLE] * (bounds.AGENT_SAMPLES_MAX + 1)},
    {"node": "gpu-1", "processes": [], "samples": [{**_SAMPLE, "index": 64}]},
    {"node": "gpu-1", "processes": [], "samples": [{**_SAMPLE, "index": -1}]},
    {"node": "gpu-1", "processes": [], "samples": [{**_SAMPLE, "utilization": 100.5}]},
    {"node": "gpu-1", "processes": [], "samples": [{**_SAMPLE, "utilization": -0.1}]},
    {"node": "gpu-1", "processes": [], "samples": [{**_SAMPLE, "utilization": "50"}]},
    {"node": "gpu-1", "processes": [], "samples": [{**_SAMPLE, "utilization": True}]},
    {"node": "gpu-1", "processes": [], "samples": [{**_SAMPLE, "memory_used_mib": 10_000_001}]},
    {"node": "gpu-1", "processes": [], "samples": [{**_SAMPLE, "memory_total_mib": 0}]},
    {"node": "gpu-1", "processes": [], "samples": [{**_SAMPLE, "memory_total_mib": None}]},
    {"node": "gpu-1", "processes": [], "samples": [{"index": 0, "utilization": 1}]},
    {"node": "gpu-1", "processes": [], "samples": [7]},
]


def _serializer_reading(body: Any) -> tuple[str, list[ProcessReport], list[dict[str, Any]]]:
    serializer = AgentHeartbeatSerializer(data=body)
    assert serializer.is_valid(), serializer.errors
    validated = serializer.validated_data
    processes = [
        ProcessReport(
            replica=p["replica"],
            state=p["state"],
            pid=p.get("pid"),
            exit_code=p.get("exit_code"),
            log=tuple(p.get("log") or ()),
            log_truncated=bool(p.get("log_truncated")),
        )
        for p in validated["processes"]
    ]
    return validated["node"], processes, [dict(s) for s in validated.get("samples") or []]


@pytest.mark.parametrize("body", WELL_FORMED)
def test_a_well_formed_beat_is_read_without_the_serializer_with_the_serializers_values(body: dict[str, Any]) -> None:
    fast = accept_beat(body)
    assert fast is not None
    assert fast == _serializer_reading(body)
    assert all(type(s["utilization"]) is float for s in fast[2])


@pytest.mark.parametrize("body", COERCED)
def test_a_beat_the_serializer_coerces_is_left_to_it(body: dict[str, Any]) -> None:
    assert accept_beat(body) is None
    assert read_beat(body) == _serializer_reading(body)


@pytest.mark.parametrize("body", MALFORMED)
def test_a_doubtful_beat_is_left_to_the_serializer_which_refuses_it(body: Any) -> None:
    assert accept_beat(body) is None
    serializer = AgentHeartbeatSerializer(data=body)
    assert not serializer.is_valid()
    from rest_framework.exceptions import ValidationError

    with pytest.raises(ValidationError) as refused:
        read_beat(body)
    flat: dict[str, list[str]] = {}
    _flatten(refused.value.detail, "", flat)
    expected: dict[str, list[str]] = {}
    _flatten(serializer.errors, "", expected)
    assert flat == expected  # the same fields, the same sentences as before the fast path


def test_the_fast_path_answers_400s_in_the_serializers_words(agent_cluster: Cluster) -> None:
    client = _node_client(issue_node_token(actor=None, node=Node.objects.get(name="gpu-1")))
    answer = client.post(
        HEARTBEAT, {"node": "gpu-1", "processes": [{"replica": 1, "state": "exited", "exit_code": 300}]}, format="json"
    )
    assert answer.status_code == 400
    assert answer.json() == {"processes[0].exit_code": ["exit_code must be at most 255, got 300."]}


# --- the remembered token ----------------------------------------------------------------------------


def test_a_rotated_token_is_refused_at_once_though_this_process_remembers_it(agent_cluster: Cluster) -> None:
    node = Node.objects.get(name="gpu-1")
    old = _node_client(issue_node_token(actor=None, node=node))
    _beat(old, "gpu-1")  # remembered from here on
    with CaptureQueriesContext(connection) as remembered:
        _beat(old, "gpu-1")
    assert not any("token_hash" in q["sql"] and 'quotas_node"' in q["sql"] for q in remembered.captured_queries)
    new = _node_client(issue_node_token(actor=None, node=node))  # as another web process would
    refused = old.post(HEARTBEAT, {"node": "gpu-1", "processes": []}, format="json")
    assert refused.status_code == 401
    assert refused.json() == {"detail": "Unknown or revoked node token; a platform admin issues a new one."}
    assert old.post("/api/v1/agent/register/", {"node": "gpu-1", "gpus": []}, format="json").status_code == 401
    assert _beat(new, "gpu-1")["node"] == "gpu-1"


def test_a_remembered_agent_sees_an_admins_cordon_at_its_next_beat(agent_cluster: Cluster) -> None:
    client = _node_client(issue_node_token(actor=None, node=Node.objects.get(name="gpu-1")))
    assert _beat(client, "gpu-1")["state"] == "ready"
    Node.objects.filter(name="gpu-1").update(state="cordoned")
    assert _beat(client, "gpu-1")["state"] == "cordoned"


# --- the node's row and the number of queries --------------------------------------------------------


def test_the_nodes_last_beat_is_rewritten_only_once_it_is_old(agent_cluster: Cluster) -> None:
    client = _node_client(issue_node_token(actor=None, node=Node.objects.get(name="gpu-1")))
    Node.objects.filter(name="gpu-1").update(last_heartbeat=None)
    _beat(client, "gpu-1")
    first = Node.objects.get(name="gpu-1").last_heartbeat
    assert first is not None
    _beat(client, "gpu-1")
    assert Node.objects.get(name="gpu-1").last_heartbeat == first  # recent: not written again
    stale = timezone.now() - timedelta(seconds=heartbeat_record_seconds() + 1)
    Node.objects.filter(name="gpu-1").update(last_heartbeat=stale)
    _beat(client, "gpu-1")
    assert Node.objects.get(name="gpu-1").last_heartbeat > stale  # type: ignore[operator]


def test_a_steady_beat_with_eight_gpus_samples_is_at_most_five_queries(
    agent_cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    client, node = _agent_of(_submit(agent_cluster, "one", gpus=1, command="sleep 100"))
    processes = [_running(start) for start in _beat(client, node)["starts"]]
    samples = [{"index": gpu, "utilization": 50.0, "memory_used_mib": 1} for gpu in range(8)]
    with django_capture_on_commit_callbacks(execute=True):
        _beat(client, node, processes, samples=samples)
    with CaptureQueriesContext(connection) as beat, django_capture_on_commit_callbacks(execute=True):
        _beat(client, node, processes, samples=samples)
    statements = [q["sql"] for q in beat.captured_queries if "SAVEPOINT" not in q["sql"]]
    # The beat (token, node and placements in one; the agent's processes) and, with
    # AGENT_SAMPLES_FLUSH_SECONDS = 0 here, the readings' write (holders, known jobs, insert).
    assert len(statements) <= 5, statements


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements are PostgreSQL's")
def test_on_postgresql_the_beats_statement_is_prepared_once_and_still_counted(agent_cluster: Cluster) -> None:
    client, node = _agent_of(_submit(agent_cluster, "one", gpus=1, command="sleep 100"))
    processes = [_running(start) for start in _beat(client, node)["starts"]]
    with CaptureQueriesContext(connection) as beats:
        for _ in range(3):
            _beat(client, node, processes)
    assert sum("FROM quotas_nodeagent a" in query["sql"] for query in beats.captured_queries) == 3
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s", ["%quotas_nodeagent a%"])
        assert cursor.fetchone() == (1,)


# --- agents' readings, written together --------------------------------------------------------------


def test_agents_readings_wait_and_are_written_together(agent_cluster: Cluster, settings: Any) -> None:
    from telemetry import services
    from telemetry.models import GpuSample

    settings.AGENT_SAMPLES_FLUSH_SECONDS = 3600
    one, two = Node.objects.get(name="gpu-1"), Node.objects.get(name="gpu-2")
    try:
        assert (
            services.record_agent_samples(node=one, samples=[{"index": 0, "utilization": 10.0, "memory_used_mib": 1}])
            == 0
        )
        assert (
            services.record_agent_samples(node=two, samples=[{"index": 1, "utilization": 20.0, "memory_used_mib": 2}])
            == 0
        )
        assert not GpuSample.objects.exists()
        with CaptureQueriesContext(connection) as flush:
            assert services.flush_agent_samples() == 2
        assert sum("INSERT" in q["sql"] for q in flush.captured_queries) == 1
        assert sorted(GpuSample.objects.values_list("node__name", "gpu", "utilisation")) == [
            ("gpu-1", 0, 10.0),
            ("gpu-2", 1, 20.0),
        ]
        settings.AGENT_SAMPLES_FLUSH_SECONDS = 0
        written = services.record_agent_samples(
            node=one, samples=[{"index": 2, "utilization": 1.0, "memory_used_mib": 1}]
        )
        assert written == 1
    finally:
        services.flush_agent_samples()


def test_a_reading_telemetry_refuses_is_dropped_and_the_others_of_the_second_are_written(
    agent_cluster: Cluster, settings: Any
) -> None:
    from telemetry import services
    from telemetry.models import GpuSample

    settings.AGENT_SAMPLES_FLUSH_SECONDS = 3600
    node = Node.objects.get(name="gpu-1")
    try:
        services.record_agent_samples(node=node, samples=[{"index": 9, "utilization": 1.0, "memory_used_mib": 1}])
        services.record_agent_samples(node=node, samples=[{"index": 1, "utilization": 1.0, "memory_used_mib": 1}])
        assert services.flush_agent_samples() == 1
        assert list(GpuSample.objects.values_list("gpu", flat=True)) == [1]
    finally:
        services.flush_agent_samples()
