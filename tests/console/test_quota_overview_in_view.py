"""The Overview's quota in view (issue 28), through the Django client, as a browser without
JavaScript sees it: `?quota=` stacks that quota's children with their guarantee lines, the picker
and the trail are plain GET form and links, a quota the user may not see is a 404, and htmx's
request for the section alone gets the section alone."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import AbstractUser

from quotas import services as quota_services
from quotas.models import Quota
from scheduling import services as job_services
from tests.console.conftest import quota_id
from tests.console.test_quota_charts import figure
from tests.console.test_quota_pages import client_as
from workspaces import services as workspace_services
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def deeper_pai(pai_world: dict[str, AbstractUser]) -> dict[str, AbstractUser]:
    """PAI's tree with a level more under Quota1.1 (12): Quota1.1.a (8) and Quota1.1.b (4)."""
    parent = Quota.objects.get(name="Quota1.1")
    quota_services.create_quota(actor=None, name="Quota1.1.a", parent=parent, gpus=8)
    quota_services.create_quota(actor=None, name="Quota1.1.b", parent=parent, gpus=4)
    job_services.converge()  # a cycle records the new quotas' figures (the history's first samples)
    return pai_world


def band_names(content: bytes) -> list[str]:
    return [trace["name"] for trace in figure(content, "quota-allocation")["data"]]


def test_the_quota_in_view_stacks_its_children_each_with_its_guarantee_line(
    deeper_pai: dict[str, AbstractUser],
) -> None:
    admin = client_as(deeper_pai, "platform-admin")
    page = admin.get(f"/quotas/?view=overview&quota={quota_id('Quota1.1')}").content
    assert band_names(page) == [
        "Quota1.1.a",
        "Quota1.1.b",
        "Quota1.1 (own jobs)",
        "Quota1.1.a guarantee",
        "Quota1.1.b guarantee",
        "Quota1.1 (own jobs) guarantee",
    ]
    area = figure(page, "quota-allocation")
    # Stacked: a's line at 0 + 8, b's on a's band (0) + 4, the parent's own guarantee 12 - 8 - 4.
    lines = {trace["name"]: trace["y"][-1] for trace in area["data"][3:]}
    assert lines == {"Quota1.1.a guarantee": 8, "Quota1.1.b guarantee": 4, "Quota1.1 (own jobs) guarantee": 0}
    # train-b (24 GPUs) runs on Quota1.1 itself: its own band, 24 over a guarantee of 0.
    assert area["data"][2]["y"][-1] == 24
    # The live sums follow the children's topics and the parent's.
    followed = re.search(rb'data-chart="quota-allocation"[^>]*data-live-topics="([^"]*)"', page)
    assert followed is not None
    topics = set(followed[1].split())
    assert {f"quota:{quota_id(name)}".encode() for name in ("Quota1.1", "Quota1.1.a", "Quota1.1.b")} <= topics
    # The treemap opens at the quota in view.
    assert figure(page, "quota-treemap")["data"][0]["level"] == str(quota_id("Quota1.1"))


