"""Slurm's partitions as the console's pools, on a real Slurm with two partitions: `train` (n1)
and `infer` (n2, and n1 after train: a node in several partitions goes to its first).

A node joins the pool named after its partition, made when missing; a job of a quota of that pool
runs there, submitted to the node's partition (sbatch's default partition does not reach n2); a
node Slurm moves to another partition follows it to that pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from quotas.models import Node, NodeExecutor, ResourcePool
from scheduling.models import Job, JobState
from slurm import inventory
from slurm.models import SlurmJob
from slurm.testing import job_label
from tests.scheduling.conftest import build_cluster
from tests.slurm.conftest import Clients, SlurmCluster, console_turn, running_cluster, settle
from workspaces import services as workspace_services

pytestmark = pytest.mark.django_db(transaction=True)

PARTITIONS = (("train", ("n1",)), ("infer", ("n2", "n1")))


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    yield from running_cluster(tmp_path_factory, partitions=PARTITIONS)


def pools() -> dict[str, str]:
    return dict(Node.objects.filter(executor=NodeExecutor.SLURM).values_list("name", "pool__name"))


def test_each_node_joins_the_pool_of_its_first_partition_and_runs_its_jobs_there(
    slurm: SlurmCluster, make_user: Any, client_for: Clients
) -> None:
    console_turn()
    assert pools() == {"n1": "train", "n2": "infer"}
    assert Node.objects.get(name="n1").labels[inventory.PARTITION] == "train"
    assert ResourcePool.objects.get(name="infer").description == "Slurm partition infer"
    lab = build_cluster(node_gpus=(), tree=(("Infer", None, 2.0), ("serving", "Infer", 2.0)), pool_name="infer")
    member: AbstractUser = make_user("dev-dana")
    workspace_services.add_member(actor=None, workspace=lab.workspace, user=member, role="developer")
    body = {"name": "served", "workspace": "lab", "quota": "serving", "kind": "training", "gpus": 2}
    answer = client_for(member).post("/api/v1/jobs/", {**body, "command": "echo on $SLURMD_NODENAME"}, format="json")
    assert answer.status_code == 201, answer.content
    job = Job.objects.get(pk=answer.json()["id"])
    settle(lambda: Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED, what="the infer job succeeded on n2")
    row = SlurmJob.objects.get(job=job)
    assert row.node_name == "n2"
    jobs = slurm.command_json("squeue", "--states=all")["jobs"]
    (seen,) = [one for one in jobs if job_label(one) == row.slurm_label]
    assert seen["partition"] == "infer"


def test_a_node_slurm_moves_to_another_partition_follows_it_to_that_pool(slurm: SlurmCluster) -> None:
    console_turn()
    assert pools()["n2"] == "infer"
    # n2 joins train, which slurm.conf lists first: its first partition is now train.
    slurm.command("scontrol", "update", "partitionname=train", "nodes=n1,n2")
    try:
        settle(lambda: pools()["n2"] == "train", what="n2 moved to the train pool")
        assert Node.objects.get(name="n2").labels[inventory.PARTITION] == "train"
    finally:
        slurm.command("scontrol", "update", "partitionname=train", "nodes=n1")
