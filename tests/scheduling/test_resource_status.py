"""The quota status in the API shows every managed resource (issue 24): where a root quota of the
pool sets cpu or memory_gib, `status.cpu` / `status.memory_gib` carry fair_share (the engine's, as
the last cycle worked it out), allocated (what the subtree's running replicas hold), guaranteed
and limit; a pool that manages GPUs only shows neither."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from quotas import services as quota_services
from scheduling import engine, services
from scheduling.clock import get_clock
from scheduling.engine.types import CPU, MEMORY, ResourceStatus
from scheduling.models import ResourceFairShare
from scheduling.resource_figures import record_fair_shares
from scheduling.selectors import build_snapshot, quota_status_figures, quota_status_summary
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db


def status_of(client: APIClient, cluster: Cluster, name: str) -> dict[str, object]:
    body = client.get(f"/api/v1/quotas/{cluster.quotas[name].pk}/").json()
    status: dict[str, object] = body["status"]
    return status


def manage_cpu(cluster: Cluster) -> None:
    """The pool has 2 × 96 cores; Quota1 guarantees 128 of them, team-a 64 (limit 96)."""
    quota_services.scale_quota(actor=None, quota=cluster.quotas["Quota1"], cpu=128)
    quota_services.update_quota(actor=None, quota=cluster.quotas["team-a"], cpu=64, cpu_limit=96)


def test_a_pool_that_manages_gpus_only_shows_no_cpu_or_memory(admin_client_api: APIClient, cluster: Cluster) -> None:
    cluster.submit("a", gpus=2, cpu=8)
    services.converge()

    status = status_of(admin_client_api, cluster, "team-a")

    assert "cpu" not in status and "memory_gib" not in status
    assert status["allocated"] == 2


def test_a_pool_that_manages_cpu_shows_its_figures_beside_the_gpu_ones(
    admin_client_api: APIClient, cluster: Cluster
) -> None:
    manage_cpu(cluster)
    cluster.submit("two-replicas", gpus=1, replicas=2, cpu=16)
    cluster.submit("waits", "team-b", gpus=1, cpu=300)  # no node has 300 cores
    services.converge()

    engine_status = engine.schedule(build_snapshot(get_clock().now())[0]).quotas
    for name, guaranteed, limit, allocated in (
        ("Quota1", 128, None, 32),
        ("team-a", 64, 96, 32),
        ("team-b", 0, None, 0),  # no cpu of its own: nothing guaranteed in a pool that manages cpu
    ):
        cpu = status_of(admin_client_api, cluster, name)["cpu"]
        engine_cpu = engine_status[name].resources.get(CPU)
        assert cpu == {
            "fair_share": pytest.approx(engine_cpu.fair_share if engine_cpu else 0.0),
            "allocated": allocated,
            "guaranteed": guaranteed,
            "limit": limit,
        }, name
    assert "memory_gib" not in status_of(admin_client_api, cluster, "team-a")


def test_the_pages_summary_and_the_snapshot_agree_on_cpu(cluster: Cluster) -> None:
    manage_cpu(cluster)
    cluster.submit("a", gpus=1, replicas=3, cpu=10)
    cluster.submit("b", "team-b", gpus=0.5, cpu=4)
    services.converge()

    summary = quota_status_summary()
    figures = quota_status_figures(build_snapshot(get_clock().now())[0])

    for name in ("Quota1", "team-a", "team-b"):
        assert summary[name]["cpu"] == figures[name]["cpu"], name
    assert summary["Quota1"]["cpu"]["allocated"] == 34


def status(cpu_share: float, memory_share: float | None = None) -> engine.QuotaStatus:
    resources = {CPU: ResourceStatus(fair_share=cpu_share, allocated=0, guaranteed=0)}
    if memory_share is not None:
        resources[MEMORY] = ResourceStatus(fair_share=memory_share, allocated=0, guaranteed=0)
    return engine.QuotaStatus(
        fair_share=0, allocated=0, allocated_self=0, saturation=0, running=0, pending=0, guaranteed=0,
        resources=resources,
    )  # fmt: skip


def test_the_cycle_keeps_the_engines_cpu_and_memory_fair_shares_and_rewrites_only_what_moved(
    cluster: Cluster,
) -> None:
    ids = {name: quota.pk for name, quota in cluster.quotas.items()}
    first = datetime(2026, 1, 1, tzinfo=UTC)
    later = datetime(2026, 1, 2, tzinfo=UTC)

    result = engine.CycleResult(decisions=(), quotas={"Quota1": status(128, 512), "team-a": status(64)})
    assert record_fair_shares(result=result, quota_ids=ids, at=first) == 2
    assert record_fair_shares(result=result, quota_ids=ids, at=later) == 0  # nothing moved
    moved = engine.CycleResult(decisions=(), quotas={"Quota1": status(128, 512), "team-a": status(70)})
    assert record_fair_shares(result=moved, quota_ids=ids, at=later) == 1

    kept = {row.quota_id: (row.shares, row.at) for row in ResourceFairShare.objects.all()}
    assert kept == {
        ids["Quota1"]: ({CPU: 128, MEMORY: 512}, first),
        ids["team-a"]: ({CPU: 70}, later),
    }
    gpus_only = engine.CycleResult(decisions=(), quotas={"Quota1": engine_status_without_resources()})
    assert record_fair_shares(result=gpus_only, quota_ids=ids, at=later) == 2
    assert not ResourceFairShare.objects.exists()


def engine_status_without_resources() -> engine.QuotaStatus:
    return engine.QuotaStatus(
        fair_share=0, allocated=0, allocated_self=0, saturation=0, running=0, pending=0, guaranteed=0
    )
