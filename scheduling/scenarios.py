"""Scenario files (docs/scenarios/, SCENARIOS.md): parse, validate and play them.

A scenario is read into frozen dataclasses first, so a bad file is refused before anything is
written, with one sentence that names where (the step, or the quota / node / workspace) and
the field. Rules that span rows (children's guarantees within the parent's, limit ≥ guarantee)
stay with the quota services; `play` reports their errors in the same shape.

`play` runs on whatever database the caller has connected: `manage.py simulate` wraps it in
`throwaway_database()` so the console's own database is never touched.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias
from uuid import uuid4

import yaml
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import NON_FIELD_ERRORS, PermissionDenied, ValidationError
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.utils import ConnectionHandler
from django.test.utils import override_settings

from quotas import hooks as quota_hooks
from quotas import services as quota_services
from quotas.models import Node, NodeState, Quota, ResourcePool
from scheduling import services as job_services
from scheduling import triggers
from scheduling.clock import SimulatedClock, use_clock
from scheduling.cycle import ensure_fence
from scheduling.lock import CycleLease, holder_name, issue_token
from scheduling.models import Job, JobState, ReplicaPlacementRecord
from workspaces import services as workspace_services
from workspaces.models import Workspace

KINDS: Final = ("training", "inference", "notebook")
PLACEMENTS: Final = ("pack", "spread")
QUEUE_POLICIES: Final = ("best_effort", "fifo")
END_ACTIONS: Final = ("finish", "fail", "cancel")
NODE_ACTIONS: Final = ("node_down", "node_up")
STEP_ACTIONS: Final = (
    "submit",
    *END_ACTIONS,
    "transfer",
    "scale",
    "set",
    *NODE_ACTIONS,
    "advance",
    "checkpoint",
)
# Quota fields a scenario may set: exactly the quota service's settings.
SETTABLE_QUOTA_FIELDS: Final = tuple(quota_services.QuotaSettings.__annotations__)


class ScenarioError(Exception):
    """A scenario that cannot be played; `str()` is the one line `simulate` prints."""

    def __init__(self, where: str, field_name: str | None, message: str) -> None:
        self.where = where
        self.field_name = field_name
        self.message = message
        text = f"{where}: field '{field_name}': {message}" if field_name else f"{where}: {message}"
        super().__init__(text)


# ---------------------------------------------------------------------------------------------
# The parsed scenario


# A scenario's node is what the inventory service creates: quota_services.NewNode.


@dataclass(frozen=True, slots=True)
class QuotaSpec:
    """One quota of the tree, parents before their children; None means the model's default."""

    name: str
    parent: str | None
    gpus: float
    cpu: float | None = None
    memory_gib: float | None = None
    limit: float | None = None
    weight: float | None = None
    rank: int = 0
    child_preemption: bool = False
    same_level_preemption: bool = False
    queue_policy: str = "best_effort"
    min_runtime_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class WorkspaceSpec:
    name: str
    quotas: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec(job_services.JobShape):
    """A job of a scenario: its shape, and the quota and workspace it names."""

    quota: str
    workspace: str


@dataclass(frozen=True, slots=True)
class SubmitStep:
    number: int
    jobs: tuple[JobSpec, ...]
    action: Literal["submit"] = "submit"


@dataclass(frozen=True, slots=True)
class EndJobStep:
    number: int
    job: str
    action: Literal["finish", "fail", "cancel"]


@dataclass(frozen=True, slots=True)
class TransferStep:
    number: int
    source: str
    target: str
    gpus: float
    action: Literal["transfer"] = "transfer"


@dataclass(frozen=True, slots=True)
class ScaleStep:
    number: int
    quota: str
    gpus: float | None = None
    cpu: float | None = None
    memory_gib: float | None = None
    action: Literal["scale"] = "scale"


@dataclass(frozen=True, slots=True)
class SetStep:
    number: int
    quota: str
    changes: Mapping[str, Any]
    action: Literal["set"] = "set"


@dataclass(frozen=True, slots=True)
class NodeStateStep:
    number: int
    node: str
    action: Literal["node_down", "node_up"]


@dataclass(frozen=True, slots=True)
class AdvanceStep:
    number: int
    seconds: float
    action: Literal["advance"] = "advance"


@dataclass(frozen=True, slots=True)
class CheckpointStep:
    number: int
    name: str
    action: Literal["checkpoint"] = "checkpoint"


Step: TypeAlias = (
    SubmitStep | EndJobStep | TransferStep | ScaleStep | SetStep | NodeStateStep | AdvanceStep | CheckpointStep
)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    placement: str
    nodes: tuple[quota_services.NewNode, ...]
    quotas: tuple[QuotaSpec, ...]
    workspaces: tuple[WorkspaceSpec, ...]
    steps: tuple[Step, ...]
    default_workspaces: bool = field(default=False)


def step_label(step: Step) -> str:
    return f"step {step.number} ({step.action})"


# ---------------------------------------------------------------------------------------------
# Parsing


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; a missing or unreadable file is a ScenarioError too."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ScenarioError(str(path), None, f"cannot read the file: {error.strerror or error}") from None
    return parse_scenario(text)


