"""The agent endpoints (AGENT.md) under /api/v1/agent/: node tokens only, shapes only.

Every list and string in a beat is bounded (quotas.bounds) and the bounds are in the schema, so
a runaway agent is refused with a 400 naming the field, before anything is written.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from quotas import bounds
from quotas.api.node_auth import IsNodeAgent, NodeTokenAuthentication
from quotas.api.serializers import text, within
from quotas.models import NodeAgent
from quotas.node_agents import REVOKED, NodeTokenRevoked, ReportedDevice, register_agent
from scheduling import agent_services
from scheduling.models import AgentProcessState
from utilities.json_types import JsonTypedMixin

_ID_MAX = 2**63 - 1
# A console's identity is a UUID's 36 characters (quotas.node_agents.installation_identity).
_CONSOLE_MAX_LENGTH = 36
_SAMPLES_SECONDS_HELP = (
    "Send the GPUs' readings (`samples`) in a beat at most this often: TELEMETRY_SAMPLE_SECONDS, "
    "as the simulated nodes are sampled. A beat without them leaves `samples` out."
)


class AgentDeviceSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    index = serializers.IntegerField(**within("index", bounds.NODE_GPUS_MAX - 1))
    uuid = serializers.CharField(allow_blank=True, **text("uuid", bounds.AGENT_DEVICE_UUID_MAX_LENGTH, blank=True))
    model = serializers.CharField(allow_blank=True, **text("model", bounds.GPU_MODEL_MAX_LENGTH, blank=True))
    memory_mib = serializers.IntegerField(**within("memory_mib", bounds.AGENT_DEVICE_MEMORY_MIB_MAX))


class AgentHeldSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    replica = serializers.IntegerField(**within("replica", _ID_MAX))
    job = serializers.IntegerField(**within("job", _ID_MAX))
    pid = serializers.IntegerField(**within("pid", bounds.AGENT_PID_MAX))


class AgentRegisterSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    node = serializers.CharField(
        help_text="The node this agent runs on; must be the node of the token.", **text("node", bounds.NAME_MAX_LENGTH)
    )
    version = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="The agent's own version (gqc's); the Nodes page and the nodes API show it.",
        **text("version", bounds.AGENT_VERSION_MAX_LENGTH, blank=True),
    )
    gpus = serializers.ListField(
        child=AgentDeviceSerializer(),
        max_length=bounds.NODE_GPUS_MAX,
        error_messages={"max_length": f"gpus has at most {bounds.NODE_GPUS_MAX} entries."},
    )
    state_console = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text="The console identity the agent's state directory belongs to; empty when it records none.",
        **text("state_console", _CONSOLE_MAX_LENGTH, blank=True),
    )
    state_node_id = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The node id the agent's state directory belongs to.",
        **within("state_node_id", _ID_MAX),
    )
    held = serializers.ListField(
        child=AgentHeldSerializer(),
        required=False,
        default=list,
        max_length=bounds.AGENT_PROCESSES_MAX,
        help_text="The processes the state directory holds, running or exited and not yet reported.",
        error_messages={"max_length": f"held has at most {bounds.AGENT_PROCESSES_MAX} entries."},
    )

    def validate_held(self, held: list[dict[str, Any]]) -> list[dict[str, Any]]:
        replicas = [process["replica"] for process in held]
        if len(set(replicas)) != len(replicas):
            raise serializers.ValidationError("each replica appears once.")
        return held

    def validate_gpus(self, gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
        indices = [gpu["index"] for gpu in gpus]
        if len(set(indices)) != len(indices):
            raise serializers.ValidationError("each GPU index appears once.")
        return gpus


class AgentRegistrationSerializer(serializers.Serializer[dict[str, Any]]):
    node = serializers.CharField()
    state = serializers.CharField(help_text="ready, not_ready, cordoned or draining.")
    mismatch = serializers.ListField(child=serializers.CharField(), help_text="Empty when the host matches.")
    cordoned = serializers.BooleanField(help_text="True when this registration cordoned the node.")
    heartbeat_seconds = serializers.FloatField()
    samples_seconds = serializers.FloatField(help_text=_SAMPLES_SECONDS_HELP)
    console = serializers.CharField(help_text="This console's identity: the agent keys its state directory by it.")
    node_id = serializers.IntegerField(help_text="The node's identity in this console, with `console`.")
    adopt = serializers.ListField(
        child=serializers.IntegerField(), help_text="Held replicas to keep and report as this console's."
    )
    stop = serializers.ListField(
        child=serializers.IntegerField(), help_text="Held replicas that are not this console's: stop, then forget."
    )
    stop_grace_seconds = serializers.FloatField(help_text="SIGTERM to those, SIGKILL once this has passed.")


class AgentProcessSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    replica = serializers.IntegerField(
        help_text="The `replica` of the start it was started for.", **within("replica", _ID_MAX)
    )
    state = serializers.ChoiceField(choices=AgentProcessState.choices)
    pid = serializers.IntegerField(required=False, allow_null=True, **within("pid", bounds.AGENT_PID_MAX))
    exit_code = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="When exited: the code, or minus the signal that ended it.",
        **within("exit_code", bounds.AGENT_EXIT_CODE_MAX, least=bounds.AGENT_EXIT_CODE_MIN),
    )
    log = serializers.ListField(
        child=serializers.CharField(
            allow_blank=True, trim_whitespace=False, max_length=bounds.AGENT_LOG_LINE_MAX_LENGTH
        ),
        required=False,
        max_length=bounds.AGENT_LOG_LINES_PER_BEAT,
        help_text="New lines of the process's output since the last beat.",
        error_messages={"max_length": f"log has at most {bounds.AGENT_LOG_LINES_PER_BEAT} lines per beat."},
    )
    log_truncated = serializers.BooleanField(
        required=False, default=False, help_text="Lines were dropped before these."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["state"] == AgentProcessState.EXITED and attrs.get("exit_code") is None:
            raise serializers.ValidationError({"exit_code": "an exited process has an exit code."})
        return attrs


class AgentSampleSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    index = serializers.IntegerField(**within("index", bounds.NODE_GPUS_MAX - 1))
    utilization = serializers.FloatField(help_text="Percent.", **within("utilization", 100))
    memory_used_mib = serializers.IntegerField(**within("memory_used_mib", bounds.AGENT_DEVICE_MEMORY_MIB_MAX))
    memory_total_mib = serializers.IntegerField(
        required=False,
        help_text="The device's memory; the registered size when left out.",
        **within("memory_total_mib", bounds.AGENT_DEVICE_MEMORY_MIB_MAX, least=1),
    )


class AgentHeartbeatSerializer(JsonTypedMixin, serializers.Serializer[dict[str, Any]]):
    node = serializers.CharField(
        help_text="The node this agent runs on; must be the node of the token.", **text("node", bounds.NAME_MAX_LENGTH)
    )
    processes = serializers.ListField(
        child=AgentProcessSerializer(),
        max_length=bounds.AGENT_PROCESSES_MAX,
        help_text="Every process the agent holds (running, or exited since the last beat).",
        error_messages={"max_length": f"processes has at most {bounds.AGENT_PROCESSES_MAX} entries."},
    )
    samples = serializers.ListField(
        child=AgentSampleSerializer(),
        required=False,
        max_length=bounds.AGENT_SAMPLES_MAX,
        help_text="Each GPU's utilisation and memory now: stored by telemetry after the beat commits.",
        error_messages={"max_length": f"samples has at most {bounds.AGENT_SAMPLES_MAX} entries."},
    )

    def validate_processes(self, processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        replicas = [process["replica"] for process in processes]
        if len(set(replicas)) != len(replicas):
            raise serializers.ValidationError("each replica appears once.")
        return processes


class DesiredStartSerializer(serializers.Serializer[Any]):
    replica = serializers.IntegerField(help_text="The process's key: start it once, report it by this.")
    job = serializers.IntegerField()
    rank = serializers.IntegerField(help_text="The replica's rank in its job, from 0.")
    command = serializers.CharField(help_text="Run with `sh -c`.")
    environment = serializers.DictField(
        child=serializers.CharField(), help_text="The job's variables, and GQC_* naming the job, quota and rank."
    )
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="Device indices: CUDA_VISIBLE_DEVICES.")
    fraction = serializers.FloatField(help_text="Below 1: the share of its one device (GPU_QUOTA_FRACTION).")
    image = serializers.CharField(
        allow_blank=True, help_text="For an agent that runs containers (empty: none); the process agent ignores it."
    )


class DesiredStopSerializer(serializers.Serializer[Any]):
    replica = serializers.IntegerField()
    job = serializers.IntegerField()
    grace_seconds = serializers.FloatField(help_text="SIGTERM now, SIGKILL once this has passed.")


class DesiredSerializer(serializers.Serializer[Any]):
    node = serializers.CharField()
    state = serializers.CharField()
    starts = DesiredStartSerializer(many=True)
    stops = DesiredStopSerializer(many=True)
    heartbeat_seconds = serializers.FloatField()
    samples_seconds = serializers.FloatField(help_text=_SAMPLES_SECONDS_HELP)


def _own_node(request: Request, named: str) -> NodeAgent:
    agent = request.auth
    assert isinstance(agent, NodeAgent)
    if named != agent.node.name:
        # The agent may come from this process's memory: a node renamed since is read again.
        agent.node.refresh_from_db(fields=["name"])
    if named != agent.node.name:
        raise PermissionDenied(f"This token belongs to node {agent.node.name}, not {named}.")
    return agent


class _AgentView(APIView):
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes: list[type[BaseThrottle]] = []


class AgentRegisterView(_AgentView):
    """The agent starts: the host's GPUs are reconciled with the node's; a mismatch cordons it.

    Node tokens only (`Authorization: Node <token>`, docs/agent.md): a user's token or session
    is refused with a 401, and a node token naming another node with a 403."""

    @extend_schema(request=AgentRegisterSerializer, responses={200: AgentRegistrationSerializer})
    def post(self, request: Request) -> Response:
        serializer = AgentRegisterSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        validated = serializer.validated_data
        agent = _own_node(request, validated["node"])
        try:
            registration = register_agent(
                agent=agent,
                devices=[ReportedDevice(**gpu) for gpu in validated["gpus"]],
                version=validated["version"],
            )
        except NodeTokenRevoked:
            raise AuthenticationFailed(REVOKED) from None
        claim = agent_services.claim_state(
            agent=agent,
            state_console=validated["state_console"],
            state_node_id=validated["state_node_id"],
            held=[agent_services.HeldProcess(**process) for process in validated["held"]],
        )
        return Response(
            {
                "node": registration.node.name,
                "state": registration.node.state,
                "mismatch": registration.mismatch,
                "cordoned": registration.cordoned,
                "heartbeat_seconds": float(settings.AGENT_HEARTBEAT_SECONDS),
                "samples_seconds": float(settings.TELEMETRY_SAMPLE_SECONDS),
                "console": claim.console,
                "node_id": claim.node_id,
                "adopt": claim.adopt,
                "stop": claim.stop,
                "stop_grace_seconds": claim.stop_grace_seconds,
            }
        )


_PROCESS_STATES = frozenset(AgentProcessState.values)


def _whole(value: object, least: int, most: int) -> TypeGuard[int]:
    # JSON's true is a Python int; the serializer refuses it, so the fast path must too.
    return type(value) is int and least <= value <= most


def _clean_text(value: object, most: int) -> TypeGuard[str]:
    return type(value) is str and len(value) <= most and "\x00" not in value


def _fast_process(item: Any) -> agent_services.ProcessReport | None:
    if type(item) is not dict:
        return None
    replica, state = item.get("replica"), item.get("state")
    pid, exit_code = item.get("pid"), item.get("exit_code")
    log, truncated = item.get("log", ()), item.get("log_truncated", False)
    if not (_whole(replica, 0, _ID_MAX) and type(state) is str and state in _PROCESS_STATES):
        return None
    if not (pid is None or _whole(pid, 0, bounds.AGENT_PID_MAX)):
        return None
    if not (exit_code is None or _whole(exit_code, bounds.AGENT_EXIT_CODE_MIN, bounds.AGENT_EXIT_CODE_MAX)):
        return None
    if state == AgentProcessState.EXITED and exit_code is None:
        return None
    if type(log) not in (list, tuple) or len(log) > bounds.AGENT_LOG_LINES_PER_BEAT:
        return None
    if not all(_clean_text(line, bounds.AGENT_LOG_LINE_MAX_LENGTH) for line in log):
        return None
    if type(truncated) is not bool:
        return None
    return agent_services.ProcessReport(
        replica=replica, state=state, pid=pid, exit_code=exit_code, log=tuple(log), log_truncated=truncated
    )


def _fast_sample(item: Any) -> dict[str, Any] | None:
    if type(item) is not dict:
        return None
    index, utilization, used = item.get("index"), item.get("utilization"), item.get("memory_used_mib")
    if not (_whole(index, 0, bounds.NODE_GPUS_MAX - 1) and _whole(used, 0, bounds.AGENT_DEVICE_MEMORY_MIB_MAX)):
        return None
    if not isinstance(utilization, int | float) or isinstance(utilization, bool) or not 0 <= utilization <= 100:
        return None
    sample: dict[str, Any] = {"index": index, "utilization": float(utilization), "memory_used_mib": used}
    if "memory_total_mib" in item:
        if not _whole(item["memory_total_mib"], 1, bounds.AGENT_DEVICE_MEMORY_MIB_MAX):
            return None
        sample["memory_total_mib"] = item["memory_total_mib"]
    return sample


def accept_beat(body: Any) -> tuple[str, list[agent_services.ProcessReport], list[dict[str, Any]]] | None:
    """A well-formed beat, read without DRF (the serializer cost more than the beat itself), or
    None when anything in it is doubtful. Then AgentHeartbeatSerializer reads it and answers the
    400 in its own words: this only ever accepts what the serializer accepts, with the same values
    (tests/scheduling/test_agent_beat.py compares the two on every kind of body)."""
    if type(body) is not dict:
        return None
    node, processes, samples = body.get("node"), body.get("processes"), body.get("samples", [])
    # DRF trims a name's whitespace; a name that would change is left to it.
    if not _clean_text(node, bounds.NAME_MAX_LENGTH) or not node or node != node.strip():
        return None
    if type(processes) is not list or len(processes) > bounds.AGENT_PROCESSES_MAX:
        return None
    if type(samples) is not list or len(samples) > bounds.AGENT_SAMPLES_MAX:
        return None
    reports = [_fast_process(item) for item in processes]
    readings = [_fast_sample(item) for item in samples]
    if None in reports or None in readings:
        return None
    accepted = [report for report in reports if report is not None]
    if len({report.replica for report in accepted}) != len(accepted):
        return None
    return node, accepted, [reading for reading in readings if reading is not None]


def read_beat(body: Any) -> tuple[str, list[agent_services.ProcessReport], list[dict[str, Any]]]:
    """The beat's node, processes and samples; a 400 naming the field (the serializer's) when malformed."""
    accepted = accept_beat(body)
    if accepted is not None:
        return accepted
    serializer = AgentHeartbeatSerializer(data=body)
    serializer.is_valid(raise_exception=True)
    validated = serializer.validated_data
    return (
        validated["node"],
        [
            agent_services.ProcessReport(
                replica=process["replica"],
                state=process["state"],
                pid=process.get("pid"),
                exit_code=process.get("exit_code"),
                log=tuple(process.get("log") or ()),
                log_truncated=bool(process.get("log_truncated")),
            )
            for process in validated["processes"]
        ],
        [dict(sample) for sample in validated.get("samples") or []],
    )


def _desired_body(desired: agent_services.Desired) -> dict[str, Any]:
    """DesiredSerializer's shape, built directly (the schema still names DesiredSerializer)."""
    return {
        "node": desired.node,
        "state": desired.state,
        "starts": [
            {
                "replica": start.replica,
                "job": start.job,
                "rank": start.rank,
                "command": start.command,
                "environment": dict(start.environment),
                "gpus": list(start.gpus),
                "fraction": start.fraction,
                "image": start.image,
            }
            for start in desired.starts
        ],
        "stops": [
            {"replica": stop.replica, "job": stop.job, "grace_seconds": stop.grace_seconds} for stop in desired.stops
        ],
        "heartbeat_seconds": desired.heartbeat_seconds,
        # In every answer, not only registration's: a console restarted with another setting
        # reaches the agents that do not register again.
        "samples_seconds": float(settings.TELEMETRY_SAMPLE_SECONDS),
    }


class AgentHeartbeatView(_AgentView):
    """The processes the agent holds in; the node's desired state (starts, stops) out.

    Node tokens only (`Authorization: Node <token>`, docs/agent.md): a user's token or session
    is refused with a 401, and a node token naming another node with a 403. Asking twice with
    the same report answers the same, and changes nothing."""

    @extend_schema(request=AgentHeartbeatSerializer, responses={200: DesiredSerializer})
    def post(self, request: Request) -> Response:
        node, processes, samples = read_beat(request.data)
        agent = _own_node(request, node)
        try:
            desired = agent_services.heartbeat(agent=agent, processes=processes)
        except NodeTokenRevoked:
            raise AuthenticationFailed(REVOKED) from None
        agent_services.report_gpu_samples(agent=agent, samples=samples)
        return Response(_desired_body(desired))