def test_the_picker_trail_and_range_links_work_without_javascript(deeper_pai: dict[str, AbstractUser]) -> None:
    admin = client_as(deeper_pai, "platform-admin")
    page = admin.get(f"/quotas/?view=overview&quota={quota_id('Quota1.1')}&range=24h").content.decode()
    # A GET form: its select names the quota, hidden fields keep the view and the range.
    form = re.search(r'<form method="get" action="/quotas/" class="filter quota-picker".*?</form>', page, re.S)
    assert form is not None
    assert '<input type="hidden" name="view" value="overview">' in form[0]
    assert '<input type="hidden" name="range" value="24h">' in form[0]
    options = re.findall(r'<option value="(\d*)"( selected)?>([^<]*)</option>', form[0])
    # Only quotas with children to stack; the one in view is chosen; depth shows as indentation.
    assert [(value, chosen, label.replace("\u2003", "  ")) for value, chosen, label in options] == [
        (str(quota_id("Quota1")), "", "Quota1"),
        (str(quota_id("Quota1.1")), " selected", "  Quota1.1"),
    ]
    assert '<label for="quota-in-view">Stack the quotas under</label>' in form[0]
    # The trail goes back up; the range switch keeps the quota in view.
    trail = re.search(r'<nav class="trail" aria-label="Quota in view">(.*?)</nav>', page, re.S)
    assert trail is not None
    assert f'href="/quotas/?view=overview&amp;range=24h&amp;quota={quota_id("Quota1")}"' in trail[1]
    assert '<span aria-current="location">Quota1.1</span>' in trail[1]
    assert f'href="?view=overview&amp;quota={quota_id("Quota1.1")}&amp;range=1h"' in page
    # The table under the chart: a band whose quota has children links to their stack.
    back = admin.get("/quotas/?view=overview").content.decode()
    assert f'href="/quotas/?view=overview&amp;range=1h&amp;quota={quota_id("Quota1.1")}"' in back


def test_without_a_quota_in_view_several_roots_are_stacked_and_all_quotas_is_a_choice(
    deeper_pai: dict[str, AbstractUser],
) -> None:
    quota_services.create_quota(actor=None, name="Pool2", gpus=0)
    admin = client_as(deeper_pai, "platform-admin")
    page = admin.get("/quotas/?view=overview").content
    assert band_names(page)[:2] == ["Quota1", "Pool2"]
    assert b'<option value="" selected>All quotas (the roots)</option>' in page
    assert "level" not in figure(page, "quota-treemap")["data"][0]
    assert band_names(admin.get("/quotas/?view=overview&quota=").content)[:2] == ["Quota1", "Pool2"]


@pytest.mark.parametrize("asked", ["999999", "abc", "-1"])
def test_a_quota_in_view_that_does_not_exist_is_a_404(deeper_pai: dict[str, AbstractUser], asked: str) -> None:
    assert client_as(deeper_pai, "platform-admin").get(f"/quotas/?view=overview&quota={asked}").status_code == 404


def test_a_quota_the_user_may_not_see_is_a_404_like_a_missing_one(deeper_pai: dict[str, AbstractUser]) -> None:
    developer = client_as(deeper_pai, "developer")  # workspace-b: Quota1.1 only
    assert developer.get(f"/quotas/?view=overview&quota={quota_id('Quota1.2')}").status_code == 404
    page = developer.get(f"/quotas/?view=overview&quota={quota_id('Quota1.1')}")
    assert page.status_code == 200


def test_a_child_hidden_from_the_user_is_named_in_the_parents_own_band(deeper_pai: dict[str, AbstractUser]) -> None:
    # The developer sees Quota1.1 (bound) but not its children: Quota1.1 stands alone, as a leaf.
    developer = client_as(deeper_pai, "developer")
    assert band_names(developer.get("/quotas/?view=overview").content) == ["Quota1.1", "Quota1.1 guarantee"]
    # Bound to Quota1.1.a as well, the developer sees one of two children: the rest is the parent's band.
    workspace = Workspace.objects.get(name="workspace-b")
    workspace_services.update_workspace(
        actor=None, workspace=workspace, quotas=[*workspace.quotas.all(), Quota.objects.get(name="Quota1.1.a")]
    )
    names = band_names(developer.get(f"/quotas/?view=overview&quota={quota_id('Quota1.1')}").content)
    assert names[:2] == ["Quota1.1.a", "Quota1.1 (own jobs and quotas not shown)"]


def test_htmx_asking_for_the_section_gets_the_section_alone(deeper_pai: dict[str, AbstractUser]) -> None:
    admin = client_as(deeper_pai, "platform-admin")
    answer = admin.get(
        f"/quotas/?view=overview&quota={quota_id('Quota1.1')}",
        headers={"HX-Request": "true", "HX-Target": "allocation-section"},
    )
    body = answer.content.decode()
    assert answer.status_code == 200
    assert body.lstrip().startswith('<section id="allocation-section"')
    assert "quota-treemap" not in body and "<html" not in body
    assert band_names(answer.content)[0] == "Quota1.1.a"


