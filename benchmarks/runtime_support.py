"""What the runtime benchmarks share: a scratch database, and an engine snapshot written into it.

Benchmark set-up writes rows in bulk (it is not what is measured); what is measured always
goes through the console's own code (the cycle, the services, the API).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypedDict

import psycopg
from django.apps import apps
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.utils import ConnectionHandler
from django.test.utils import override_settings

from quotas.models import GpuDevice, Node, Quota, ResourcePool
from scheduling.cycle import ensure_fence
from scheduling.engine import Snapshot
from scheduling.models import Job, JobState, ReplicaPlacementRecord
from workspaces.models import QuotaBinding, Workspace

EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


class ServerLogin(TypedDict):
    """Where the PostgreSQL server is, and who creates and drops the scratch database on it."""

    host: str
    port: int | str
    user: str
    password: str | None


@contextmanager
def scratch_postgres(url: str, name: str) -> Iterator[None]:
    """A fresh PostgreSQL database `name` on the server of `url`, the default connection for the block."""
    settings_dict = ConnectionHandler().configure_settings({DEFAULT_DB_ALIAS: _url_settings(url)})[DEFAULT_DB_ALIAS]
    admin: ServerLogin = {
        "host": settings_dict["HOST"] or "127.0.0.1",
        "port": settings_dict["PORT"] or 5432,
        "user": settings_dict["USER"] or "postgres",
        "password": settings_dict["PASSWORD"] or None,
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **admin) as server:
        server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        server.execute(f'CREATE DATABASE "{name}"')
    settings_dict["NAME"] = name
    previous_settings = connections.settings[DEFAULT_DB_ALIAS]
    previous = connections[DEFAULT_DB_ALIAS]
    connections.settings[DEFAULT_DB_ALIAS] = settings_dict
    connection = connections.create_connection(DEFAULT_DB_ALIAS)
    connections[DEFAULT_DB_ALIAS] = connection
    try:
        with override_settings(MIGRATION_MODULES={app.label: None for app in apps.get_app_configs()}):
            call_command("migrate", run_syncdb=True, verbosity=0, interactive=False)
        ensure_fence()
        yield
    finally:
        connection.close()
        connections[DEFAULT_DB_ALIAS] = previous
        connections.settings[DEFAULT_DB_ALIAS] = previous_settings
        with psycopg.connect(dbname="postgres", autocommit=True, **admin) as server:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _url_settings(url: str) -> dict[str, object]:
    import environ

    config: dict[str, object] = environ.Env.db_url_config(url)
    return config


def write_snapshot(snapshot: Snapshot, *, workspaces_by_root: bool = True) -> dict[str, int]:
    """Nodes with their devices, the quota tree, one workspace per root bound to its subtree,
    and the snapshot's jobs (running ones with their placements). Returns job name → pk."""
    pool = ResourcePool.objects.create(name=ResourcePool.DEFAULT_NAME, placement=snapshot.placement)
    nodes = Node.objects.bulk_create(
        Node(
            pool=pool,
            name=node.name,
            gpus=node.gpus,
            cpu=node.cpu,
            memory_gib=node.memory_gib,
            state="ready" if node.ready else "not_ready",
        )
        for node in snapshot.nodes
    )
    node_ids = {node.name: node.pk for node in nodes}
    GpuDevice.objects.bulk_create(
        GpuDevice(node_id=node.pk, index=index) for node in nodes for index in range(node.gpus)
    )
    quota_ids: dict[str, int] = {}
    remaining = list(snapshot.quotas)
    while remaining:  # parents before children, one level per bulk insert
        level = [quota for quota in remaining if quota.parent is None or quota.parent in quota_ids]
        created = Quota.objects.bulk_create(
            Quota(
                pool=pool,
                name=quota.name,
                parent_id=quota_ids.get(quota.parent) if quota.parent else None,
                gpus=quota.gpus,
                limit=quota.limit,
                weight=quota.weight,
                rank=quota.rank,
                child_preemption=quota.child_preemption,
                same_level_preemption=quota.same_level_preemption,
                queue_policy=quota.queue_policy,
                min_runtime_seconds=quota.min_runtime_seconds,
            )
            for quota in level
        )
        quota_ids.update({quota.name: quota.pk for quota in created})
        remaining = [quota for quota in remaining if quota.name not in quota_ids]
    root_of = {}
    parents = {quota.name: quota.parent for quota in snapshot.quotas}
    for name in quota_ids:
        root = name
        while parents[root] is not None:
            root = parents[root]  # type: ignore[assignment]
        root_of[name] = root
    workspaces = {root: Workspace.objects.create(name=f"ws-{root}") for root in sorted(set(root_of.values()))}
    QuotaBinding.objects.bulk_create(
        QuotaBinding(workspace=workspaces[root_of[name]], quota_id=pk) for name, pk in quota_ids.items()
    )
    jobs = Job.objects.bulk_create(
        Job(
            name=job.id,
            workspace=workspaces[root_of[job.quota]],
            quota_id=quota_ids[job.quota],
            kind="training",
            gpus=job.gpus,
            replicas=job.replicas,
            min_replicas=job.min_replicas,
            priority=job.priority,
            preemptible=job.preemptible,
            cpu=job.cpu,
            memory_gib=job.memory_gib,
            grace_seconds=job.grace_seconds,
            state=job.state,
            submitted_at=EPOCH.fromtimestamp(EPOCH.timestamp() + job.submitted_at, UTC),
            started_at=(
                EPOCH.fromtimestamp(EPOCH.timestamp() + job.started_at, UTC) if job.started_at is not None else None
            ),
            allocated_gpus=sum(p.fraction if p.fraction < 1 else len(p.devices) for p in job.placements),
            running_replicas=len(job.placements) if job.state == JobState.RUNNING else 0,
        )
        for job in snapshot.jobs
    )
    job_ids = {job.name: job.pk for job in jobs}
    ReplicaPlacementRecord.objects.bulk_create(
        ReplicaPlacementRecord(
            job_id=job_ids[job.id], node_id=node_ids[p.node], devices=list(p.devices), fraction=p.fraction
        )
        for job in snapshot.jobs
        for p in job.placements
    )
    return job_ids
