"""The GPU host check (benchmarks/agent_gpu_check.py) runs where there is no GPU too, on stand-in
devices: a whole console, a real agent, four jobs as real processes. On a GPU host the same
script is the issue's device check (docs/agent.md, "On a real GPU"); this keeps it runnable for
the next host that is lent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.embedded_redis import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_the_gpu_host_check_passes_on_stand_in_devices(tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    environment = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
    finished = subprocess.run(
        [
            sys.executable,
            "benchmarks/agent_gpu_check.py",
            "--fake-gpus",
            "1",
            "--compute-seconds",
            "3",
            "--port",
            str(free_port()),
            "--report",
            str(report),
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert finished.returncode == 0, finished.stdout[-4000:] + finished.stderr[-4000:]
    table = report.read_text()
    for check in (
        "| registration matches NVML | ok |",
        "| CUDA_VISIBLE_DEVICES is the placed device | ok | visible=0 order=PCI_BUS_ID |",
        "| utilisation rises while it computes | ok |",
        "| the fraction reaches the environment | ok | fraction=0.5 memory_mib=40960 |",
        "| CUDA shows exactly the assigned device | skipped | no CUDA through PyTorch on this host |",
        "| a cancel stops the CUDA process within its grace | ok |",
    ):
        assert check in table
