"""A real Slurm for the tests: slurm.testing's cluster (shared with benchmarks/slurm_drain.py),
Debian's slurmctld and one `slurmd -N NAME` per emulated node on this machine, in a temporary
directory, on free ports, with two fake GPUs a node (GRES files that are character devices made
with mknod, so that Slurm binds them and sets CUDA_VISIBLE_DEVICES), auth/none.

One cluster per test module and xdist worker (it starts in a few seconds); every test starts from
no live job and every node resumed, and the daemons are stopped at the end, also when a test
failed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm import executor, inventory
from slurm.testing import COMMAND_SECONDS, DAEMONS, SlurmCluster, free_port, wait_until
from tests.scheduling.conftest import runtime_settings  # noqa: F401 - autouse here too

GPUS_PER_NODE = 2
NODE_NAMES = ("n1", "n2")

__all__ = ["COMMAND_SECONDS", "GPUS_PER_NODE", "NODE_NAMES", "SlurmCluster", "free_port", "wait_until"]


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        why = f"Slurm is not installed ({', '.join(missing)} missing): .ci/run installs it from Debian"
        if os.environ.get("GQC_REQUIRE_SLURM"):
            pytest.fail(why)
        pytest.skip(why)
    cluster = SlurmCluster(
        root=tmp_path_factory.mktemp("slurm"), nodes=NODE_NAMES, gpus_per_node=GPUS_PER_NODE, cpus=4, memory_mib=4000
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, settings: Any, tmp_path: Path) -> Iterator[SlurmCluster]:
    """The module's cluster, reset, with the console pointed at it."""
    if slurm_cluster.controller is None:
        slurm_cluster.start_controller(fresh=False)
    slurm_cluster.reset()
    settings.SLURM_CONF = str(slurm_cluster.conf)
    settings.SLURM_OUTPUT_DIR = str(tmp_path / "output")
    settings.SLURM_SYNC_SECONDS = 0.0
    settings.SLURM_COMMAND_SECONDS = COMMAND_SECONDS
    executor.forget_last_sync()
    inventory.forget_warnings()
    yield slurm_cluster
    executor.forget_last_sync()
