"""Scenario files (docs/scenarios/, SCENARIOS.md) as frozen dataclasses: what `parse` reads,
`run` plays and `output` prints. A bad file is refused before anything is written, with one
sentence (`ScenarioError`) that names where (the step, or the quota / node / workspace) and the field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from quotas import services as quota_services
from scheduling import services as job_services

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
    cpu_limit: float | None = None
    memory_gib_limit: float | None = None
    weight: float | None = None
    rank: int = 0
    child_preemption: bool = False
    same_level_preemption: bool = False
    queue_policy: str = "best_effort"
    min_runtime_seconds: int | None = None
    pool: str | None = None  # a root's pool when the scenario lists `pools:`; a child has its root's


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """One pool of a scenario's `pools:` list (SCENARIOS.md, "Several pools")."""

    name: str
    placement: str = "pack"


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
    # `pools:`: the pools, and each node's pool by node name; empty: one default pool.
    pools: tuple[PoolSpec, ...] = ()
    node_pools: dict[str, str] = field(default_factory=dict)


def step_label(step: Step) -> str:
    return f"step {step.number} ({step.action})"


def iter_jobs(scenario: Scenario) -> Iterator[JobSpec]:
    for step in scenario.steps:
        if isinstance(step, SubmitStep):
            yield from step.jobs


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The state at a `checkpoint` step, in the keys SCENARIOS.md fixes (more may be added)."""

    name: str
    time: float
    quotas: dict[str, dict[str, Any]]
    jobs: dict[str, dict[str, Any]]

    def as_json(self) -> dict[str, Any]:
        return {"checkpoint": self.name, "time": figure(self.time), "quotas": self.quotas, "jobs": self.jobs}


def figure(value: float) -> float | int:
    """GPU figures are numbers; whole ones print without a trailing .0."""
    rounded = round(value, 6)
    return int(rounded) if float(rounded).is_integer() else rounded


def show(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, str) else str(value)
