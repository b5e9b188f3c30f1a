"""The quota status the pages show comes from aggregates (`quota_status_summary`); it must say
what the engine's figures over a full snapshot say, for whole, fractional, elastic, pending,
running and releasing jobs, and with a node down."""

from __future__ import annotations

import pytest

from quotas import services as quota_services
from scheduling import services
from scheduling.clock import get_clock
from scheduling.selectors import build_snapshot, quota_status_figures, quota_status_summary
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db


def assert_same() -> None:
    snapshot, _index = build_snapshot(get_clock().now())
    expected = quota_status_figures(snapshot)
    summary = quota_status_summary()
    assert summary.keys() == expected.keys()
    for name, figures in expected.items():
        for field, value in figures.items():
            assert summary[name][field] == pytest.approx(value), (name, field)  # type: ignore[literal-required]


def test_the_summary_says_what_the_snapshot_says(cluster: Cluster) -> None:
    assert_same()
    cluster.submit("whole", gpus=2, replicas=2)
    cluster.submit("fraction-1", gpus=0.5)
    cluster.submit("fraction-2", gpus=0.5)
    cluster.submit("elastic", "team-b", gpus=1, replicas=4, min_replicas=1)
    cluster.submit("parent-own", "Quota1", gpus=1)
    assert_same()  # all pending
    services.converge()
    assert_same()
    cluster.submit("too-big", "team-b", gpus=8, replicas=3)  # waits
    services.converge()
    assert_same()


def test_with_a_node_down_the_summary_still_agrees(cluster: Cluster) -> None:
    cluster.submit("a", gpus=4)
    cluster.submit("b", "team-b", gpus=6)
    services.converge()
    node = next(iter(cluster.nodes.values()))
    quota_services.set_node_state(actor=None, node=node, state="not_ready")
    services.converge()
    assert_same()


@pytest.mark.parametrize("state", ["cordoned", "draining"])
def test_with_a_node_cordoned_or_draining_the_summary_still_agrees(cluster: Cluster, state: str) -> None:
    """Such a node counts only with the devices its jobs still hold (engine.fairshare.cluster_capacity)."""
    cluster.submit("a", gpus=0.5)
    cluster.submit("b", "team-b", gpus=3)
    cluster.submit("waits", "team-b", gpus=8, replicas=2)
    services.converge()
    for node in cluster.nodes.values():
        quota_services.set_node_state(actor=None, node=node, state=state)
        break
    assert_same()


def test_gpus_held_by_slurm_jobs_outside_the_console_leave_the_pages_fair_share_as_the_engine_does(
    cluster: Cluster,
) -> None:
    """The engine divides each node's console_gpus (all but the devices outside Slurm jobs hold,
    label slurm.gpus_outside); the pages' capacity once counted every GPU of a ready node, so the
    idle GPUs a quota borrows were 2 more on the page than in the engine."""
    from quotas.models import Node, NodeExecutor
    from slurm.client import SlurmJob
    from slurm.inventory import mark_held_outside

    for name in ("team-a", "team-b", "Quota1"):  # 8 of the 16 GPUs guaranteed: the rest is lent
        quota_services.scale_quota(actor=None, quota=cluster.quotas[name], gpus=8 if name == "Quota1" else 4)
    node = next(iter(cluster.nodes.values()))
    Node.objects.filter(pk=node.pk).update(executor=NodeExecutor.SLURM)
    by_hand = SlurmJob(
        slurm_id=7, name="sbatch-by-hand", comment="", state="RUNNING", reason="", nodes=node.name,
        exit_status=0, gpu_indices=(0, 1), gpus=2, held=((node.name, (0, 1)),),
    )  # fmt: skip
    assert mark_held_outside([by_hand]) == 1
    cluster.submit("wants-all", gpus=8, replicas=2)
    assert_same()
    assert quota_status_summary()["Quota1"]["fair_share"] == pytest.approx(14)  # 16 GPUs less the 2 outside
