"""The charts of the Resource Quotas Overview and the Quota page's Monitoring tab, through the
Django client: the figures the server builds, who sees which quotas, constant queries, and the
plotly bundle and stylesheet served from our own origin."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from console import plotly_assets
from console.staticfinders import bundle_path
from quotas.models import Quota
from scheduling.clock import get_clock
from scheduling.models import AllocationSample
from tests.console.conftest import quota_id
from tests.console.test_quota_pages import _queries_for, client_as

pytestmark = pytest.mark.django_db


def figure(content: bytes, element_id: str) -> dict:  # type: ignore[type-arg]
    match = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', content.decode())
    assert match, f"no {element_id} data block"
    return json.loads(match.group(1))  # type: ignore[no-any-return]


def test_the_overview_has_a_treemap_of_guarantees_coloured_by_use(pai_world: dict[str, AbstractUser]) -> None:
    page = client_as(pai_world, "platform-admin").get("/quotas/?view=overview").content
    treemap = figure(page, "quota-treemap")["data"][0]
    assert treemap["type"] == "treemap"
    by_name = dict(
        zip(treemap["labels"], zip(treemap["values"], treemap["marker"]["colors"], strict=True), strict=True)
    )
    # train-b holds 24 GPUs of Quota1.1's 12: over quota, at the top of the colour scale.
    assert by_name["Quota1.1"] == (12, 2.0)
    assert by_name["Quota1"] == (32, 0.75)
    assert treemap["parents"][treemap["labels"].index("Quota1.1")] == str(quota_id("Quota1"))
    assert b"Over quota now:" in page and b"Quota1.1 (24 of 12 GPUs)" in page
    assert b'data-testid="quota-row"' not in page  # the table is the List view's
    # What the page's script recolours a box from when its quota's figures change.
    live = figure(page, "quota-treemap")["live"]
    assert live["kind"] == "treemap" and live["quotas"][str(quota_id("Quota1.1"))] == [24, 12]


def test_the_overview_stacks_allocation_under_the_single_root(pai_world: dict[str, AbstractUser]) -> None:
    area = figure(client_as(pai_world, "platform-admin").get("/quotas/?view=overview").content, "quota-allocation")
    bands, lines = area["data"][:3], area["data"][3:]
    assert [trace["name"] for trace in bands] == ["Quota1.2", "Quota1.1", "Quota1 (own jobs)"]
    assert all(trace["stackgroup"] == "allocated" for trace in bands)
    assert bands[1]["y"][-1] == 24  # Quota1.1 now
    assert bands[2]["y"][-1] == 0  # Quota1 runs no job of its own
    # Each band's guarantee, as a dashed line on top of the bands below it: Quota1.1's band tops
    # out at 0 + 24, above its line at 0 + 12, which shows it is over quota.
    names = [line["name"] for line in lines]
    assert names == ["Quota1.2 guarantee", "Quota1.1 guarantee", "Quota1 (own jobs) guarantee"]
    assert all("stackgroup" not in line and line["line"]["dash"] == "dash" for line in lines)
    assert [line["y"][-1] for line in lines] == [20, 0 + 12, 0 + 24 + 0]
    assert [line["customdata"][-1] for line in lines] == [20, 12, 0]
    assert lines[1]["line"]["color"] == bands[1]["line"]["color"]


def test_the_area_holds_each_figure_until_its_next_sample(pai_world: dict[str, AbstractUser]) -> None:
    team = Quota.objects.get(name="Quota1.2")
    now = get_clock().now()
    AllocationSample.objects.filter(quota=team).delete()
    AllocationSample.objects.bulk_create(
        [
            AllocationSample(quota=team, at=now - timedelta(hours=2), allocated=4, guaranteed=20, fair_share=4),
            AllocationSample(quota=team, at=now - timedelta(minutes=30), allocated=6, guaranteed=20, fair_share=6),
        ]
    )
    area = figure(client_as(pai_world, "platform-admin").get("/quotas/?view=overview").content, "quota-allocation")
    band = next(trace for trace in area["data"] if trace["name"] == "Quota1.2")
    assert band["y"][0] == 4  # the sample from before the window says where it starts
    assert band["y"][-1] == 6


def test_others_see_only_their_bound_quotas_in_the_overview(pai_world: dict[str, AbstractUser]) -> None:
    page = client_as(pai_world, "developer").get("/quotas/?view=overview").content
    assert figure(page, "quota-treemap")["data"][0]["labels"] == ["Quota1.1"]
    area = figure(page, "quota-allocation")
    assert [trace["name"] for trace in area["data"]] == ["Quota1.1", "Quota1.1 guarantee"]
    # The page follows only the quotas she may see.
    assert f'data-live-topics="quota:{quota_id("Quota1.1")}"'.encode() in page
    outsider = client_as(pai_world, "outsider").get("/quotas/?view=overview").content
    assert b"quota-treemap" not in outsider and b"No quota is visible to you" in outsider


def test_the_monitoring_tab_draws_allocated_guaranteed_and_fair_share(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "developer")
    partial = client.get(f"/quotas/{quota_id('Quota1.1')}/?tab=monitoring", headers={"HX-Request": "true"}).content
    assert b"<html" not in partial
    lines = figure(partial, "quota-monitoring")["data"]
    assert [line["name"] for line in lines] == ["Allocated", "Guaranteed", "Fair share"]
    assert [line["y"][-1] for line in lines] == [24, 12, 24]
    full = client.get(f"/quotas/{quota_id('Quota1.1')}/?tab=monitoring").content
    assert b'data-tab="monitoring" class="active"' in full and b"console/charts.js" in full
    assert client_as(pai_world, "outsider").get(f"/quotas/{quota_id('Quota1.1')}/?tab=monitoring").status_code == 404


def test_the_monitoring_tab_before_any_sample_says_so(pai_world: dict[str, AbstractUser]) -> None:
    AllocationSample.objects.all().delete()
    page = client_as(pai_world, "platform-admin").get(f"/quotas/{quota_id('Quota1')}/?tab=monitoring").content
    assert b"No allocation recorded yet for Quota1" in page and b"quota-monitoring" not in page


def test_the_chart_pages_take_a_constant_number_of_queries(pai_world: dict[str, AbstractUser]) -> None:
    from quotas.services import NewQuota, create_quota_tree

    client = client_as(pai_world, "platform-admin")
    overview = _queries_for(client, "/quotas/?view=overview")
    monitoring = _queries_for(client, f"/quotas/{quota_id('Quota1')}/?tab=monitoring")
    create_quota_tree(
        actor=None,
        quotas=[NewQuota(name="Pool2", gpus=0)] + [NewQuota(name=f"Pool2.{i}", parent="Pool2") for i in range(60)],
    )
    assert _queries_for(client, "/quotas/?view=overview") == overview
    assert _queries_for(client, f"/quotas/{quota_id('Pool2')}/?tab=monitoring") == monitoring


def test_plotly_and_its_stylesheet_are_served_from_our_origin(pai_world: dict[str, AbstractUser]) -> None:
    from django.contrib.staticfiles import finders

    assert finders.find("plotly/plotly.min.js") == str(bundle_path())
    assert finders.find("console/plotly.css")


def test_the_plotly_stylesheet_matches_the_pinned_bundle() -> None:
    """Upgrading plotly changes its rules: regenerate with `python -m console.plotly_assets`."""
    assert plotly_assets.STYLESHEET.read_text(encoding="utf-8") == plotly_assets.stylesheet_text()


def test_without_a_valid_view_the_list_is_shown(client: Client, pai_world: dict[str, AbstractUser]) -> None:
    page = client_as(pai_world, "platform-admin").get("/quotas/?view=pie").content
    assert b'data-testid="quota-row"' in page and b'data-view="list" class="active"' in page


def test_the_list_links_each_row_where_the_url_map_says(pai_world: dict[str, AbstractUser]) -> None:
    """The rows' links are built from /quotas/ (a thousand rows reversed eleven times each cost a
    second); they must stay what console/urls.py maps."""
    from django.urls import reverse

    page = client_as(pai_world, "platform-admin").get("/quotas/").content.decode()
    quota = quota_id("Quota1.1")
    for name in ("quota-detail", "quota-new-child", "quota-scale", "quota-transfer", "quota-edit", "quota-delete"):
        assert f'href="{reverse(name, args=[quota])}"' in page, name


@pytest.mark.parametrize("value", [0, 8, 12.0, 0.5, 0.125, 0.8, 2.4000000000000004, 1 / 3, 1000, 0.0004, None])
def test_the_gpus_filter_writes_what_floatformat_writes(value: float | None) -> None:
    from django.template.defaultfilters import floatformat

    from console.templatetags.console_format import gpus

    assert gpus(value) == ("" if value is None else floatformat(value, "-3"))
