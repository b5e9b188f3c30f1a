"""A job's environment and image: the rules every way in (API, Submit job, scenarios) meets.

The environment is name=value pairs the node agent sets in each replica's process, under the
variables the console and the agent set themselves (AGENT.md "Start"): a job may not name those,
since the GPUs a replica may touch and the share of one it may use must stay the scheduler's.
The image is kept and shown for executors that run containers; the process agent runs the
command on the host and does not read it. Plain Python (no Django), like quotas.bounds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from quotas import bounds

# What the agent sets for a replica (gqc/agent.py) and what a container runtime reads to pick
# devices: a job setting one would reach GPUs or a share it was not given.
RESERVED_NAMES: Final = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "GPU_QUOTA_FRACTION",
        "GPU_QUOTA_MEMORY_MIB",
        "NVIDIA_VISIBLE_DEVICES",
    }
)
# The console names the job, its quota and the replica's rank with these (agent_beat.replica_environment).
RESERVED_PREFIX: Final = "GQC_"

NAME_PATTERN: Final = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{bounds.JOB_ENV_NAME_MAX_LENGTH - 1}}}")
# An OCI image reference's characters (registry host and port, path, tag, digest); the registry
# judges the rest when an executor pulls it.
IMAGE_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*")


def environment_errors(environment: Any) -> list[str]:
    """Every way `environment` breaks the rules, one sentence each naming the variable; [] if none."""
    if not isinstance(environment, Mapping):
        return [f"environment is an object of NAME: value, got {type(environment).__name__}"]
    errors: list[str] = []
    if len(environment) > bounds.JOB_ENV_VARIABLES_MAX:
        errors.append(f"at most {bounds.JOB_ENV_VARIABLES_MAX} variables, got {len(environment)}")
    for name, value in environment.items():
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            errors.append(
                f"{str(name)[:40]!r} is not a variable name: a letter or _, then letters, digits or _, "
                f"at most {bounds.JOB_ENV_NAME_MAX_LENGTH} characters"
            )
        elif name in RESERVED_NAMES or name.startswith(RESERVED_PREFIX):
            errors.append(
                f"{name} is set by the node agent for each replica (the GPUs and share the scheduler "
                f"gave it; {RESERVED_PREFIX}* names the job): a job may not set it"
            )
        if not isinstance(value, str):
            errors.append(f"{str(name)[:40]}: a value is text, got {type(value).__name__}")
        elif len(value) > bounds.JOB_ENV_VALUE_MAX_LENGTH:
            errors.append(
                f"{str(name)[:40]}: a value has at most {bounds.JOB_ENV_VALUE_MAX_LENGTH:,} characters, "
                f"got {len(value):,}"
            )
        elif "\x00" in value:
            errors.append(f"{str(name)[:40]}: a value cannot hold a NUL character (no process could receive it)")
        elif "\n" in value or "\r" in value:
            # The Submit job form and "Submit again" write one variable a line.
            errors.append(f"{str(name)[:40]}: a value is one line, without line breaks")
    return errors


def image_error(image: str) -> str | None:
    """Why `image` is not an image reference, or None ("" is no image: the executor's own)."""
    if len(image) > bounds.JOB_IMAGE_MAX_LENGTH:
        return f"an image reference has at most {bounds.JOB_IMAGE_MAX_LENGTH} characters, got {len(image):,}"
    if image and not IMAGE_PATTERN.fullmatch(image):
        return (
            f"{image[:60]!r} is not an image reference: letters, digits and . _ / : @ + - only, "
            "starting with a letter or digit (registry/name:tag)"
        )
    return None


def parse_assignments(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    """NAME=value lines (the Submit job form's box, `gqc submit --env`) as a mapping, and the
    lines that are not assignments or repeat a name; blank lines are skipped. Only the first `=`
    splits, so a value may hold more."""
    environment: dict[str, str] = {}
    errors: list[str] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        name = name.strip()
        if not equals or not name:
            errors.append(f"line {number}: {line.strip()[:40]!r} is not NAME=value")
        elif name in environment:
            errors.append(f"line {number}: {name} is set twice")
        else:
            environment[name] = value
    return environment, errors
