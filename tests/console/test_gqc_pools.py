"""gqc and pools, against a live console: `gqc pools` lists each pool with its nodes, GPUs and
quotas; `gqc nodes` and `gqc quotas` name each row's pool; `gqc describe` says which pool a job
runs in. A member sees the pools of their quotas only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from pytest_django.live_server_helper import LiveServer

from quotas import services as quota_services
from tests.conftest import PASSWORD
from tests.console.test_gqc_cli import dave, gqc  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def a100(pai_world: dict[str, AbstractUser]) -> None:
    """A second pool a100 of one 8-GPU A100 node with its own root, batch (8)."""
    pool = quota_services.create_pool(actor=None, name="a100", placement="spread", description="A100 80 GB.")
    quota_services.create_node(actor=None, name="a100-1", gpus=8, gpu_model="NVIDIA A100", pool=pool)
    quota_services.create_quota(actor=None, name="batch", gpus=8, pool=pool)


def rows_of(output: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in output.splitlines()[1:]}


def as_platform_admin(gqc: Any, live_server: LiveServer) -> Any:  # noqa: F811 (the fixture's value)
    signed = gqc("login", live_server.url, "-u", "platform-admin", "--password-stdin", stdin=PASSWORD + "\n")
    assert signed.exit_code == 0, signed.output
    return gqc


def test_gqc_pools_lists_each_pool_with_its_nodes_gpus_and_quotas(
    gqc: Any,  # noqa: F811 (a fixture)
    live_server: LiveServer,
    a100: None,
) -> None:
    admin = as_platform_admin(gqc, live_server)

    listed = admin("pools")
    wide = admin("pools", "-o", "wide")
    answered = json.loads(admin("pools", "-o", "json").output)

    assert listed.exit_code == 0, listed.output
    assert listed.output.splitlines()[0].split() == [
        "NAME", "NODES", "GPUS", "QUOTAS", "GUARANTEED", "ROOTS", "PLACEMENT"
    ]  # fmt: skip
    assert rows_of(listed.output) == {
        "default": ["default", "4", "32", "3", "32", "Quota1", "pack"],
        "a100": ["a100", "1", "8", "1", "8", "batch", "spread"],
    }
    assert "NVIDIA A100" in wide.output and "A100 80 GB." in wide.output
    a100_row = next(pool for pool in answered if pool["name"] == "a100")
    assert {key: a100_row[key] for key in ("nodes", "gpus", "gpu_models", "quotas", "roots", "guaranteed")} == {
        "nodes": 1,
        "gpus": 8,
        "gpu_models": ["NVIDIA A100"],
        "quotas": 1,
        "roots": ["batch"],
        "guaranteed": 8,
    }


def test_gqc_nodes_and_quotas_name_each_rows_pool(
    gqc: Any,  # noqa: F811 (a fixture)
    live_server: LiveServer,
    a100: None,
) -> None:
    admin = as_platform_admin(gqc, live_server)

    nodes = rows_of(admin("nodes").output)
    a100_only = rows_of(admin("nodes", "--pool", "a100").output)
    quotas = admin("quotas").output

    assert nodes["a100-1"][:4] == ["a100-1", "a100", "ready", "8"]
    assert nodes["gpu-1"][:4] == ["gpu-1", "default", "ready", "8"]
    assert a100_only.keys() == {"a100-1"}
    assert quotas.splitlines()[0].split()[-1] == "POOL"
    assert rows_of(quotas)["batch"][-1] == "a100"
    assert rows_of(quotas)["Quota1.1"][-1] == "default"


def test_a_member_sees_the_pools_of_their_quotas_and_describe_names_the_jobs_pool(
    dave: Any,  # noqa: F811 (a fixture)
    a100: None,
) -> None:
    pools = rows_of(dave("pools").output)
    described = dave("describe", "train-b")

    assert pools.keys() == {"default"}  # workspace-b is bound to Quota1.1 only
    assert pools["default"][:4] == ["default", "4", "32", "1"]  # one quota of it dave may see
    assert described.exit_code == 0, described.output
    assert "Workspace / quota: workspace-b / Quota1.1\nPool:              default\n" in described.output
