"""`manage.py simulate`: scenario files (docs/scenarios/, SCENARIOS.md) parsed, played and printed.

- `scenario`: the frozen dataclasses a file is read into, and `ScenarioError`;
- `parse`: YAML (or a document built in Python) to a `Scenario`, refused before anything is written;
- `run`: `play` through the console's own services and cycle, on a `throwaway_database()`
  (`database`);
- `output`: a checkpoint as tables for a terminal.
"""

from __future__ import annotations

from scheduling.simulate.cycle_lock import InProcessCycleLock
from scheduling.simulate.database import throwaway_database
from scheduling.simulate.output import format_checkpoint
from scheduling.simulate.parse import load_scenario, parse_document, parse_scenario
from scheduling.simulate.run import (
    SIMULATE_USERNAME,
    SIMULATION_START,
    ScenarioRunner,
    play,
)
from scheduling.simulate.scenario import (
    END_ACTIONS,
    KINDS,
    NODE_ACTIONS,
    PLACEMENTS,
    QUEUE_POLICIES,
    SETTABLE_QUOTA_FIELDS,
    STEP_ACTIONS,
    AdvanceStep,
    Checkpoint,
    CheckpointStep,
    EndJobStep,
    JobSpec,
    NodeStateStep,
    QuotaSpec,
    ScaleStep,
    Scenario,
    ScenarioError,
    SetStep,
    Step,
    SubmitStep,
    TransferStep,
    WorkspaceSpec,
    iter_jobs,
    step_label,
)

__all__ = [
    "END_ACTIONS",
    "KINDS",
    "NODE_ACTIONS",
    "PLACEMENTS",
    "QUEUE_POLICIES",
    "SETTABLE_QUOTA_FIELDS",
    "SIMULATE_USERNAME",
    "SIMULATION_START",
    "STEP_ACTIONS",
    "AdvanceStep",
    "Checkpoint",
    "CheckpointStep",
    "EndJobStep",
    "InProcessCycleLock",
    "JobSpec",
    "NodeStateStep",
    "QuotaSpec",
    "ScaleStep",
    "Scenario",
    "ScenarioError",
    "ScenarioRunner",
    "SetStep",
    "Step",
    "SubmitStep",
    "TransferStep",
    "WorkspaceSpec",
    "format_checkpoint",
    "iter_jobs",
    "load_scenario",
    "parse_document",
    "parse_scenario",
    "play",
    "step_label",
    "throwaway_database",
]