def parse_scenario(text: str) -> Scenario:
    try:
        # libyaml's loader when PyYAML has it: 5x faster on a 10,000-job file.
        document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error)
        raise ScenarioError("scenario", None, f"not valid YAML{where}: {problem}") from None
    return parse_document(document)


def parse_document(document: object) -> Scenario:
    """A scenario already loaded from YAML (or built in Python, as the benchmarks do)."""
    return _Parser().scenario(document)


class _Parser:
    """Holds the names seen so far so that later steps can be checked against them."""

    def __init__(self) -> None:
        self.node_names: list[str] = []
        self.quota_names: list[str] = []
        self.workspace_quotas: dict[str, tuple[str, ...]] = {}
        self.job_steps: dict[str, int] = {}

    def scenario(self, document: object) -> Scenario:
        where = "scenario"
        top = _mapping(document, where, None, "a mapping with nodes, quotas and steps")
        _known_keys(top, where, ("name", "description", "pool", "nodes", "quotas", "workspaces", "steps"))
        name = _string(top.get("name", "scenario"), where, "name")
        description = _string(top.get("description", ""), where, "description", allow_empty=True)
        placement = "pack"
        if "pool" in top:
            pool = _mapping(top["pool"], where, "pool", "a mapping like {placement: pack}")
            _known_keys(pool, "pool", ("placement",))
            placement = _choice(pool.get("placement", "pack"), "pool", "placement", PLACEMENTS)
        nodes = self.nodes(_list(top.get("nodes"), where, "nodes", required=True))
        quotas = self.quotas(_list(top.get("quotas"), where, "quotas", required=True))
        default_workspaces = top.get("workspaces") is None
        if default_workspaces:
            workspaces = tuple(WorkspaceSpec(name=quota.name, quotas=(quota.name,)) for quota in quotas)
            self.workspace_quotas = {ws.name: ws.quotas for ws in workspaces}
        else:
            workspaces = self.workspaces(_list(top["workspaces"], where, "workspaces", required=True))
        raw_steps = _list(top.get("steps", []), where, "steps", required=False)
        steps = tuple(self.step(raw, number) for number, raw in enumerate(raw_steps, start=1))
        return Scenario(
            name=name,
            description=description,
            placement=placement,
            nodes=nodes,
            quotas=quotas,
            workspaces=workspaces,
            steps=steps,
            default_workspaces=default_workspaces,
        )

    # -- cluster ------------------------------------------------------------------------------

    def nodes(self, raw_nodes: list[Any]) -> tuple[quota_services.NewNode, ...]:
        nodes: list[quota_services.NewNode] = []
        for index, raw in enumerate(raw_nodes, start=1):
            where = f"nodes[{index}]"
            entry = _mapping(raw, where, None, "a mapping like {name: gpu, count: 2, gpus: 8}")
            where = f"node {entry['name']!r}" if isinstance(entry.get("name"), str) else where
            _known_keys(entry, where, ("name", "count", "gpus", "cpu", "memory_gib", "gpu_model"))
            base = _string(entry.get("name"), where, "name")
            count = _integer(entry.get("count", 1), where, "count", minimum=1)
            gpus = _integer(entry.get("gpus"), where, "gpus", minimum=0)
            cpu = _number(entry.get("cpu", 0), where, "cpu")
            memory = _number(entry.get("memory_gib", 0), where, "memory_gib")
            model = _string(entry.get("gpu_model", ""), where, "gpu_model", allow_empty=True)
            names = [base] if count == 1 else [f"{base}-{n}" for n in range(1, count + 1)]
            for node_name in names:
                if node_name in self.node_names:
                    raise ScenarioError(where, "name", f"duplicate node name {node_name!r}")
                self.node_names.append(node_name)
                nodes.append(
                    quota_services.NewNode(name=node_name, gpus=gpus, cpu=cpu, memory_gib=memory, gpu_model=model)
                )
        if not nodes:
            raise ScenarioError("scenario", "nodes", "the cluster needs at least one node")
        return tuple(nodes)

    def quotas(self, raw_quotas: list[Any]) -> tuple[QuotaSpec, ...]:
        quotas: list[QuotaSpec] = []

        def walk(raw_level: list[Any], parent: str | None, where_list: str) -> None:
            for index, raw in enumerate(raw_level, start=1):
                where = f"{where_list}[{index}]"
                entry = _mapping(raw, where, None, "a mapping like {name: team-a, gpus: 8}")
                if isinstance(entry.get("name"), str):
                    where = f"quota {entry['name']!r}"
                _known_keys(entry, where, ("name", "children", *SETTABLE_QUOTA_FIELDS))
                name = _string(entry.get("name"), where, "name")
                if name in self.quota_names:
                    raise ScenarioError(where, "name", f"duplicate quota name {name!r}")
                self.quota_names.append(name)
                options = _quota_fields(entry, where)
                quotas.append(QuotaSpec(name=name, parent=parent, gpus=options.pop("gpus", 0.0), **options))
                walk(_list(entry.get("children", []), where, "children", required=False), name, f"{where}.children")

        walk(raw_quotas, None, "quotas")
        if not quotas:
            raise ScenarioError("scenario", "quotas", "the tree needs at least one quota")
        return tuple(quotas)

    def workspaces(self, raw_workspaces: list[Any]) -> tuple[WorkspaceSpec, ...]:
        workspaces: list[WorkspaceSpec] = []
        for index, raw in enumerate(raw_workspaces, start=1):
            where = f"workspaces[{index}]"
            entry = _mapping(raw, where, None, "a mapping like {name: team-a, quotas: [Quota1]}")
            if isinstance(entry.get("name"), str):
                where = f"workspace {entry['name']!r}"
            _known_keys(entry, where, ("name", "quotas", "description"))
            name = _string(entry.get("name"), where, "name")
            if name in self.workspace_quotas:
                raise ScenarioError(where, "name", f"duplicate workspace name {name!r}")
            bound = tuple(
                self.known_quota(_string(q, where, "quotas"), where, "quotas")
                for q in _list(entry.get("quotas", []), where, "quotas", required=False)
            )
            description = _string(entry.get("description", ""), where, "description", allow_empty=True)
            self.workspace_quotas[name] = bound
            workspaces.append(WorkspaceSpec(name=name, quotas=bound, description=description))
        return tuple(workspaces)

    # -- steps --------------------------------------------------------------------------------

    def step(self, raw: object, number: int) -> Step:
        where = f"step {number}"
        if isinstance(raw, str) or not isinstance(raw, dict) or len(raw) != 1:
            raise ScenarioError(
                where, None, f"must be a mapping with exactly one action, one of {', '.join(STEP_ACTIONS)}"
            )
        ((action, body),) = raw.items()
        if action not in STEP_ACTIONS:
            raise ScenarioError(where, None, f"unknown action {action!r}; known: {', '.join(STEP_ACTIONS)}")
        where = f"step {number} ({action})"
        if action == "submit":
            return SubmitStep(number=number, jobs=self.submit(body, where, number))
        if action in END_ACTIONS:
            job = _string(body, where, "job")
            if job not in self.job_steps:
                raise ScenarioError(where, "job", f"unknown job {job!r} (not submitted in an earlier step)")
            return EndJobStep(number=number, job=job, action=action)
        if action in NODE_ACTIONS:
            node = _string(body, where, "node")
            if node not in self.node_names:
                raise ScenarioError(where, "node", f"unknown node {node!r}")
            return NodeStateStep(number=number, node=node, action=action)
        if action == "advance":
            return AdvanceStep(number=number, seconds=_number(body, where, "seconds"))
        if action == "checkpoint":
            return CheckpointStep(number=number, name=_string(body, where, "name"))
        entry = _mapping(body, where, None, "a mapping")
        if action == "transfer":
            _known_keys(entry, where, ("from", "to", "gpus"))
            source = self.known_quota(_string(entry.get("from"), where, "from"), where, "from")
            target = self.known_quota(_string(entry.get("to"), where, "to"), where, "to")
            return TransferStep(
                number=number, source=source, target=target, gpus=_number(entry.get("gpus"), where, "gpus")
            )
        if action == "scale":
            _known_keys(entry, where, ("quota", "gpus", "cpu", "memory_gib"))
            quota = self.known_quota(_string(entry.get("quota"), where, "quota"), where, "quota")
            amounts = {key: _number(entry[key], where, key) for key in ("gpus", "cpu", "memory_gib") if key in entry}
            if not amounts:
                raise ScenarioError(where, "gpus", "a scale step needs gpus, cpu or memory_gib")
            return ScaleStep(
                number=number,
                quota=quota,
                gpus=amounts.get("gpus"),
                cpu=amounts.get("cpu"),
                memory_gib=amounts.get("memory_gib"),
            )
        # set
        _known_keys(entry, where, ("quota", *SETTABLE_QUOTA_FIELDS))
        quota = self.known_quota(_string(entry.get("quota"), where, "quota"), where, "quota")
        changes = _quota_fields(entry, where, nullable=True)
        if not changes:
            raise ScenarioError(where, None, f"a set step needs at least one of {', '.join(SETTABLE_QUOTA_FIELDS)}")
        return SetStep(number=number, quota=quota, changes=changes)

    def submit(self, body: object, where: str, number: int) -> tuple[JobSpec, ...]:
        """One job (`count` copies of it), or a list of them: a burst that the cycle sees at once."""
        if isinstance(body, list):
            if not body:
                raise ScenarioError(where, None, "a list of jobs must not be empty")
            return tuple(job for entry in body for job in self.submit_one(entry, where, number))
        return self.submit_one(body, where, number)

    def submit_one(self, body: object, where: str, number: int) -> tuple[JobSpec, ...]:
        entry = _mapping(body, where, None, "a mapping like {name: train, quota: team-a, kind: training, gpus: 1}")
        _known_keys(
            entry,
            where,
            (
                "name",
                "count",
                "quota",
                "workspace",
                "kind",
                "gpus",
                "replicas",
                "min_replicas",
                "priority",
                "preemptible",
                "cpu",
                "memory_gib",
                "command",
                "duration",
                "grace_seconds",
                "requeue",
            ),
        )
        name = _string(entry.get("name"), where, "name")
        count = _integer(entry.get("count", 1), where, "count", minimum=1) if "count" in entry else None
        quota = self.known_quota(_string(entry.get("quota"), where, "quota"), where, "quota")
        workspace = self.workspace_for(entry.get("workspace"), quota, where)
        kind = _choice(entry.get("kind", "training"), where, "kind", KINDS)
        gpus = _number(entry.get("gpus"), where, "gpus")
        if gpus <= 0:
            raise ScenarioError(where, "gpus", f"must be more than 0, got {_show(gpus)}")
        replicas = _integer(entry.get("replicas", 1), where, "replicas", minimum=1)
        min_replicas = _optional(entry, "min_replicas", lambda v: _integer(v, where, "min_replicas", minimum=1))
        if min_replicas is not None and min_replicas > replicas:
            raise ScenarioError(
                where, "min_replicas", f"must be at most replicas: min_replicas {min_replicas} > replicas {replicas}"
            )
        priority = _optional(entry, "priority", lambda v: _integer(v, where, "priority", minimum=1))
        if priority is not None and priority > 9:
            raise ScenarioError(where, "priority", f"must be between 1 and 9, got {priority}")
        spec_fields: dict[str, Any] = {
            "quota": quota,
            "workspace": workspace,
            "kind": kind,
            "gpus": gpus,
            "replicas": replicas,
            "min_replicas": min_replicas,
            "priority": priority,
            "preemptible": _optional(entry, "preemptible", lambda v: _boolean(v, where, "preemptible")),
            "cpu": _number(entry.get("cpu", 0), where, "cpu"),
            "memory_gib": _number(entry.get("memory_gib", 0), where, "memory_gib"),
            "command": _string(entry.get("command", ""), where, "command", allow_empty=True),
            "duration": _optional(entry, "duration", lambda v: _number(v, where, "duration")),
            "grace_seconds": _number(entry.get("grace_seconds", 0), where, "grace_seconds"),
            "requeue": _boolean(entry.get("requeue", True), where, "requeue"),
        }
        names = [name] if count is None else [f"{name}-{n}" for n in range(1, count + 1)]
        jobs: list[JobSpec] = []
        for job_name in names:
            if job_name in self.job_steps:
                raise ScenarioError(
                    where,
                    "name",
                    f"duplicate job name {job_name!r} (first submitted in step {self.job_steps[job_name]})",
                )
            self.job_steps[job_name] = number
            jobs.append(JobSpec(name=job_name, **spec_fields))
        return tuple(jobs)

    def known_quota(self, name: str, where: str, field_name: str) -> str:
        if name not in self.quota_names:
            raise ScenarioError(where, field_name, f"unknown quota {name!r}")
        return name

    def workspace_for(self, raw: object, quota: str, where: str) -> str:
        """The named workspace, or the first one bound to the job's quota."""
        if raw is None:
            for workspace, bound in self.workspace_quotas.items():
                if quota in bound:
                    return workspace
            raise ScenarioError(where, "workspace", f"no workspace is bound to quota {quota!r}; name one")
        workspace = _string(raw, where, "workspace")
        if workspace not in self.workspace_quotas:
            raise ScenarioError(where, "workspace", f"unknown workspace {workspace!r}")
        if quota not in self.workspace_quotas[workspace]:
            raise ScenarioError(where, "quota", f"quota {quota!r} is not bound to workspace {workspace!r}")
        return workspace


