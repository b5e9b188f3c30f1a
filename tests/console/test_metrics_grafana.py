"""docs/grafana/gpu-quota-console.json draws only what /metrics serves: every metric name in its
PromQL (panels and variables) is a sample name of a real scrape, parsed with prometheus-client's
text parser, after a reclaim (so preemptions exist), cycles and GPU samples."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from tests.console.test_metrics import reclaim

pytestmark = pytest.mark.django_db

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "gpu-quota-console.json"

# PromQL words that are not metric names.
KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
)
LABEL_MATCHERS = re.compile(r"\{[^}]*\}")
RANGES = re.compile(r"\[[^\]]*\]")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)")
STRINGS = re.compile(r'"[^"]*"')
IDENTIFIER = re.compile(r"(?<![\w$.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")


def metric_names(expression: str) -> set[str]:
    """The metric names an expression selects: identifiers that are not functions, keywords,
    label names (inside {} or by (...)) nor numbers."""
    bare = STRINGS.sub('""', expression)
    bare = LABEL_MATCHERS.sub("", bare)
    bare = RANGES.sub("", bare)
    bare = GROUPING.sub("", bare)
    return {
        name
        for name, call in IDENTIFIER.findall(bare)
        if not call and name not in KEYWORDS and not name.startswith("__")
    }


def expressions(dashboard: dict[str, Any]) -> list[str]:
    found = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["definition"])
    return found


def served_names() -> set[str]:
    response = Client().get("/metrics")
    assert response.status_code == 200
    return {
        sample.name for family in text_string_to_metric_families(response.content.decode()) for sample in family.samples
    }


def test_the_parser_finds_metric_names_and_skips_the_rest() -> None:
    expression = (
        'histogram_quantile(0.99, sum by (le) (rate(gqc_cycle_duration_seconds_bucket{job="x"}[$__rate_interval])))'
        " / on (cluster_queue) DCGM_FI_DEV_GPU_UTIL offset 5m"
    )
    assert metric_names(expression) == {"gqc_cycle_duration_seconds_bucket", "DCGM_FI_DEV_GPU_UTIL"}
    assert metric_names("label_values(gqc_pending_workloads, cluster_queue)") == {
        "gqc_pending_workloads",
        "cluster_queue",
    }


def test_every_metric_the_dashboard_draws_is_served(pai_world: dict[str, AbstractUser]) -> None:
    from telemetry import services as telemetry_services

    reclaim(pai_world)
    telemetry_services.record_simulated_samples()
    served = served_names()
    dashboard = json.loads(DASHBOARD.read_text())
    used: set[str] = set()
    for expression in expressions(dashboard):
        names = metric_names(expression)
        if expression.startswith("label_values("):
            names = {re.match(r"label_values\((\w+)", expression)[1]}  # type: ignore[index]
        assert names, f"no metric in {expression!r}"
        used |= names
    missing = sorted(used - served)
    assert not missing, f"the dashboard draws {missing}, which /metrics does not serve"
    # The charts the issue asks for are all there.
    for name in (
        "gqc_cluster_queue_resource_usage",
        "gqc_cluster_queue_nominal_quota",
        "gqc_cluster_queue_fair_share",
        "gqc_pending_workloads",
        "gqc_admitted_active_workloads",
        "gqc_preempted_workloads_total",
        "gqc_cycle_duration_seconds_bucket",
        "gqc_admission_wait_time_seconds_bucket",
        "DCGM_FI_DEV_GPU_UTIL",
    ):
        assert name in used, name
    assert any(
        panel["type"] == "heatmap" and "DCGM_FI_DEV_GPU_UTIL" in panel["targets"][0]["expr"]
        for panel in dashboard["panels"]
    )
    assert sum("histogram_quantile(" in expression for expression in expressions(dashboard)) >= 4


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all(target["expr"].strip() for target in panel["targets"]), panel["title"]
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys()
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
