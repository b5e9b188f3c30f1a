"""Load the demo: PAI's integrated training and inference example on a 128-GPU pool.

16 nodes × 8 GPUs; Quota1 = 128 GPUs with child-level preemption, children Quota1.1 = 48 and
Quota1.2 = 80; workspace-a/-b/-c bound to them. A second pool, `a100`, of 4 nodes × 8 A100s
with its own small tree (Batch = 32: Batch.sweeps = 24, Batch.eval = 8), so that a newcomer sees
that each pool has its own nodes and quotas; that pool manages CPU and memory too (Batch
guarantees 256 cores and 2,048 GiB, its children 192/1,536 and 64/512); workspace-b is bound to Batch.sweeps too; a
platform admin and a few team users (their passwords are in the README); a few running and
pending jobs so the console is alive.
Everything goes through the same services the console uses.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from console import services as account_services
from quotas import services as quota_services
from quotas.models import Quota
from scheduling import services as job_services
from workspaces import services as workspace_services

# (username, password, platform admin, {workspace: role})
DEMO_USERS: list[tuple[str, str, bool, dict[str, str]]] = [
    ("admin", "admin-demo", True, {}),
    ("alice", "alice-demo", False, {"workspace-a": "admin"}),
    ("bob", "bob-demo", False, {"workspace-b": "admin"}),
    ("carol", "carol-demo", False, {"workspace-c": "admin"}),
    ("dave", "dave-demo", False, {"workspace-b": "developer"}),
    ("erin", "erin-demo", False, {"workspace-c": "developer"}),
    ("victor", "victor-demo", False, {"workspace-b": "visitor"}),
]
DEMO_WORKSPACES = {
    "workspace-a": "Team A: inference services",
    "workspace-b": "Team B: training",
    "workspace-c": "Team C: training and notebooks",
}
DEMO_BINDINGS = {
    "workspace-a": ["Quota1"],
    "workspace-b": ["Quota1.1", "Batch.sweeps"],
    "workspace-c": ["Quota1.2"],
}
# (owner, workspace, quota, job fields)
DEMO_JOBS: list[tuple[str, str, str, dict[str, Any]]] = [
    (
        "dave",
        "workspace-b",
        "Quota1.1",
        {"name": "train-b", "kind": "training", "gpus": 8, "replicas": 6, "min_replicas": 4},
    ),
    ("erin", "workspace-c", "Quota1.2", {"name": "dev-c", "kind": "notebook", "gpus": 1}),
    ("erin", "workspace-c", "Quota1.2", {"name": "train-c", "kind": "training", "gpus": 8, "replicas": 8}),
    ("carol", "workspace-c", "Quota1.2", {"name": "finetune-c", "kind": "training", "gpus": 4, "duration": 900}),
    ("dave", "workspace-b", "Quota1.1", {"name": "sweep-b", "kind": "training", "gpus": 8, "replicas": 4}),
    (
        "dave",
        "workspace-b",
        "Batch.sweeps",
        {"name": "sweep-a100", "kind": "training", "gpus": 4, "replicas": 2, "cpu": 32, "memory_gib": 256},
    ),
]
A100_POOL = "a100"


class Command(BaseCommand):
    help = "Load the demo cluster, quotas, workspaces, users and jobs (PAI's 128-GPU example)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--if-empty", action="store_true", help="Do nothing unless the database is empty.")

    def handle(self, *args: Any, if_empty: bool = False, **options: Any) -> None:
        user_model = get_user_model()
        if if_empty and (user_model.objects.exists() or Quota.objects.exists()):
            self.stdout.write("demo: the database already has data; nothing loaded")
            return
        with transaction.atomic():
            users = {
                username: account_services.create_user(
                    actor=None, username=username, password=password, is_platform_admin=platform_admin
                )
                for username, password, platform_admin, _roles in DEMO_USERS
            }
            admin = users["admin"]
            for index in range(1, 17):
                quota_services.create_node(
                    actor=admin, name=f"gpu-{index}", gpus=8, cpu=96, memory_gib=768, gpu_model="NVIDIA H100"
                )
            root = quota_services.create_quota(actor=admin, name="Quota1", gpus=128, child_preemption=True)
            quota_services.create_quota(actor=admin, name="Quota1.1", parent=root, gpus=48)
            quota_services.create_quota(actor=admin, name="Quota1.2", parent=root, gpus=80)
            a100 = quota_services.create_pool(
                actor=admin, name=A100_POOL, description="NVIDIA A100 nodes for sweeps and evaluation."
            )
            for index in range(1, 5):
                quota_services.create_node(
                    actor=admin,
                    name=f"a100-{index}",
                    gpus=8,
                    cpu=64,
                    memory_gib=512,
                    gpu_model="NVIDIA A100",
                    pool=a100,
                )
            # The a100 pool manages CPU and memory too (its root sets them), so that a newcomer
            # sees the CPU and memory columns and a job waiting for cores rather than GPUs.
            batch = quota_services.create_quota(
                actor=admin, name="Batch", gpus=32, cpu=256, cpu_limit=256, memory_gib=2048, pool=a100
            )
            quota_services.create_quota(
                actor=admin, name="Batch.sweeps", parent=batch, gpus=24, cpu=192, memory_gib=1536
            )
            quota_services.create_quota(actor=admin, name="Batch.eval", parent=batch, gpus=8, cpu=64, memory_gib=512)
            workspaces = {
                name: workspace_services.create_workspace(
                    actor=admin,
                    name=name,
                    description=description,
                    quotas=list(Quota.objects.filter(name__in=DEMO_BINDINGS[name])),
                )
                for name, description in DEMO_WORKSPACES.items()
            }
            for username, _password, _admin, roles in DEMO_USERS:
                for workspace_name, role in roles.items():
                    workspace_services.add_member(
                        actor=admin, workspace=workspaces[workspace_name], user=users[username], role=role
                    )
            for owner, workspace_name, quota_name, fields in DEMO_JOBS:
                job_services.submit_job(
                    actor=users[owner],
                    workspace=workspaces[workspace_name],
                    quota=Quota.objects.get(name=quota_name),
                    **fields,
                )
        self.stdout.write(
            self.style.SUCCESS(
                f"demo: {len(users)} users, 16 nodes × 8 GPUs and 4 × 8 A100s (pool {A100_POOL}), 6 quotas, "
                f"3 workspaces, {len(DEMO_JOBS)} jobs"
            )
        )
