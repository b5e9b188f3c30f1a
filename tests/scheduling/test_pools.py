"""Pools in the running console (issue 24): one cycle schedules every pool, each on its own
nodes with its own tree, and a node changes pools only when nothing runs there."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from quotas import selectors
from quotas import services as quota_services
from quotas.models import Node, Quota, ResourcePool
from scheduling import services
from scheduling.models import Job
from tests.scheduling.conftest import Cluster


@pytest.fixture
def a100(cluster: Cluster) -> ResourcePool:
    """A second pool beside the cluster's default one: one node a-1 of 8 GPUs, a root `batch` of 8."""
    pool = quota_services.create_pool(actor=None, name="a100")
    quota_services.create_node(actor=None, name="a-1", gpus=8, cpu=64, memory_gib=512, pool=pool)
    batch = quota_services.create_quota(actor=None, name="batch", gpus=8, pool=pool)
    cluster.quotas["batch"] = batch
    cluster.workspace.quotas.add(batch)
    return pool


def nodes_of(job: Job) -> set[str]:
    return set(job.placements.values_list("node__name", flat=True))


def test_a_node_with_jobs_on_it_does_not_change_pools_and_the_jobs_are_named(
    cluster: Cluster, a100: ResourcePool
) -> None:
    cluster.submit("train-1", gpus=8)
    cluster.submit("train-2", quota="team-b", gpus=8)
    services.converge()
    running_on = {name: nodes_of(cluster.job(name)) for name in ("train-1", "train-2")}
    node = Node.objects.get(name=next(iter(running_on["train-1"])))

    with pytest.raises(ValidationError) as refused:
        quota_services.update_node(actor=None, node=node, pool=a100)

    assert refused.value.message_dict["pool"] == [
        f"{node.name} cannot change pools while jobs run there (train-1); cordon or drain it and let them end first."
    ]
    assert Node.objects.get(pk=node.pk).pool_id == cluster.pool.pk
    assert Quota.objects.get(name="batch").pool_id == a100.pk


def test_one_cycle_places_each_job_on_its_quotas_pool_and_lends_nothing_across(
    cluster: Cluster, a100: ResourcePool
) -> None:
    # The default pool (16 GPUs) is idle; a100 (8) is asked for 16: half waits, none crosses over.
    for number in (1, 2):
        cluster.submit(f"batch-{number}", quota="batch", gpus=8)
    cluster.submit("vision", quota="team-a", gpus=8)
    services.converge()

    assert (cluster.state("batch-1"), nodes_of(cluster.job("batch-1"))) == ("running", {"a-1"})
    assert cluster.state("batch-2") == "pending"
    assert cluster.job("batch-2").shown_code == "insufficient_capacity"
    assert nodes_of(cluster.job("vision")) <= {"gpu-1", "gpu-2"}


def test_fair_shares_divide_each_pools_own_capacity(cluster: Cluster, a100: ResourcePool) -> None:
    cluster.submit("batch-1", quota="batch", gpus=8)
    cluster.submit("team-a-1", quota="team-a", gpus=8)
    cluster.submit("team-a-2", quota="team-a", gpus=8)
    services.converge()

    quotas = list(Quota.objects.filter(name__in=["batch", "Quota1", "team-a"]).order_by("name"))
    statuses = selectors.quota_statuses(quotas)
    assert {quota.name: statuses[quota.pk]["fair_share"] for quota in quotas} == {
        "Quota1": 16,
        "batch": 8,
        "team-a": 16,
    }


def test_a_dry_run_submission_is_previewed_in_its_quotas_pool(cluster: Cluster, a100: ResourcePool) -> None:
    # a100 has 8 GPUs and the default pool 16 idle ones: 12 GPUs exceed a100 whatever is idle elsewhere.
    too_big = services.preview_submit_job(
        actor=None,
        workspace=cluster.workspace,
        quota=cluster.quotas["batch"],
        name="big",
        kind="training",
        gpus=4,
        replicas=3,
    )
    fits = services.preview_submit_job(
        actor=None, workspace=cluster.workspace, quota=cluster.quotas["batch"], name="fits", kind="training", gpus=8
    )

    assert not too_big.would_admit
    assert too_big.reason is not None
    assert (too_big.reason["code"], too_big.reason["message"]) == ("exceeds_cluster", "asks 12 GPUs, the pool has 8")
    assert fits.would_admit
    assert {placement["node"] for placement in fits.placements} == {"a-1"}
