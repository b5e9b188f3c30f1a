"""Fixtures of the runtime tests: a small cluster with a quota tree and a workspace bound to it.

Each test session gets its own Redis key prefix, so the cycle lock and the trigger key of
these tests never meet those of another test run against the same Redis.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from quotas.models import GpuDevice, Node, Quota, ResourcePool
from scheduling import services
from scheduling.models import Job
from workspaces import services as workspace_services
from workspaces.models import Workspace

SESSION_PREFIX = f"test-runtime-{uuid.uuid4().hex[:8]}:"


@pytest.fixture(autouse=True)
def runtime_settings(settings: Any) -> Iterator[None]:
    settings.SCHEDULER_TRIGGER = "inline"
    settings.SCHEDULER_REDIS_PREFIX = SESSION_PREFIX
    settings.SCHEDULER_PUBLISH_EVENTS = False
    settings.SCHEDULER_LOCK_WAIT_SECONDS = 5.0
    yield


@dataclass
class Cluster:
    """Two 8-GPU nodes; Quota1 (16) → team-a (8), team-b (8); workspace "lab" bound to all three."""

    pool: ResourcePool
    nodes: dict[str, Node]
    quotas: dict[str, Quota]
    workspace: Workspace
    jobs: dict[str, Job] = field(default_factory=dict)

    def submit(
        self, name: str, quota: str = "team-a", *, gpus: float = 1, kind: str = "training", **fields: Any
    ) -> Job:
        job = services.submit_job(
            actor=fields.pop("actor", None),
            workspace=fields.pop("workspace", self.workspace),
            quota=self.quotas[quota],
            name=name,
            kind=kind,
            gpus=gpus,
            **fields,
        )
        assert isinstance(job, Job)
        self.jobs[name] = job
        return job

    def job(self, name: str) -> Job:
        return Job.objects.get(pk=self.jobs[name].pk)

    def state(self, name: str) -> str:
        return self.job(name).state


def build_cluster(
    *,
    node_gpus: tuple[int, ...] = (8, 8),
    tree: tuple[tuple[str, str | None, float], ...] = (),
    pool_name: str = ResourcePool.DEFAULT_NAME,
) -> Cluster:
    pool = ResourcePool.objects.get_or_create(name=pool_name)[0]
    nodes: dict[str, Node] = {}
    for number, gpus in enumerate(node_gpus, start=1):
        node = Node.objects.create(pool=pool, name=f"gpu-{number}", gpus=gpus, cpu=96, memory_gib=768)
        GpuDevice.objects.bulk_create([GpuDevice(node=node, index=i) for i in range(gpus)])
        nodes[node.name] = node
    quotas: dict[str, Quota] = {}
    for name, parent, guarantee in tree or (
        ("Quota1", None, float(sum(node_gpus))),
        ("team-a", "Quota1", 8),
        ("team-b", "Quota1", 8),
    ):
        quotas[name] = Quota.objects.create(pool=pool, name=name, parent=quotas.get(parent or ""), gpus=guarantee)
    workspace = workspace_services.create_workspace(actor=None, name="lab", quotas=list(quotas.values()))
    return Cluster(pool=pool, nodes=nodes, quotas=quotas, workspace=workspace)


@pytest.fixture
def cluster(db: None) -> Cluster:
    return build_cluster()


@pytest.fixture
def member(make_user: Any, cluster: Cluster) -> AbstractUser:
    user: AbstractUser = make_user("dev-dana")
    workspace_services.add_member(actor=None, workspace=cluster.workspace, user=user, role="developer")
    return user
