"""A pool's page and the quota page's pool (issue 24), through the Django client: a platform admin
renames a pool (the name rules and uniqueness as Add pool has them) and deletes an empty one after
a confirmation; a pool holding nodes or quotas is not deleted and the page names them; everyone
else gets a 404, as on the rest of the pool pages."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from quotas import services as quota_services
from quotas.models import AuditRecord, ResourcePool
from tests.console.conftest import quota_id
from tests.console.test_node_pages import client_as

pytestmark = pytest.mark.django_db


@pytest.fixture
def a100(pai_world: dict[str, AbstractUser]) -> ResourcePool:
    """A second pool holding one node, a100-1, and a root quota batch with a child batch.eval."""
    pool = quota_services.create_pool(actor=None, name="a100", placement="spread")
    quota_services.create_node(actor=None, name="a100-1", gpus=8, gpu_model="A100", pool=pool)
    batch = quota_services.create_quota(actor=None, name="batch", gpus=8, pool=pool)
    quota_services.create_quota(actor=None, name="batch.eval", gpus=2, parent=batch)
    return pool


def test_the_quota_page_names_its_pool_and_links_to_that_pools_tree(
    pai_world: dict[str, AbstractUser], a100: ResourcePool
) -> None:
    client = client_as(pai_world, "platform-admin")

    child = client.get(f"/quotas/{quota_id('batch.eval')}/").content.decode()
    default = client.get(f"/quotas/{quota_id('Quota1.1')}/").content.decode()

    assert 'Pool <a href="/quotas/?pool=a100">a100</a>: its jobs run on that pool\'s nodes only.' in child
    assert 'Pool <a href="/quotas/?pool=default">default</a>' in default
    assert 'data-quota="batch.eval"' in client.get("/quotas/?pool=a100").content.decode()


def test_the_nodes_page_links_every_pool_to_its_page_an_empty_one_too(
    pai_world: dict[str, AbstractUser], a100: ResourcePool
) -> None:
    empty = quota_services.create_pool(actor=None, name="spare")

    page = client_as(pai_world, "platform-admin").get("/nodes/").content.decode()

    assert "Pool spare</h2>" in page and "0 nodes, 0 GPUs; places by pack" in page
    for pool in (a100, empty, ResourcePool.objects.get(name="default")):
        assert f'<a href="/pools/{pool.pk}/">Rename or delete' in page


def test_with_one_pool_the_nodes_page_still_links_to_it(pai_world: dict[str, AbstractUser]) -> None:
    page = client_as(pai_world, "platform-admin").get("/nodes/").content.decode()
    default = ResourcePool.objects.get(name="default")

    assert f'Every node is in the pool default. <a href="/pools/{default.pk}/">Rename the pool' in page


def test_a_platform_admin_renames_a_pool(pai_world: dict[str, AbstractUser], a100: ResourcePool) -> None:
    client = client_as(pai_world, "platform-admin")
    page = client.get(f"/pools/{a100.pk}/").content.decode()
    assert "1 node, 8 GPUs;\n  2 quotas (roots: batch)." in page

    saved = client.post(f"/pools/{a100.pk}/", {"name": "a100-80g", "placement": "pack", "description": "80 GB."})

    a100.refresh_from_db()
    assert (saved.status_code, saved["Location"]) == (302, f"/nodes/#pool-{a100.pk}")
    assert (a100.name, a100.placement, a100.description) == ("a100-80g", "pack", "80 GB.")
    record = AuditRecord.objects.get(action="pool.update", object_id=str(a100.pk))
    assert (record.before or {}).get("name") == "a100"
    assert (record.after or {}).get("name") == "a100-80g"
    assert "Saved the pool a100-80g (was a100)." in client.get("/nodes/").content.decode()


@pytest.mark.parametrize(
    ("name", "sentence"),
    [
        pytest.param("default", "A pool named &#x27;default&#x27; already exists; pool names are unique.", id="clash"),
        pytest.param("", "This field is required.", id="empty"),
        pytest.param("x" * 101, "Ensure this value has at most 100 characters (it has 101).", id="too-long"),
    ],
)
def test_a_rename_is_checked_as_add_pool_checks_a_name(
    pai_world: dict[str, AbstractUser], a100: ResourcePool, name: str, sentence: str
) -> None:
    refused = client_as(pai_world, "platform-admin").post(f"/pools/{a100.pk}/", {"name": name, "placement": "spread"})

    page = refused.content.decode()
    assert refused.status_code == 200
    assert sentence in page
    assert 'data-testid="error-name"' in page
    assert "<h1>Pool a100</h1>" in page  # the stored name, not the refused one
    assert ResourcePool.objects.get(pk=a100.pk).name == "a100"


def test_a_pool_holding_nodes_and_quotas_is_not_deleted_and_the_page_names_them(
    pai_world: dict[str, AbstractUser], a100: ResourcePool
) -> None:
    client = client_as(pai_world, "platform-admin")

    asked = client.get(f"/pools/{a100.pk}/delete/").content.decode()
    refused = client.post(f"/pools/{a100.pk}/delete/")

    nodes = "The pool a100 holds 1 node(s) (a100-1); move or delete them first."
    quotas = "The pool a100 holds 2 quota(s) (batch, batch.eval); delete them first."
    assert nodes in asked and quotas in asked
    assert "Confirm: delete" not in asked
    assert refused.status_code == 409
    assert nodes in refused.content.decode() and quotas in refused.content.decode()
    assert ResourcePool.objects.filter(pk=a100.pk).exists()


def test_an_empty_pool_is_deleted_after_the_confirmation(pai_world: dict[str, AbstractUser]) -> None:
    spare = quota_services.create_pool(actor=None, name="spare")
    client = client_as(pai_world, "platform-admin")

    asked = client.get(f"/pools/{spare.pk}/delete/").content.decode()
    deleted = client.post(f"/pools/{spare.pk}/delete/")

    assert "Confirm: delete pool spare</button>" in asked
    assert (deleted.status_code, deleted["Location"]) == (302, "/nodes/")
    assert not ResourcePool.objects.filter(name="spare").exists()
    assert AuditRecord.objects.filter(action="pool.delete", object_repr="spare").exists()
    assert "Deleted the pool spare." in client.get("/nodes/").content.decode()


@pytest.mark.parametrize("role", ["developer", "workspace-admin", "outsider"])
@pytest.mark.parametrize(("method", "path"), [("get", ""), ("post", ""), ("get", "delete/"), ("post", "delete/")])
def test_a_pools_page_is_a_404_to_everyone_but_platform_admins(
    pai_world: dict[str, AbstractUser], role: str, method: str, path: str
) -> None:
    spare = quota_services.create_pool(actor=None, name="spare")
    client = client_as(pai_world, role)

    answer = getattr(client, method)(f"/pools/{spare.pk}/{path}", {"name": "renamed", "placement": "pack"})

    assert answer.status_code == 404
    assert ResourcePool.objects.filter(pk=spare.pk, name="spare").exists()


def test_anonymous_visitors_are_sent_to_sign_in(pai_world: dict[str, AbstractUser]) -> None:
    answer = Client().get(f"/pools/{ResourcePool.objects.get(name='default').pk}/")
    assert answer.status_code == 302 and "/login/" in answer["Location"]


def test_an_unknown_pool_is_a_404(pai_world: dict[str, AbstractUser]) -> None:
    assert client_as(pai_world, "platform-admin").get("/pools/999999/").status_code == 404
