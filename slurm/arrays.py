"""A wave's replicas on one node as one Slurm job array: its batch script and its task ids.

Plain Python (no Django). Each replica is one task; the script runs the task's own lines, chosen
by SLURM_ARRAY_TASK_ID, so one `sbatch` carries every replica's command and environment
(slurm.submitting says why arrays).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ArrayTask:
    """One replica as one task of a job array: what its shell runs, with which variables, and
    where it writes the GPU indices Slurm bound (empty: nowhere)."""

    command: str
    environment: Mapping[str, str]
    devices_file: str = ""


def task_script(task: ArrayTask) -> str:
    """One task's shell lines. With `devices_file`, the first writes there the GPU indices Slurm
    bound (`SLURM_JOB_GPUS`): the console learns them without asking slurmctld for each job."""
    lines = []
    if task.devices_file:
        lines.append(f"printf '%s\\n' \"${{SLURM_JOB_GPUS-}}\" 2>/dev/null >{shlex.quote(task.devices_file)}")
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(task.environment.items())]
    lines.append(task.command)
    return "\n".join(lines)


def array_indices(tasks: Mapping[int, ArrayTask]) -> str:
    """sbatch's --array for these task ids: `0-7`, or a list when some are missing (`0,2-3`)."""
    spans: list[list[int]] = []
    for index in sorted(tasks):
        if spans and index == spans[-1][1] + 1:
            spans[-1][1] = index
        else:
            spans.append([index, index])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in spans)


def array_script(tasks: Mapping[int, ArrayTask]) -> str:
    """The batch script of a job array: each task's lines, chosen by SLURM_ARRAY_TASK_ID and run by
    `eval` in the script's own shell (quoted whole, a command may hold anything, `;;` and `esac`
    too; `exec` in it replaces the shell as it did in a script of its own)."""
    lines = ["#!/bin/sh", 'case "${SLURM_ARRAY_TASK_ID-}" in']
    lines += [f"{index}) eval {shlex.quote(task_script(task))} ;;" for index, task in sorted(tasks.items())]
    lines += ['*) echo "no replica for array task ${SLURM_ARRAY_TASK_ID-}" >&2; exit 1 ;;', "esac"]
    return "\n".join(lines) + "\n"


def array_output(output_pattern: str, task: int) -> str:
    """The output file of one task of an array submitted with `output_pattern` (Slurm's `%a`)."""
    return output_pattern.replace("%a", str(task))


__all__ = ["ArrayTask", "array_indices", "array_output", "array_script", "task_script"]
