"""The GPU host check (benchmarks/agent_gpu_check.py) runs where there is no GPU too, on stand-in
devices: a whole console, a real agent (its own, or the one the launcher starts for
CONSOLE_LOCAL_AGENT), four jobs as real processes. On a GPU host the same script is the issue's
device check (docs/agent-gpu-check.md); this keeps it runnable for the next host that is lent.
Each runs from a copy of the working tree: the launcher keeps its local agent's token and state
under var/, which must not be the developer's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.embedded_redis import free_port
from tests.checkout import fresh_checkout

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("agent", [[], ["--local-agent"]], ids=["its-own-agent", "the-launchers-local-agent"])
def test_the_gpu_host_check_passes_on_stand_in_devices(tmp_path: Path, agent: list[str]) -> None:
    checkout = fresh_checkout(tmp_path / "checkout")
    report = tmp_path / "report.md"
    environment = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
    options = ["--fake-gpus", "1", "--compute-seconds", "3", "--port", str(free_port()), "--report", str(report)]
    finished = subprocess.run(
        [sys.executable, "benchmarks/agent_gpu_check.py", *options, *agent],
        cwd=checkout,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert finished.returncode == 0, finished.stdout[-4000:] + finished.stderr[-4000:]
    table = report.read_text()
    for check in (
        "| registration matches NVML | ok | 0: GPU-fake-local-0 81920 MiB |",
        "| node ready, not cordoned | ok |",
        "| the agent's version is recorded | ok |",
        "| CUDA_VISIBLE_DEVICES is the placed device | ok | visible=0 order=PCI_BUS_ID |",
        "| utilisation rises while it computes | ok |",
        "| the fraction reaches the environment | ok | fraction=0.5 memory_mib=40960 |",
        "| CUDA shows exactly the assigned device | skipped | no CUDA through PyTorch on this host |",
        "| a cancel stops the CUDA process within its grace | ok |",
    ):
        assert check in table