@pytest.fixture
def two_pools(deeper_pai: dict[str, AbstractUser]) -> dict[str, AbstractUser]:
    """PAI's tree in the default pool beside a second root (Pool2), and a100 with its own two roots:
    batch (4, with batch.x 2 under it) and infer (4), on one 8-GPU node."""
    quota_services.create_quota(actor=None, name="Pool2", gpus=0)
    a100 = quota_services.create_pool(actor=None, name="a100")
    quota_services.create_node(actor=None, name="a-1", gpus=8, pool=a100)
    batch = quota_services.create_quota(actor=None, name="batch", pool=a100, gpus=4)
    quota_services.create_quota(actor=None, name="batch.x", parent=batch, gpus=2)
    quota_services.create_quota(actor=None, name="infer", pool=a100, gpus=4)
    job_services.converge()
    return deeper_pai


def test_the_section_stacks_the_chosen_pools_roots_and_its_links_keep_the_pool(
    two_pools: dict[str, AbstractUser],
) -> None:
    admin = client_as(two_pools, "platform-admin")
    page = admin.get("/quotas/?view=overview&pool=a100&range=24h").content.decode()
    # The roots stacked are a100's alone; the picker offers a100's quotas alone.
    assert band_names(page.encode()) == ["batch", "infer", "batch guarantee", "infer guarantee"]
    form = re.search(r'<form method="get" action="/quotas/" class="filter quota-picker".*?</form>', page, re.S)
    assert form is not None
    assert '<input type="hidden" name="pool" value="a100">' in form[0]
    options = re.findall(r'<option value="(\d*)"( selected)?>([^<]*)</option>', form[0])
    assert options == [("", " selected", "All quotas (the roots)"), (str(quota_id("batch")), "", "batch")]
    # The stack link, the range switch and the treemap's click keep the pool.
    stack = f"/quotas/?view=overview&amp;pool=a100&amp;range=24h&amp;quota={quota_id('batch')}"
    assert f'class="stack-link" href="{stack}" hx-get="{stack}"' in page
    assert 'href="?view=overview&amp;pool=a100&amp;range=1h"' in page
    assert 'data-drill-url="?view=overview&amp;pool=a100&amp;range=24h"' in page
    # Stacking batch's quotas: the trail back up to the pool's roots keeps the pool too.
    inside = admin.get(f"/quotas/?view=overview&pool=a100&range=24h&quota={quota_id('batch')}").content.decode()
    assert band_names(inside.encode())[:2] == ["batch.x", "batch (own jobs)"]
    trail = re.search(r'<nav class="trail" aria-label="Quota in view">(.*?)</nav>', inside, re.S)
    assert trail is not None
    assert '<li><a href="/quotas/?view=overview&amp;pool=a100&amp;range=24h" ' in trail[1]  # All quotas
    assert f'href="?view=overview&amp;pool=a100&amp;quota={quota_id("batch")}&amp;range=7d"' in inside
    # Without a pool, every pool's roots are stacked, as before.
    assert set(band_names(admin.get("/quotas/?view=overview").content)[:4]) == {"Quota1", "Pool2", "batch", "infer"}


def test_a_quota_of_another_pool_than_the_chosen_one_is_a_404(two_pools: dict[str, AbstractUser]) -> None:
    # The page shows the chosen pool alone: a quota outside it is not there, as a missing one.
    admin = client_as(two_pools, "platform-admin")
    assert admin.get(f"/quotas/?view=overview&pool=a100&quota={quota_id('Quota1.1')}").status_code == 404
    assert admin.get(f"/quotas/?view=overview&pool=default&quota={quota_id('Quota1.1')}").status_code == 200
