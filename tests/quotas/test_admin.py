"""Operator pages in Django's admin: they open, and their edits obey the same rules as the API."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from quotas.models import AuditRecord, Node, Quota


@pytest.fixture
def operator(platform_admin: User) -> Client:
    client = Client()
    client.force_login(platform_admin)
    return client


@pytest.mark.parametrize("model", ["resourcepool", "node", "gpudevice", "quota", "auditrecord"])
def test_every_model_has_an_admin_list(operator: Client, pai_tree: dict[str, Quota], model: str) -> None:
    assert operator.get(f"/admin/quotas/{model}/").status_code == 200


def test_quota_and_node_change_pages_open(operator: Client, pai_tree: dict[str, Quota]) -> None:
    node = Node.objects.first()
    assert node is not None
    assert operator.get(f"/admin/quotas/quota/{pai_tree['Quota1.1'].pk}/change/").status_code == 200
    assert operator.get(f"/admin/quotas/node/{node.pk}/change/").status_code == 200
    assert operator.get("/admin/quotas/quota/add/").status_code == 200


def quota_form(quota: Quota, **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "name": quota.name,
        "parent": quota.parent_id or "",
        "gpus": quota.gpus,
        "cpu": "",
        "memory_gib": "",
        "limit": "",
        "weight": "",
        "rank": quota.rank,
        "queue_policy": quota.queue_policy,
        "min_runtime_seconds": "",
    }
    if quota.child_preemption:
        fields["child_preemption"] = "on"
    return {**fields, **changes}


def test_an_admin_edit_that_breaks_a_rule_shows_the_message(operator: Client, pai_tree: dict[str, Quota]) -> None:
    quota = pai_tree["Quota1.1"]

    response = operator.post(f"/admin/quotas/quota/{quota.pk}/change/", quota_form(quota, gpus=56))

    assert response.status_code == 200
    assert (
        "Quota1.1 would need 56 GPUs but Quota1 has 128 − 80 = 48 left for its children." in response.content.decode()
    )
    assert Quota.objects.get(pk=quota.pk).gpus == 48


def test_an_admin_edit_goes_through_the_service(operator: Client, pai_tree: dict[str, Quota]) -> None:
    quota = pai_tree["Quota1.1"]

    response = operator.post(f"/admin/quotas/quota/{quota.pk}/change/", quota_form(quota, gpus=40))

    assert response.status_code == 302
    assert Quota.objects.get(pk=quota.pk).gpus == 40
    record = AuditRecord.objects.latest("id")
    assert (record.action, record.before, record.after) == ("quota.update", {"gpus": 48}, {"gpus": 40})


def test_an_admin_add_creates_a_child_through_the_service(operator: Client, pai_tree: dict[str, Quota]) -> None:
    form = quota_form(pai_tree["Quota1.1"], name="Quota1.3", gpus=0)

    response = operator.post("/admin/quotas/quota/add/", form)

    assert response.status_code == 302
    assert Quota.objects.get(name="Quota1.3").parent == pai_tree["Quota1"]
    assert AuditRecord.objects.latest("id").action == "quota.create"
