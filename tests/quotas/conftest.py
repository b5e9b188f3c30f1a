"""Fixtures of the quotas tests: the PAI cluster (16 nodes × 8 GPUs) and its quota tree."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from quotas import services
from quotas.models import Node, Quota


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """Signing users up is not what these tests are about; the default hasher takes ~0.1 s a user."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def make_nodes(db: None) -> Callable[..., list[Node]]:
    def make(count: int, *, gpus: int = 8, cpu: float = 96, memory_gib: float = 768, prefix: str = "gpu") -> list[Node]:
        return [
            services.create_node(actor=None, name=f"{prefix}-{index}", gpus=gpus, cpu=cpu, memory_gib=memory_gib)
            for index in range(1, count + 1)
        ]

    return make


@pytest.fixture
def pai_cluster(make_nodes: Callable[..., list[Node]]) -> list[Node]:
    """128 GPUs, 1536 CPU cores, 12288 GiB."""
    return make_nodes(16)


@pytest.fixture
def pai_tree(pai_cluster: list[Node]) -> dict[str, Quota]:
    """PAI's example: Quota1 = 128 GPUs with Quota1.1 = 48 and Quota1.2 = 80."""
    root = services.create_quota(actor=None, name="Quota1", gpus=128, child_preemption=True)
    return {
        "Quota1": root,
        "Quota1.1": services.create_quota(actor=None, name="Quota1.1", parent=root, gpus=48),
        "Quota1.2": services.create_quota(actor=None, name="Quota1.2", parent=root, gpus=80),
    }


def fresh(quota: Quota) -> Quota:
    return Quota.objects.get(pk=quota.pk)
