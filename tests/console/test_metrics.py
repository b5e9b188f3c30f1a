"""/metrics (issue 12): Prometheus text with Kueue-shaped names, parsed with prometheus-client's
own parser; a constant number of queries; a token or loopback only."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from quotas.models import Quota
from scheduling import services as job_services
from workspaces import services as workspace_services

pytestmark = pytest.mark.django_db


def scrape(client: Client | None = None, **headers: Any) -> dict[str, Any]:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return {family.name: family for family in text_string_to_metric_families(response.content.decode())}


def value(families: dict[str, Any], name: str, sample: str | None = None, **labels: str) -> float:
    family = families[name]
    matching = [s.value for s in family.samples if (sample is None or s.name == sample) and s.labels == labels]
    assert len(matching) == 1, (name, labels, family.samples)
    return float(matching[0])


def reclaim(pai_world: dict[str, AbstractUser]) -> None:
    """team-c submits within Quota1.2's guarantee: train-b, borrowing, is reclaimed."""
    team_c = Quota.objects.get(name="Quota1.2")
    workspace = workspace_services.create_workspace(actor=None, name="workspace-c", quotas=[team_c])
    job_services.submit_job(
        actor=None, workspace=workspace, quota=team_c, name="train-c", kind="training", gpus=8, replicas=2
    )
    job_services.converge()


def test_scrape_parses_with_kueue_shaped_names(pai_world: dict[str, AbstractUser]) -> None:
    families = scrape()
    # train-b (3 × 8 GPUs) runs in Quota1.1 (guarantee 12): 24 held, 12 borrowed.
    assert value(families, "gqc_admitted_active_workloads", cluster_queue="Quota1.1") == 1
    assert value(families, "gqc_pending_workloads", cluster_queue="Quota1.1") == 0
    gpu = {"resource": "nvidia.com/gpu"}
    assert value(families, "gqc_cluster_queue_nominal_quota", cluster_queue="Quota1.1", **gpu) == 12
    assert value(families, "gqc_cluster_queue_resource_usage", cluster_queue="Quota1.1", **gpu) == 24
    assert value(families, "gqc_cluster_queue_borrowing", cluster_queue="Quota1.1", **gpu) == 12
    assert value(families, "gqc_cluster_queue_resource_usage", cluster_queue="Quota1", **gpu) == 24
    assert "gqc_cluster_queue_fair_share" in families
    cycles = families["gqc_cycle_duration_seconds"]
    assert cycles.type == "histogram"
    assert value(families, "gqc_cycle_duration_seconds", "gqc_cycle_duration_seconds_count") >= 1
    assert value(families, "gqc_admission_wait_time_seconds", "gqc_admission_wait_time_seconds_count") == 1

    reclaim(pai_world)
    families = scrape()
    preempted = {tuple(sorted(s.labels.items())): s.value for s in families["gqc_preempted_workloads"].samples}
    assert preempted, "the reclaim shows as a preemption"
    assert all(dict(labels)["cluster_queue"] == "Quota1.1" for labels in preempted)
    assert families["gqc_preempted_workloads"].type == "counter"


def test_scrape_queries_do_not_grow_with_jobs(pai_world: dict[str, AbstractUser]) -> None:
    with CaptureQueriesContext(connection) as few:
        scrape()
    reclaim(pai_world)
    workspace = workspace_services.create_workspace(
        actor=None, name="many", quotas=[Quota.objects.get(name="Quota1.2")]
    )
    for index in range(15):
        job_services.submit_job(
            actor=None,
            workspace=workspace,
            quota=Quota.objects.get(name="Quota1.2"),
            name=f"j{index}",
            kind="training",
            gpus=1,
        )
    job_services.converge()
    with CaptureQueriesContext(connection) as many:
        scrape()
    assert len(many.captured_queries) == len(few.captured_queries)


def test_access_by_token_or_loopback(pai_world: dict[str, AbstractUser], settings: Any) -> None:
    assert Client(REMOTE_ADDR="10.1.2.3").get("/metrics").status_code == 403
    assert Client(REMOTE_ADDR="::1").get("/metrics").status_code == 200
    settings.METRICS_TOKEN = "s3cret-scrape"
    refused = Client().get("/metrics")  # loopback no longer enough once a token is set
    assert refused.status_code == 403 and b"Bearer" in refused.content
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    scrape(Client(REMOTE_ADDR="10.1.2.3"), HTTP_AUTHORIZATION="Bearer s3cret-scrape")