# ---------------------------------------------------------------------------------------------
# Field checks: each names the field and shows the value it got


def _show(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, str) else str(value)


def _mapping(value: object, where: str, field_name: str | None, expected: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ScenarioError(where, field_name, f"must be {expected}, got {_show(value)}")
    return value


def _list(value: object, where: str, field_name: str, *, required: bool) -> list[Any]:
    if value is None and not required:
        return []
    if not isinstance(value, list):
        raise ScenarioError(where, field_name, f"must be a list, got {_show(value)}")
    return value


def _known_keys(entry: Mapping[str, Any], where: str, known: Sequence[str]) -> None:
    for key in entry:
        if key not in known:
            raise ScenarioError(where, str(key), f"unknown field; known: {', '.join(known)}")


def _string(value: object, where: str, field_name: str, *, allow_empty: bool = False) -> str:
    if value is None and not allow_empty:
        raise ScenarioError(where, field_name, "is required")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ScenarioError(where, field_name, f"must be a string, got {_show(value)}")
    text = str(value)
    if not text and not allow_empty:
        raise ScenarioError(where, field_name, "must not be empty")
    return text


def _number(value: object, where: str, field_name: str) -> float:
    """A finite amount ≥ 0 (GPU, CPU, memory, seconds): negative amounts are refused here."""
    if value is None:
        raise ScenarioError(where, field_name, "is required")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(where, field_name, f"must be a number, got {_show(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ScenarioError(where, field_name, f"must be a finite number, got {_show(value)}")
    if number < 0:
        raise ScenarioError(where, field_name, f"must be ≥ 0, got {_show(number)}")
    return number


def _integer(value: object, where: str, field_name: str, *, minimum: int) -> int:
    if value is None:
        raise ScenarioError(where, field_name, "is required")
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer():
        raise ScenarioError(where, field_name, f"must be a whole number, got {_show(value)}")
    if value < minimum:
        raise ScenarioError(where, field_name, f"must be ≥ {minimum}, got {_show(value)}")
    return int(value)


def _signed_integer(value: object, where: str, field_name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer():
        raise ScenarioError(where, field_name, f"must be a whole number, got {_show(value)}")
    return int(value)


def _boolean(value: object, where: str, field_name: str) -> bool:
    if not isinstance(value, bool):
        raise ScenarioError(where, field_name, f"must be true or false, got {_show(value)}")
    return value


def _choice(value: object, where: str, field_name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ScenarioError(where, field_name, f"must be one of {', '.join(choices)}, got {_show(value)}")
    return str(value)


def _optional(entry: Mapping[str, Any], key: str, convert: Any) -> Any:
    value = entry.get(key)
    return None if value is None else convert(value)


def _quota_fields(entry: Mapping[str, Any], where: str, *, nullable: bool = False) -> dict[str, Any]:
    """The quota fields present in `entry`, typed; `nullable` lets a set step clear limit/weight."""
    fields: dict[str, Any] = {}
    clearable = ("cpu", "memory_gib", "limit", "weight", "min_runtime_seconds")
    for key in SETTABLE_QUOTA_FIELDS:
        if key not in entry:
            continue
        value = entry[key]
        if value is None:
            if not (nullable and key in clearable):
                raise ScenarioError(where, key, "must not be empty")
            fields[key] = None
        elif key in ("gpus", "cpu", "memory_gib", "limit", "weight"):
            fields[key] = _number(value, where, key)
        elif key == "rank":
            fields[key] = _signed_integer(value, where, key)
        elif key == "min_runtime_seconds":
            fields[key] = _integer(value, where, key, minimum=0)
        elif key == "queue_policy":
            fields[key] = _choice(value, where, key, QUEUE_POLICIES)
        else:
            fields[key] = _boolean(value, where, key)
    return fields


def iter_jobs(scenario: Scenario) -> Iterator[JobSpec]:
    for step in scenario.steps:
        if isinstance(step, SubmitStep):
            yield from step.jobs


# ---------------------------------------------------------------------------------------------
# Playing a scenario through the console's own services and cycle

SIMULATION_START: Final = datetime(2025, 1, 1, tzinfo=UTC)
SIMULATE_USERNAME: Final = "simulate"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The state at a `checkpoint` step, in the keys SCENARIOS.md fixes (more may be added)."""

    name: str
    time: float
    quotas: dict[str, dict[str, Any]]
    jobs: dict[str, dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        return {"checkpoint": self.name, "time": _figure(self.time), "quotas": self.quotas, "jobs": self.jobs}


def _figure(value: float) -> float | int:
    """GPU figures are numbers; whole ones print without a trailing .0."""
    rounded = round(value, 6)
    return int(rounded) if float(rounded).is_integer() else rounded


def _scenario_error(where: str, error: ValidationError | PermissionDenied) -> ScenarioError:
    """A service's refusal, told like a parse error: the step (or object) and the field."""
    if isinstance(error, PermissionDenied):
        return ScenarioError(where, None, str(error) or "not allowed")
    if hasattr(error, "error_dict"):
        field_name, messages = next(iter(error.message_dict.items()))
        return ScenarioError(where, None if field_name == NON_FIELD_ERRORS else field_name, " ".join(messages))
    return ScenarioError(where, None, " ".join(error.messages))


class InProcessCycleLock:
    """The cycle lock of a simulation: its database is private, so a lock in this process is
    enough, and simulate needs no Redis and never contends with a running console's lock."""

    backend = "in-process"

    def __init__(self) -> None:
        self._mutex = threading.Lock()

    def acquire(self, *, wait_seconds: float = 0.0) -> CycleLease | None:
        if not self._mutex.acquire(timeout=wait_seconds if wait_seconds > 0 else -1):
            return None
        try:
            return CycleLease(token=issue_token(), holder=holder_name(), backend=self.backend)
        except BaseException:
            self._mutex.release()
            raise

    def release(self, lease: CycleLease) -> None:
        self._mutex.release()

    def holder(self) -> str | None:
        return "simulate" if self._mutex.locked() else None


class ScenarioRunner:
    """Plays one scenario on the connected database, on a simulated clock.

    Everything goes through the services the console uses (quota, workspace and job services,
    the cycle, the simulated executor); after each step the scheduler converges.
    """

    def __init__(self, scenario: Scenario, *, clock: SimulatedClock, max_cycles: int = 50) -> None:
        self.scenario = scenario
        self.clock = clock
        self.start = clock.now()
        self.max_cycles = max_cycles
        self.cycles = 0
        self.actor: AbstractUser | None = None
        self.quotas: dict[str, Quota] = {}
        self.nodes: dict[str, Node] = {}
        self.workspaces: dict[str, Workspace] = {}
        self.jobs: dict[str, int] = {}
        self.lock = InProcessCycleLock()

    # -- setting up the cluster ---------------------------------------------------------------

    def set_up(self) -> None:
        user_model = get_user_model()
        self.actor = user_model.objects.create_superuser(username=SIMULATE_USERNAME, email="", password=None)
        with transaction.atomic():
            self.set_up_cluster()
        self.converge()

    def set_up_cluster(self) -> None:
        # The quota services have no pool writer (one default pool); its placement is the
        # one setting a scenario gives the pool, so it is written here before any node.
        pool, _ = ResourcePool.objects.update_or_create(
            name=ResourcePool.DEFAULT_NAME, defaults={"placement": self.scenario.placement}
        )
        # All nodes in one service call (one insert of nodes, one of devices); if it refuses,
        # they are created one by one instead, so that the refusal names the first bad node.
        try:
            with transaction.atomic():
                nodes = quota_services.create_nodes(
                    actor=self.actor,
                    pool=pool,
                    nodes=self.scenario.nodes,
                )
        except (ValidationError, PermissionDenied):
            self.create_nodes_one_by_one(pool)
        else:
            self.nodes.update({node.name: node for node in nodes})
        # The whole tree in one service call (one lock, one validation, one insert per level);
        # if it refuses, the quotas are created one by one instead, so that the refusal names the
        # first quota that breaks a rule, exactly as before.
        try:
            with transaction.atomic():
                created = quota_services.create_quota_tree(
                    actor=self.actor,
                    pool=pool,
                    quotas=[
                        quota_services.NewQuota(
                            name=spec.name,
                            parent=spec.parent,
                            gpus=spec.gpus,
                            **{
                                name: getattr(spec, name)
                                for name in SETTABLE_QUOTA_FIELDS
                                if name != "gpus" and getattr(spec, name) is not None
                            },
                        )
                        for spec in self.scenario.quotas
                    ],
                )
        except (ValidationError, PermissionDenied):
            self.create_quotas_one_by_one(pool)
        else:
            self.quotas.update({quota.name: quota for quota in created})
        for workspace_spec in self.scenario.workspaces:
            try:
                self.workspaces[workspace_spec.name] = workspace_services.create_workspace(
                    actor=self.actor,
                    name=workspace_spec.name,
                    description=workspace_spec.description,
                    quotas=[self.quotas[name] for name in workspace_spec.quotas],
                )
            except (ValidationError, PermissionDenied) as error:
                raise _scenario_error(f"workspace {workspace_spec.name!r}", error) from None

    def create_nodes_one_by_one(self, pool: ResourcePool) -> None:
        for spec in self.scenario.nodes:
            try:
                node = quota_services.create_node(actor=self.actor, pool=pool, **asdict(spec))
            except (ValidationError, PermissionDenied) as error:
                raise _scenario_error(f"node {spec.name!r}", error) from None
            self.nodes[spec.name] = node

    def create_quotas_one_by_one(self, pool: ResourcePool) -> None:
        for quota_spec in self.scenario.quotas:
            options = {
                name: getattr(quota_spec, name)
                for name in SETTABLE_QUOTA_FIELDS
                if name != "gpus" and getattr(quota_spec, name) is not None
            }
            try:
                quota = quota_services.create_quota(
                    actor=self.actor,
                    name=quota_spec.name,
                    parent=self.quotas[quota_spec.parent] if quota_spec.parent else None,
                    gpus=quota_spec.gpus,
                    pool=pool,
                    **options,
                )
            except (ValidationError, PermissionDenied) as error:
                raise _scenario_error(f"quota {quota_spec.name!r}", error) from None
            assert isinstance(quota, Quota)
            self.quotas[quota_spec.name] = quota

    # -- steps --------------------------------------------------------------------------------

    def play(self, on_checkpoint: Callable[[Checkpoint], None] | None = None) -> list[Checkpoint]:
        self.set_up()
        checkpoints: list[Checkpoint] = []
        for step in self.scenario.steps:
            checkpoint = self.run_step(step)
            if checkpoint is not None:
                checkpoints.append(checkpoint)
                if on_checkpoint is not None:
                    on_checkpoint(checkpoint)
        return checkpoints

    def run_step(self, step: Step) -> Checkpoint | None:
        if isinstance(step, CheckpointStep):
            return self.checkpoint(step.name)
        if isinstance(step, AdvanceStep):
            self.advance(step.seconds)
            return None
        try:
            self.apply(step)
        except (ValidationError, PermissionDenied) as error:
            raise _scenario_error(step_label(step), error) from None
        self.converge()
        return None

    def apply(self, step: Step) -> None:
        actor = self.actor
        if isinstance(step, SubmitStep):
            # One bulk submit per burst: a thousand jobs commit at once (three inserts), as a
            # burst of API calls coalesces into one cycle request in the console.
            submitted = job_services.submit_jobs(actor=None, submissions=[self.submission(job) for job in step.jobs])
            self.jobs.update({job.name: job.pk for job in submitted})
        elif isinstance(step, EndJobStep):
            ended = Job.objects.get(pk=self.jobs[step.job])
            if step.action == "cancel":
                job_services.cancel_job(actor=None, job=ended)
            elif step.action == "finish":
                job_services.finish_job(job=ended, succeeded=True, message="finished by the scenario")
            else:
                job_services.fail_job(job=ended, message="failed by the scenario")
        elif isinstance(step, TransferStep):
            quota_services.transfer_quota(
                actor=actor, source=self.quota(step.source), target=self.quota(step.target), gpus=step.gpus
            )
        elif isinstance(step, ScaleStep):
            amounts = {k: getattr(step, k) for k in ("gpus", "cpu", "memory_gib") if getattr(step, k) is not None}
            quota_services.scale_quota(actor=actor, quota=self.quota(step.quota), **amounts)
        elif isinstance(step, SetStep):
            quota_services.update_quota(actor=actor, quota=self.quota(step.quota), **dict(step.changes))
        elif isinstance(step, NodeStateStep):
            node = Node.objects.get(pk=self.nodes[step.node].pk)
            state = NodeState.NOT_READY if step.action == "node_down" else NodeState.READY
            quota_services.set_node_state(actor=actor, node=node, state=state)

    def submission(self, spec: JobSpec) -> job_services.JobSubmission:
        return job_services.JobSubmission(
            workspace=self.workspaces[spec.workspace], quota=self.quotas[spec.quota], **spec.shape()
        )

    def quota(self, name: str) -> Quota:
        """Fresh from the database: an earlier step may have changed it."""
        return Quota.objects.get(pk=self.quotas[name].pk)

    # -- time ---------------------------------------------------------------------------------

    def converge(self) -> None:
        """Cycles (each with its executor tick) until one changes nothing, as `services.converge`
        does, but under this run's own lock: a console cycling next door is never waited for."""
        with triggers.paused():
            for _ in range(self.max_cycles):
                outcome = job_services.run_cycle(trigger="simulate", lock=self.lock)
                self.cycles += 1
                if outcome.committed and not outcome.changed:
                    return
                if not outcome.committed:
                    raise RuntimeError(
                        f"a simulated cycle was refused ({outcome.refused}); nothing else holds its lock"
                    )
        raise ScenarioError(
            "scenario", None, f"the scheduler did not settle within {self.max_cycles} cycles after a step"
        )

    def advance(self, seconds: float) -> None:
        """Move the clock event by event (a job ends, a grace period or a min runtime runs out),
        converging at each, so that a job started within the advance also runs its course."""
        target = self.clock.now() + timedelta(seconds=seconds)
        while True:
            upcoming = self.next_event()
            if upcoming is None or upcoming > target:
                break
            self.clock.advance(max(0.0, (upcoming - self.clock.now()).total_seconds()))
            self.converge()
        self.clock.advance(max(0.0, (target - self.clock.now()).total_seconds()))
        self.converge()

    def next_event(self) -> datetime | None:
        now = self.clock.now()
        moments: list[datetime] = []
        for started_at, duration in Job.objects.filter(
            state=JobState.RUNNING, duration__isnull=False, started_at__isnull=False
        ).values_list("started_at", "duration"):
            if started_at is not None and duration is not None:
                moments.append(started_at + timedelta(seconds=duration))
        for release_at in Job.objects.filter(state=JobState.RELEASING).values_list("release_at", flat=True):
            if release_at is not None:
                moments.append(release_at)
        if Job.objects.filter(state=JobState.PENDING).exists():
            # A running job past its min runtime becomes a possible victim for a waiting job.
            min_runtime = self.min_runtimes()
            for started_at, quota_id in Job.objects.filter(
                state=JobState.RUNNING, preemptible=True, started_at__isnull=False
            ).values_list("started_at", "quota_id"):
                if started_at is not None and min_runtime.get(quota_id):
                    moments.append(started_at + timedelta(seconds=min_runtime[quota_id]))
        future = [moment for moment in moments if moment > now]
        # A moment already due (a job that should have ended) is handled by the next converge.
        return min(future) if future else None

    def min_runtimes(self) -> dict[int, float]:
        """Each quota's min runtime, inherited from the nearest ancestor that sets one."""
        rows = {row[0]: row for row in Quota.objects.values_list("id", "parent_id", "min_runtime_seconds")}
        resolved: dict[int, float] = {}

        def resolve(quota_id: int) -> float:
            if quota_id not in resolved:
                _, parent_id, own = rows[quota_id]
                resolved[quota_id] = float(own) if own is not None else (resolve(parent_id) if parent_id else 0.0)
            return resolved[quota_id]

        for quota_id in rows:
            resolve(quota_id)
        return resolved

    # -- reading the state --------------------------------------------------------------------

    def checkpoint(self, name: str) -> Checkpoint:
        quotas = list(Quota.objects.order_by("id"))
        status = quota_hooks.quota_status(quotas)
        quota_figures: dict[str, dict[str, Any]] = {}
        for quota in quotas:
            figures = status[quota.pk]
            quota_figures[quota.name] = {
                "guaranteed": _figure(quota.gpus),
                "fair_share": _figure(figures["fair_share"]),
                "allocated": _figure(figures["allocated"]),
                "allocated_self": _figure(figures["allocated_self"]),
                "running": figures["running"],
                "pending": figures["pending"],
            }
        # Every job of the private database is one of the scenario's, so no id filter (a list
        # of 10,000 ids is more than SQLite parses); three queries whatever the size.
        by_pk = {pk: name for name, pk in self.jobs.items()}
        nodes_of: dict[int, dict[int, str]] = defaultdict(dict)
        for job_id, node_id, node_name in ReplicaPlacementRecord.objects.values_list("job_id", "node_id", "node__name"):
            nodes_of[job_id][node_id] = node_name
        job_figures: dict[str, dict[str, Any]] = {}
        for row in Job.objects.order_by("id").values(
            "id",
            "state",
            "quota__name",
            "allocated_gpus",
            "running_replicas",
            "preemptions",
            "reason_code",
            "reason_message",
            "position",
        ):
            if row["id"] not in by_pk:
                continue
            waiting = row["state"] == JobState.PENDING and row["reason_code"]
            job_figures[by_pk[row["id"]]] = {
                "state": row["state"],
                "quota": row["quota__name"],
                "gpus": _figure(row["allocated_gpus"]),
                "replicas": row["running_replicas"],
                "nodes": [name for _, name in sorted(nodes_of.get(row["id"], {}).items())],
                "preemptions": row["preemptions"],
                "reason": (
                    {"code": row["reason_code"], "message": row["reason_message"], "position": row["position"]}
                    if waiting
                    else None
                ),
            }
        elapsed = (self.clock.now() - self.start).total_seconds()
        return Checkpoint(name=name, time=elapsed, quotas=quota_figures, jobs=job_figures)


def play(
    scenario: Scenario,
    *,
    on_checkpoint: Callable[[Checkpoint], None] | None = None,
    start: datetime = SIMULATION_START,
) -> list[Checkpoint]:
    """Play the scenario on the connected database (see `throwaway_database`) and a simulated clock."""
    clock = SimulatedClock(start)
    with use_clock(clock):
        return ScenarioRunner(scenario, clock=clock).play(on_checkpoint)


@contextmanager
def throwaway_database() -> Iterator[None]:
    """Point the default connection at a private in-memory SQLite database for the block.

    The console's own database (SQLite file or PostgreSQL) is never opened. Cycle triggers
    are off (the runner converges after each step itself) and no websocket event is
    published, so neither the console's worker nor its live pages hear of simulated jobs.
    """
    alias = DEFAULT_DB_ALIAS
    previous_settings = connections.settings[alias]
    previous_connection = connections[alias]
    private = ConnectionHandler().configure_settings(
        {
            alias: {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": f"file:simulate-{uuid4().hex}?mode=memory&cache=shared",
            }
        }
    )[alias]
    connections.settings[alias] = private
    connection = connections.create_connection(alias)
    connections[alias] = connection
    try:
        with override_settings(SCHEDULER_TRIGGER="none", SCHEDULER_PUBLISH_EVENTS=False):
            # Tables straight from the models, as Django's test runner does with MIGRATE off:
            # 0.3 s instead of ~3 s of rendering every migration's state. post_migrate still
            # runs (content types, permissions); the one data migration (the fence row) is
            # ensure_fence's to repeat.
            with override_settings(MIGRATION_MODULES={app.label: None for app in apps.get_app_configs()}):
                call_command("migrate", database=alias, run_syncdb=True, verbosity=0, interactive=False)
            ensure_fence()
            yield
    finally:
        connection.close()
        connections[alias] = previous_connection
        connections.settings[alias] = previous_settings


# ---------------------------------------------------------------------------------------------
# Human-readable output


def format_checkpoint(checkpoint: Checkpoint) -> str:
    """One table of quotas and one of jobs, as a person reads them in a terminal."""
    lines = [f"== checkpoint {checkpoint.name} at t={_show(float(checkpoint.time))}s =="]
    quota_rows = [
        [
            name,
            *(_show(float(f[key])) for key in ("guaranteed", "fair_share", "allocated", "allocated_self")),
            str(f["running"]),
            str(f["pending"]),
        ]
        for name, f in checkpoint.quotas.items()
    ]
    lines += _table(
        ["quota", "guaranteed", "fair_share", "allocated", "allocated_self", "running", "pending"], quota_rows
    )
    lines.append("")
    job_rows = []
    for name, f in checkpoint.jobs.items():
        reason = f["reason"]
        why = f"{reason['code']} (#{reason['position']}): {reason['message']}" if reason else ""
        job_rows.append(
            [
                name,
                f["state"],
                f["quota"],
                _show(float(f["gpus"])),
                str(f["replicas"]),
                ",".join(f["nodes"]),
                str(f["preemptions"]),
                why,
            ]
        )
    lines += _table(["job", "state", "quota", "gpus", "replicas", "nodes", "preemptions", "reason"], job_rows)
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]

    def render(cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    return [render(header), render(["-" * width for width in widths]), *(render(row) for row in rows)]
