"""Every size a client may send, in one place: services refuse beyond them, serializers publish
them in the OpenAPI schema (`maximum`, `maxLength`, `maxItems`), so clients and fuzzers see the
same numbers the code enforces.

Plain Python, so every layer (the API, the services, the scenario parser) can import it. Each
bound is far above anything real and far below what would take a process down: a node with
10^9 GPUs once cost 23 GB of memory before a single row was written.
"""

from __future__ import annotations

import math
from typing import Final

# Names and free text.
NAME_MAX_LENGTH: Final = 100  # quotas, nodes, workspaces, roles (the columns' own width)
JOB_NAME_MAX_LENGTH: Final = 200
DESCRIPTION_MAX_LENGTH: Final = 2_000
COMMAND_MAX_LENGTH: Final = 10_000
GPU_MODEL_MAX_LENGTH: Final = 100

# A node: the largest real servers hold 16 GPUs; 64 leaves room for what comes next.
NODE_GPUS_MAX: Final = 64
NODE_CPU_MAX: Final = 4_096.0
NODE_MEMORY_GIB_MAX: Final = 65_536.0
NODE_LABELS_MAX: Final = 64
LABEL_KEY_MAX_LENGTH: Final = 100
LABEL_VALUE_MAX_LENGTH: Final = 200

# A quota: a million GPUs is above any pool there is.
QUOTA_GPUS_MAX: Final = 1_000_000.0
QUOTA_CPU_MAX: Final = 100_000_000.0
QUOTA_MEMORY_GIB_MAX: Final = 1_000_000_000.0
QUOTA_WEIGHT_MAX: Final = 10_000.0
QUOTA_RANK_MAX: Final = 1_000_000
MIN_RUNTIME_SECONDS_MAX: Final = 31_536_000  # a year

# A job (issue 14): per replica, as the engine counts it.
JOB_GPUS_MAX: Final = 10_000.0
JOB_GPU_DECIMALS: Final = 3  # a thousandth of a device is the finest share
JOB_REPLICAS_MAX: Final = 100_000
JOB_CPU_MAX: Final = NODE_CPU_MAX  # a replica runs on one node
JOB_MEMORY_GIB_MAX: Final = NODE_MEMORY_GIB_MAX
JOB_DURATION_MAX: Final = 31_536_000.0  # a year, in seconds
GRACE_SECONDS_MAX: Final = 86_400.0  # a day
# A job's environment (name=value pairs the agent sets in each replica's process) and its image
# (kept for executors that run containers). 64 × 4 KiB stays far below Linux's 2 MiB for a
# process's arguments and environment together, and one value below its 128 KiB per string.
JOB_ENV_VARIABLES_MAX: Final = 64
JOB_ENV_NAME_MAX_LENGTH: Final = 128
JOB_ENV_VALUE_MAX_LENGTH: Final = 4_096
JOB_IMAGE_MAX_LENGTH: Final = 512  # an OCI reference: registry/name:tag@sha256:digest

# Workspace rules.
RULES_MAX: Final = 100
RULE_ROLES_MAX: Final = 100
RULE_USERS_MAX: Final = 1_000
RULE_CAPS_MAX: Final = 9  # one per priority at most
CAP_GPUS_MAX: Final = QUOTA_GPUS_MAX
ROLE_PERMISSIONS_MAX: Final = 10

# The node agent's reports (AGENT.md): a beat carries at most this much, whatever the host runs.
AGENT_PROCESSES_MAX: Final = 1_024  # processes one agent reports in one beat
AGENT_DEVICE_UUID_MAX_LENGTH: Final = 100
AGENT_VERSION_MAX_LENGTH: Final = 40  # NodeAgent.version's column
AGENT_DEVICE_MEMORY_MIB_MAX: Final = 10_000_000
AGENT_LOG_LINES_PER_BEAT: Final = 200  # new lines of one process's output per beat
AGENT_LOG_LINE_MAX_LENGTH: Final = 2_000
AGENT_LOG_LINES_KEPT: Final = 500  # the tail the console keeps per job
AGENT_SAMPLES_MAX: Final = 1_024  # utilisation samples per beat, all GPUs together
AGENT_PID_MAX: Final = 4_194_304  # Linux's pid_max ceiling
AGENT_EXIT_CODE_MIN: Final = -255  # a negative code is the signal that ended the process
AGENT_EXIT_CODE_MAX: Final = 255

# The most rows one page of a list may ask for (`?limit=`).
PAGE_SIZE_MAX: Final = 1_000
OFFSET_MAX: Final = 1_000_000_000


def decimals(amount: float) -> int:
    """How many decimals a person wrote: 0.125 → 3, 0.1 → 1, 2.0 → 0 (floats' noise ignored)."""
    if not math.isfinite(amount):
        return 0
    text = f"{amount:.12f}".rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


def readable(amount: float) -> str:
    """A number for a person: 1,000,000,000 rather than 1e+09; 0.125 stays 0.125."""
    if not math.isfinite(amount):
        return str(amount)
    if float(amount).is_integer():
        return f"{int(amount):,}"
    return f"{amount:,.3f}".rstrip("0").rstrip(".")
