"""The Resource Quotas page and its actions through the Django client: who may do what (each
role × each action), Preview changing nothing, Confirm going through the service, refusals in words."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser, User
from django.test import Client

from quotas.models import AuditRecord, Quota
from tests.console.conftest import ROLES, quota_id

pytestmark = pytest.mark.django_db

ACTIONS = (
    "new-child",
    "scale",
    "transfer",
    "edit",
    "delete",
    "switch/child-preemption",
    "switch/same-level-preemption",
)


def client_as(users: Mapping[str, AbstractUser], role: str) -> Client:
    client = Client()
    user = users[role]
    assert isinstance(user, User)  # auth.User is the user model: what force_login is typed for
    # force_login: axes' backend refuses Client.login(), which authenticates without a request.
    client.force_login(user)
    return client


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("action", ACTIONS)
def test_only_platform_admins_may_run_an_action(pai_world: dict[str, AbstractUser], role: str, action: str) -> None:
    client = client_as(pai_world, role)
    url = f"/quotas/{quota_id('Quota1.1')}/{action}/"
    before = list(Quota.objects.order_by("id").values())
    shown = client.get(url)
    posted = client.post(url, {"step": "confirm", "name": "x", "gpus": "1"})
    if role == "platform-admin":
        assert shown.status_code == 200
        assert b"Preview" in shown.content
    elif role == "outsider":
        # Quota1.1 is bound to workspace-b only: to an outsider it does not exist.
        assert (shown.status_code, posted.status_code) == (404, 404)
    else:
        assert (shown.status_code, posted.status_code) == (403, 403)
        assert b"Only platform admins may change quotas." in posted.content
    assert list(Quota.objects.order_by("id").values()) == before, "nothing changed without a preview"


@pytest.mark.parametrize("role", ROLES)
def test_new_root_quota_is_for_platform_admins(pai_world: dict[str, AbstractUser], role: str) -> None:
    answer = client_as(pai_world, role).post("/quotas/new/", {"step": "preview", "name": "Quota2", "gpus": "0"})
    assert answer.status_code == (200 if role == "platform-admin" else 403)


@pytest.mark.parametrize("role", ROLES)
def test_the_page_shows_actions_only_to_platform_admins(pai_world: dict[str, AbstractUser], role: str) -> None:
    page = client_as(pai_world, role).get("/quotas/")
    assert page.status_code == 200
    assert (b"New child quota" in page.content) == (role == "platform-admin")
    assert (b"New quota" in page.content) == (role == "platform-admin")
    names = {"platform-admin": 3, "workspace-admin": 1, "developer": 1, "outsider": 0}[role]
    assert page.content.count(b'data-testid="quota-row"') == names


def test_scale_preview_names_the_reclaimable_job_then_confirm_scales(pai_world: dict[str, User]) -> None:
    client = client_as(pai_world, "platform-admin")
    url = f"/quotas/{quota_id('Quota1.1')}/scale/"
    preview = client.post(url, {"step": "preview", "gpus": "8"})
    text = preview.content.decode()
    assert "Preview: what would change" in text
    assert "12 → 8 GPUs" in text
    assert "Quota1.1 holds 24 GPUs against a guarantee of 8: 4 more GPUs become reclaimable, from train-b" in text
    assert Quota.objects.get(name="Quota1.1").gpus == 12, "a preview changes nothing"
    fingerprint = text.split('name="previewed" value="')[1].split('"')[0]
    done = client.post(url, {"step": "confirm", "gpus": "8", "previewed": fingerprint})
    assert done.status_code == 302
    assert Quota.objects.get(name="Quota1.1").gpus == 8
    assert AuditRecord.objects.filter(action="quota.scale", actor=pai_world["platform-admin"]).exists()


def test_confirm_of_values_not_previewed_previews_again(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    answer = client.post(f"/quotas/{quota_id('Quota1.1')}/scale/", {"step": "confirm", "gpus": "8", "previewed": "x"})
    assert answer.status_code == 200
    assert b"Preview: what would change" in answer.content
    assert Quota.objects.get(name="Quota1.1").gpus == 12


def test_a_child_beyond_its_parent_is_refused_beside_the_field_with_numbers(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    answer = client.post(
        f"/quotas/{quota_id('Quota1')}/new-child/", {"step": "preview", "name": "Quota1.3", "gpus": "8"}
    )
    text = answer.content.decode()
    assert 'id="id_gpus_error"' in text
    assert "Quota1.3 would need 8 GPUs but Quota1 has 32 − 32 = 0 left for its children." in text
    assert not Quota.objects.filter(name="Quota1.3").exists()


def test_an_amount_beyond_the_bounds_names_the_bound_and_the_number(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    answer = client.post(f"/quotas/{quota_id('Quota1.1')}/scale/", {"step": "preview", "gpus": "2000000"})
    assert "New guaranteed GPUs must be at most 1,000,000, got 2000000." in answer.content.decode()


def test_delete_is_refused_with_the_reason_while_used(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    answer = client.post(f"/quotas/{quota_id('Quota1.1')}/delete/", {"step": "preview"})
    text = answer.content.decode()
    assert "Quota1.1 is bound to workspaces workspace-b; unbind it first." in text
    assert "live job(s) use Quota1.1" in text
    assert Quota.objects.filter(name="Quota1.1").exists()


def test_transfer_moves_guarantee_between_siblings(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    url = f"/quotas/{quota_id('Quota1.2')}/transfer/"
    fields: dict[str, Any] = {"target": quota_id("Quota1.1"), "gpus": "4"}
    preview = client.post(url, {"step": "preview", **fields}).content.decode()
    assert "20 → 16 GPUs" in preview and "12 → 16 GPUs" in preview
    fingerprint = preview.split('name="previewed" value="')[1].split('"')[0]
    assert client.post(url, {"step": "confirm", "previewed": fingerprint, **fields}).status_code == 302
    assert {q.name: q.gpus for q in Quota.objects.all()} == {"Quota1": 32, "Quota1.1": 16, "Quota1.2": 16}


def test_htmx_gets_the_partial_and_a_client_redirect(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    url = f"/quotas/{quota_id('Quota1.2')}/scale/"
    partial = client.get(url, headers={"HX-Request": "true"})
    assert partial.content.lstrip().startswith(b"{#") is False
    assert b"<html" not in partial.content and b'class="action-panel"' in partial.content
    preview = client.post(url, {"step": "preview", "gpus": "18"}, headers={"HX-Request": "true"}).content.decode()
    fingerprint = preview.split('name="previewed" value="')[1].split('"')[0]
    done = client.post(url, {"step": "confirm", "gpus": "18", "previewed": fingerprint}, headers={"HX-Request": "true"})
    assert done.headers["HX-Redirect"] == "/quotas/"


@pytest.mark.parametrize(("role", "status"), [("platform-admin", 200), ("developer", 200), ("outsider", 404)])
def test_quota_page_overview_and_audit(pai_world: dict[str, AbstractUser], role: str, status: int) -> None:
    client = client_as(pai_world, role)
    overview = client.get(f"/quotas/{quota_id('Quota1.1')}/")
    assert overview.status_code == status
    if status == 200:
        assert b"Guaranteed 12 + share of idle GPUs" in overview.content
        assert b"workspace-b" in overview.content
        jobs = client.get(f"/quotas/{quota_id('Quota1.1')}/?tab=jobs", headers={"HX-Request": "true"}).content
        assert b'data-job="train-b"' in jobs and b"<html" not in jobs  # as an htmx partial
        audit = client.get(f"/quotas/{quota_id('Quota1.1')}/?tab=audit").content
        assert (b"quota.create" in audit) == (role == "platform-admin")


def test_filter_without_javascript_narrows_by_name(pai_world: dict[str, AbstractUser]) -> None:
    page = client_as(pai_world, "platform-admin").get("/quotas/?q=1.2").content
    assert page.count(b'data-testid="quota-row"') == 1


def test_the_rows_escape_what_a_name_holds(pai_world: dict[str, AbstractUser]) -> None:
    """The tree's rows are rendered by Jinja2 (console/jinja.py), outside Django's autoescape."""
    Quota.objects.filter(name="Quota1.2").update(name='Q"><img src=x onerror=alert(1)>')
    page = client_as(pai_world, "platform-admin").get("/quotas/").content.decode()
    assert "<img src=x" not in page
    assert 'data-quota="Q&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"' in page
    assert page.count('data-testid="quota-row"') == 3


def test_an_unknown_switch_is_a_404(pai_world: dict[str, AbstractUser]) -> None:
    answer = client_as(pai_world, "platform-admin").get(f"/quotas/{quota_id('Quota1')}/switch/gravity/")
    assert answer.status_code == 404


def _queries_for(client: Client, url: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_the_pages_take_a_constant_number_of_queries(pai_world: dict[str, AbstractUser]) -> None:
    """The tree and a quota's Overview cost the same queries at 3 quotas and at 63."""
    from quotas.services import NewQuota, create_quota_tree

    client = client_as(pai_world, "platform-admin")
    few_tree = _queries_for(client, "/quotas/")
    few_detail = _queries_for(client, f"/quotas/{quota_id('Quota1')}/")
    create_quota_tree(
        actor=None,
        quotas=[NewQuota(name="Pool2", gpus=0)] + [NewQuota(name=f"Pool2.{i}", parent="Pool2") for i in range(60)],
    )
    assert _queries_for(client, "/quotas/") == few_tree
    assert _queries_for(client, f"/quotas/{quota_id('Pool2')}/") == few_detail
