"""A real Slurm for the tests: slurm.testing's cluster (shared with benchmarks/slurm_drain.py),
Debian's slurmctld and one `slurmd -N NAME` per emulated node on this machine, in a temporary
directory, on free ports, with two fake GPUs a node (GRES files that are character devices made
with mknod, so that Slurm binds them and sets CUDA_VISIBLE_DEVICES), auth/none.

One cluster per test module and xdist worker (it starts in a few seconds); every test starts from
no live job and every node resumed, and the daemons are stopped at the end, also when a test
failed. Below the cluster: the console's side as the worker runs it (console_turn, settle) and a
lab (quota tree, workspace, member) to submit to, shared by the modules.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.cycle import run_cycle
from scheduling.executors import get_executor
from scheduling.models import Job, JobEvent, JobLog
from slurm import executor, inventory
from slurm.models import SlurmJob
from slurm.testing import COMMAND_SECONDS, DAEMONS, SlurmCluster, free_port, wait_until
from tests.scheduling.conftest import (
    Cluster,
    build_cluster,
    runtime_settings,  # noqa: F401 - autouse here too
)
from workspaces import services as workspace_services

GPUS_PER_NODE = 2
NODE_NAMES = ("n1", "n2")
# The tests' one partition (slurm.testing's when none is named), and so the pool of their nodes.
PARTITION = "gpu"

__all__ = ["COMMAND_SECONDS", "GPUS_PER_NODE", "NODE_NAMES", "PARTITION", "SlurmCluster", "free_port", "wait_until"]


def running_cluster(tmp_path_factory: pytest.TempPathFactory, **shape: Any) -> Iterator[SlurmCluster]:
    """A started cluster of the tests' two nodes (other SlurmCluster fields in `shape`, such as
    partitions), stopped at the end; a missing Slurm skips, or fails where GQC_REQUIRE_SLURM is set (CI)."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        why = f"Slurm is not installed ({', '.join(missing)} missing): .ci/run installs it from Debian"
        if os.environ.get("GQC_REQUIRE_SLURM"):
            pytest.fail(why)
        pytest.skip(why)
    cluster = SlurmCluster(
        root=tmp_path_factory.mktemp("slurm"),
        nodes=NODE_NAMES,
        gpus_per_node=GPUS_PER_NODE,
        cpus=4,
        memory_mib=4000,
        **shape,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    yield from running_cluster(tmp_path_factory)


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


# --- the console's side, as the worker runs it, and a lab to submit to -------------------------

Clients = Callable[[AbstractUser | None], APIClient]
# Team a's guarantee is the whole cluster; team b borrows.
TREE = (("Quota1", None, 4.0), ("team-a", "Quota1", 4.0), ("team-b", "Quota1", 0.0))


def console_turn() -> None:
    """What the worker does every second: the executor's tick, and a cycle."""
    get_executor().tick(timezone.now())
    run_cycle(trigger="slurm-test")


def console_story() -> str:
    """What the console knows, for a failure's message: a flake on CI is read from it."""
    events = list(JobEvent.objects.order_by("id").values_list("job_id", "kind", "message"))
    jobs = list(Job.objects.order_by("id").values_list("id", "state", "reason_message"))
    rows = list(SlurmJob.objects.order_by("id").values_list("name", "slurm_id", "state", "exit_code"))
    return f"jobs: {jobs}\nevents: {events}\nSlurm jobs: {rows}\nlogs: {list(JobLog.objects.values_list('lines'))}"


def settle(condition: Callable[[], Any], *, seconds: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while True:
        console_turn()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}\n{console_story()}")
        time.sleep(0.1)


def state(job: Job) -> str:
    return str(Job.objects.get(pk=job.pk).state)


def logs(client: APIClient, job: Job) -> list[str]:
    answer = client.get(f"/api/v1/jobs/{job.pk}/logs/")
    assert answer.status_code == 200, answer.content
    lines: list[str] = answer.json()["lines"]
    return lines


@pytest.fixture
def lab(slurm: SlurmCluster) -> Cluster:
    """The quota tree and workspace, and the console's first sync: Slurm's nodes become its nodes."""
    cluster = build_cluster(node_gpus=(), tree=TREE, pool_name=PARTITION)
    console_turn()
    return cluster


@pytest.fixture
def member(make_user: Any, lab: Cluster) -> AbstractUser:
    user: AbstractUser = make_user("dev-dana")
    workspace_services.add_member(actor=None, workspace=lab.workspace, user=user, role="developer")
    return user


@pytest.fixture
def submit(client_for: Clients, member: AbstractUser) -> Callable[..., Job]:
    def post(name: str, command: str, *, gpus: float = 1, quota: str = "team-a", **fields: Any) -> Job:
        body = {"name": name, "workspace": "lab", "quota": quota, "kind": "training", "gpus": gpus}
        answer = client_for(member).post("/api/v1/jobs/", {**body, "command": command, **fields}, format="json")
        assert answer.status_code == 201, answer.content
        return Job.objects.get(pk=answer.json()["id"])

    return post