def test_dcgm_shaped_gpu_metrics_from_the_latest_sample(pai_world: dict[str, AbstractUser]) -> None:
    """Each GPU's latest sample, labelled by node, GPU and the job holding it; the same number of
    queries with one sample per GPU or many."""
    from scheduling.models import Job
    from telemetry import services as telemetry_services

    train_b = Job.objects.get(name="train-b")
    telemetry_services.record_simulated_samples()
    with CaptureQueriesContext(connection) as once:
        families = scrape()
    for _ in range(3):
        telemetry_services.record_simulated_samples()
    with CaptureQueriesContext(connection) as more:
        families = scrape()
    assert len(more.captured_queries) == len(once.captured_queries)

    util, used = families["DCGM_FI_DEV_GPU_UTIL"], families["DCGM_FI_DEV_FB_USED"]
    assert util.type == used.type == "gauge"
    assert len(util.samples) == len(used.samples) == 32  # 4 nodes × 8 GPUs, one series each
    held = [s for s in util.samples if s.labels["job_id"] == str(train_b.pk)]
    assert len(held) == 24 and all(s.labels["job_name"] == "train-b" for s in held)
    assert all(85 <= s.value <= 95 for s in held)  # training's curve
    idle = [s for s in util.samples if s.labels["job_id"] == ""]
    assert len(idle) == 8 and all(s.value == 0 for s in idle)
    assert {s.labels["node"] for s in util.samples} == {"gpu-1", "gpu-2", "gpu-3", "gpu-4"}
    assert {s.labels["gpu"] for s in util.samples} == {str(index) for index in range(8)}
    memory = {(s.labels["node"], s.labels["gpu"]): s.value for s in used.samples}
    assert all(memory[(s.labels["node"], s.labels["gpu"])] >= 0.8 * 81920 for s in held)


def test_quota_gauges_carry_cpu_and_memory_where_the_pool_manages_them(pai_world: dict[str, AbstractUser]) -> None:
    """Kueue's resource names: `cpu` in cores, `memory` in bytes, beside `nvidia.com/gpu`."""
    from quotas import services as quota_services
    from quotas.models import Node

    families = scrape()
    resources = {s.labels["resource"] for s in families["gqc_cluster_queue_nominal_quota"].samples}
    assert resources == {"nvidia.com/gpu"}  # a pool that manages GPUs only

    for node in Node.objects.all():
        quota_services.update_node(actor=None, node=node, cpu=64, memory_gib=512)
    quota_services.update_quota(actor=None, quota=Quota.objects.get(name="Quota1"), cpu=128, memory_gib=1024)
    team_c = Quota.objects.get(name="Quota1.2")
    workspace = workspace_services.create_workspace(actor=None, name="workspace-c", quotas=[team_c])
    job_services.submit_job(
        actor=None, workspace=workspace, quota=team_c, name="prep", kind="training", gpus=1, cpu=16, memory_gib=64
    )
    job_services.converge()
    families = scrape()

    cpu, memory = {"resource": "cpu"}, {"resource": "memory"}
    assert value(families, "gqc_cluster_queue_nominal_quota", cluster_queue="Quota1", **cpu) == 128
    assert value(families, "gqc_cluster_queue_nominal_quota", cluster_queue="Quota1", **memory) == 1024 * 2**30
    assert value(families, "gqc_cluster_queue_resource_usage", cluster_queue="Quota1", **cpu) == 16
    # Quota1.2 guarantees no CPU of its own: all 16 cores it holds are borrowed.
    assert value(families, "gqc_cluster_queue_borrowing", cluster_queue="Quota1.2", **cpu) == 16
    assert value(families, "gqc_cluster_queue_resource_usage", cluster_queue="Quota1.2", **memory) == 64 * 2**30
    assert value(families, "gqc_cluster_queue_nominal_quota", cluster_queue="Quota1.1", resource="nvidia.com/gpu") == 12
