"""Pools on the pages (issue 24), through the Django client: the Nodes page groups nodes by pool
with their GPU models, Edit node moves a node into another pool (refused, naming the jobs, while
jobs run on it), Submit job says which pool each quota it offers runs on, and the demo has a
second pool."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.management import call_command
from django.test import Client

from quotas import selectors as quota_selectors
from quotas import services as quota_services
from quotas.models import AuditRecord, Node, Quota, ResourcePool
from scheduling import services as job_services
from scheduling.models import Job
from tests.console.test_node_pages import client_as, node_of
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def a100(pai_world: dict[str, AbstractUser]) -> ResourcePool:
    """A second pool, and a spare node gpu-5 in the default pool (beyond what Quota1 needs)."""
    quota_services.create_node(actor=None, name="gpu-5", gpus=8, gpu_model="H100")
    return quota_services.create_pool(actor=None, name="a100", placement="spread", description="A100 80 GB.")


def edit(client: Client, node: Node, **changes: str) -> str:
    fields = {"name": node.name, "gpus": str(node.gpus), "executor": node.executor, "labels": "", **changes}
    preview = str(client.post(f"/nodes/{node.pk}/edit/", {**fields, "step": "preview"}).content.decode())
    if 'name="previewed" value="' not in preview:
        return preview
    fingerprint = preview.split('name="previewed" value="')[1].split('"')[0]
    done = client.post(f"/nodes/{node.pk}/edit/", {**fields, "step": "confirm", "previewed": fingerprint})
    return str(done.content.decode())


def test_edit_node_moves_it_into_another_pool_and_the_nodes_page_groups_by_pool(
    pai_world: dict[str, AbstractUser], a100: ResourcePool
) -> None:
    client = client_as(pai_world, "platform-admin")
    node = Node.objects.get(name="gpu-5")
    form = client.get(f"/nodes/{node.pk}/edit/").content.decode()
    assert '<option value="default" selected>default</option>' in form  # where it is now

    edit(client, node, pool="a100", gpu_model="A100")

    assert Node.objects.get(pk=node.pk).pool.name == "a100"
    assert AuditRecord.objects.filter(action="node.move", object_repr="gpu-5").exists()
    page = client.get("/nodes/").content.decode()
    assert '<h2 class="pool-head" id="pool-' in page
    assert "Pool default</h2>" in page and "Pool a100</h2>" in page
    assert "1 node, 8 GPUs of A100; places by spread (emptiest node that fits). A100 80 GB." in page
    assert page.index("Pool default</h2>") < page.index('data-node="gpu-1"') < page.index("Pool a100</h2>")
    assert page.index("Pool a100</h2>") < page.index('data-node="gpu-5"')


def test_a_node_with_a_job_on_it_is_not_moved_and_the_job_is_named(
    pai_world: dict[str, AbstractUser], a100: ResourcePool
) -> None:
    client = client_as(pai_world, "platform-admin")
    busy = Node.objects.get(name=node_of("train-b"))

    refused = edit(client, busy, pool="a100")

    assert f"{busy.name} cannot change pools while jobs run there (train-b)" in refused
    assert Node.objects.get(pk=busy.pk).pool.name == "default"


def test_one_pool_shows_no_pool_headings(pai_world: dict[str, AbstractUser]) -> None:
    page = client_as(pai_world, "platform-admin").get("/nodes/").content.decode()

    assert 'data-testid="pool-head"' not in page


def test_submit_job_says_which_pool_each_quota_runs_on(pai_world: dict[str, AbstractUser], a100: ResourcePool) -> None:
    batch = quota_services.create_quota(actor=None, name="batch", gpus=0, pool=a100)
    workspace = Workspace.objects.get(name="workspace-b")
    workspace.quotas.add(batch)

    page = client_as(pai_world, "developer").get(f"/jobs/new/?workspace={workspace.pk}").content.decode()

    assert "Runs on its quota&#x27;s pool: Quota1.1 in default, batch in a100." in page


def test_the_demo_has_a_second_pool_with_its_own_tree_and_a_job_on_its_nodes(settings: Any) -> None:
    settings.SCHEDULER_TRIGGER = "inline"
    call_command("load_demo", verbosity=0)
    job_services.converge()

    a100 = ResourcePool.objects.get(name="a100")
    assert sorted(a100.nodes.values_list("name", "gpu_model")) == [(f"a100-{n}", "NVIDIA A100") for n in range(1, 5)]
    assert sorted(a100.quotas.values_list("name", flat=True)) == ["Batch", "Batch.eval", "Batch.sweeps"]
    sweep = Job.objects.get(name="sweep-a100")
    assert sweep.state == "running"
    assert set(sweep.placements.values_list("node__pool__name", flat=True)) == {"a100"}
    # The a100 pool manages CPU and memory: its quotas' status carries them, the default pool's not.
    sweeps, quota1 = Quota.objects.get(name="Batch.sweeps"), Quota.objects.get(name="Quota1")
    statuses = quota_selectors.quota_statuses([sweeps, quota1])
    assert statuses[sweeps.pk]["cpu"]["allocated"] == 64 and statuses[sweeps.pk]["cpu"]["guaranteed"] == 192
    assert statuses[sweeps.pk]["memory_gib"]["allocated"] == 512
    assert "cpu" not in statuses[quota1.pk]


def test_new_quota_roots_a_quota_in_the_chosen_pool(pai_world: dict[str, AbstractUser], a100: ResourcePool) -> None:
    client = client_as(pai_world, "platform-admin")
    a100_node = Node.objects.get(name="gpu-5")
    quota_services.update_node(actor=None, node=a100_node, pool=a100)
    form = client.get("/quotas/new/").content.decode()
    assert '<label for="id_pool">Pool</label>' in form
    fields = {"name": "batch", "pool": "a100", "gpus": "8", "queue_policy": "best_effort"}

    too_big = client.post("/quotas/new/", {**fields, "gpus": "16", "step": "preview"}).content.decode()
    preview = client.post("/quotas/new/", {**fields, "step": "preview"}).content.decode()
    fingerprint = preview.split('name="previewed" value="')[1].split('"')[0]
    client.post("/quotas/new/", {**fields, "step": "confirm", "previewed": fingerprint})

    assert "batch would need 16 GPUs but the pool a100 has 8 − 0 = 8 left for its root quotas." in too_big
    assert Quota.objects.get(name="batch").pool == a100


def test_the_pool_switch_shows_one_pools_tree_alone(pai_world: dict[str, AbstractUser], a100: ResourcePool) -> None:
    quota_services.create_quota(actor=None, name="batch", gpus=0, pool=a100)
    client = client_as(pai_world, "platform-admin")

    everything = client.get("/quotas/").content.decode()
    a100_alone = client.get("/quotas/?pool=a100").content.decode()
    unknown = client.get("/quotas/?pool=nope").content.decode()

    assert 'data-testid="pool-switch"' in everything
    assert 'href="?view=list&amp;pool=a100" data-pool="a100">Pool a100</a>' in everything
    assert 'data-quota="batch"' in everything and 'data-quota="Quota1"' in everything
    assert 'data-quota="batch"' in a100_alone and 'data-quota="Quota1"' not in a100_alone
    assert 'data-pool="a100" class="active" aria-current="page"' in a100_alone
    assert 'data-quota="Quota1"' in unknown  # an unknown pool shows every pool, as no switch does


def test_one_pool_shows_no_pool_switch(pai_world: dict[str, AbstractUser]) -> None:
    assert 'data-testid="pool-switch"' not in client_as(pai_world, "platform-admin").get("/quotas/").content.decode()


def test_a_platform_admin_adds_a_pool_and_others_get_a_404(pai_world: dict[str, AbstractUser]) -> None:
    admin = client_as(pai_world, "platform-admin")
    assert '<a class="button secondary" href="/pools/new/">Add pool</a>' in admin.get("/nodes/").content.decode()

    added = admin.post("/pools/new/", {"name": "a100", "placement": "spread", "description": "A100 nodes."})
    clash = admin.post("/pools/new/", {"name": "a100", "placement": "pack"}).content.decode()

    pool = ResourcePool.objects.get(name="a100")
    assert (added.status_code, added["Location"]) == (302, f"/nodes/#pool-{pool.pk}")
    assert (pool.placement, pool.description) == ("spread", "A100 nodes.")
    assert "A pool named &#x27;a100&#x27; already exists; pool names are unique." in clash
    for role in ("developer", "workspace-admin"):
        assert client_as(pai_world, role).get("/pools/new/").status_code == 404
        assert client_as(pai_world, role).post("/pools/new/", {"name": "x", "placement": "pack"}).status_code == 404
    assert not ResourcePool.objects.filter(name="x").exists()
