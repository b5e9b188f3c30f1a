"""The Job page's utilisation chart and the Nodes page's utilisation cells, as the server writes
them (the browser test draws them); queries that do not grow with samples."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import AbstractUser, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from scheduling import services as job_services
from telemetry import services
from telemetry.models import GpuSample, Resolution

pytestmark = pytest.mark.django_db


def client_of(user: AbstractUser) -> Client:
    client = Client()
    assert isinstance(user, User)  # auth.User is the user model: what force_login is typed for
    client.force_login(user)
    return client


def figure_of(html: str, job_id: int) -> dict[str, Any]:
    found = re.search(rf'<script id="job-gpus-{job_id}" type="application/json">(.*?)</script>', html, re.S)
    assert found, "the figure's json_script"
    return dict(json.loads(found.group(1)))


def test_job_page_charts_each_gpu_of_the_job(cluster: dict[str, Any]) -> None:
    train = cluster["train"]
    start = datetime.now(UTC) - timedelta(seconds=60)
    train.__class__.objects.filter(pk=train.pk).update(submitted_at=start - timedelta(seconds=1))
    with time_machine.travel(start, tick=False) as traveller:
        for _ in range(6):
            services.record_simulated_samples()
            traveller.shift(timedelta(seconds=5))
    html = client_of(cluster["dave"]).get(f"/jobs/{train.pk}/").content.decode()
    assert f'data-job-gpus="job:{train.pk}"' in html and f'data-live-topics="job:{train.pk}"' in html
    assert "console/job_gpus.js" in html and "console/charts.js" in html
    figure = figure_of(html, train.pk)
    placement = train.placements.get()
    assert figure["gpus"] == [f"{placement.node_id}:{gpu}" for gpu in sorted(placement.devices)]
    util, memory = figure["data"][:2], figure["data"][2:]
    assert [trace["name"] for trace in util] == [f"dgx-1 GPU {gpu}" for gpu in sorted(placement.devices)]
    assert all(len(trace["y"]) == 6 and all(85 <= y <= 95 for y in trace["y"]) for trace in util)
    assert all(trace["yaxis"] == "y2" and trace["y"][0] >= 0.8 * 80 for trace in memory)


def test_a_long_job_uses_minutes_then_the_recent_samples(cluster: dict[str, Any]) -> None:
    train = cluster["train"]
    now = datetime.now(UTC)
    train.__class__.objects.filter(pk=train.pk).update(submitted_at=now - timedelta(hours=5))
    placement = train.placements.get()
    minutes = [
        (placement.node_id, gpu, train.pk, Resolution.MINUTE, now - timedelta(minutes=m), 90.0, 70000, 81920)
        for m in range(10, 200)
        for gpu in placement.devices
    ]
    from scheduling import bulk

    bulk.insert(GpuSample, services._COLUMNS, minutes)
    services.record_simulated_samples()
    client = client_of(cluster["dave"])
    with CaptureQueriesContext(connection) as queries:
        html = client.get(f"/jobs/{train.pk}/").content.decode()
    figure = figure_of(html, train.pk)
    assert "1-minute averages" in html
    assert len(figure["data"][0]["y"]) == 190 + 1  # the minutes, then the sample not yet averaged
    telemetry_queries = [q for q in queries.captured_queries if "telemetry_gpusample" in q["sql"]]
    assert len(telemetry_queries) == 2


def chart_tag(html: str) -> str:
    found = re.search(r'<figure [^>]*data-testid="job-gpu-chart"[^>]*>', html)
    assert found, "the chart's figure"
    return found.group(0)


def test_a_running_job_without_samples_says_so_and_keeps_its_chart_hidden_for_the_first(
    cluster: dict[str, Any],
) -> None:
    """No empty chart (its time axis read "Jan 2000 … Nov 2000"): a sentence, and the figure hidden
    until job_gpus.js hears the first sample (data-chart-later; charts.js draws only data-chart)."""
    train = cluster["train"]
    html = client_of(cluster["dave"]).get(f"/jobs/{train.pk}/").content.decode()
    assert "No GPU readings yet: the chart appears when the job&#x27;s GPUs first report." in html
    figure = chart_tag(html)
    assert " hidden " in figure and f'data-chart-later="job-gpus-{train.pk}"' in figure and "data-chart=" not in figure
    assert f'data-live-topics="job:{train.pk}"' in figure  # the page still hears the job's samples
    assert figure_of(html, train.pk)["gpus"] == []
    services.record_simulated_samples()
    html = client_of(cluster["dave"]).get(f"/jobs/{train.pk}/").content.decode()
    assert "No GPU readings yet" not in html and "Per GPU since the job was submitted" in html
    figure = chart_tag(html)
    assert " hidden " not in figure and f'data-chart="job-gpus-{train.pk}"' in figure


def test_a_pending_job_says_it_has_not_started(cluster: dict[str, Any]) -> None:
    waiting = job_services.submit_job(
        actor=cluster["dave"],
        workspace=cluster["lab"],
        quota=cluster["train"].quota,
        name="big",
        kind="training",
        gpus=8,
        replicas=2,
    )
    job_services.converge()
    waiting.refresh_from_db()
    assert waiting.state == "pending"
    html = client_of(cluster["dave"]).get(f"/jobs/{waiting.pk}/").content.decode()
    assert "No GPU readings yet: the job has not started." in html
    assert " hidden " in chart_tag(html)


def test_an_ended_job_without_samples_has_no_chart(cluster: dict[str, Any]) -> None:
    train = cluster["train"]
    job_services.cancel_job(actor=cluster["dave"], job=train)
    html = client_of(cluster["dave"]).get(f"/jobs/{train.pk}/").content.decode()
    assert "No utilisation was recorded for this job in the last 24 hours." in html
    assert 'data-testid="job-gpu-chart"' not in html


def test_nodes_page_shows_each_gpus_utilisation(cluster: dict[str, Any], platform_admin: AbstractUser) -> None:
    client = client_of(platform_admin)
    html = client.get("/nodes/").content.decode()
    assert "data-gpu-util" not in html and html.count(">—</span>") >= 16  # no sample yet: a dash
    services.record_simulated_samples()
    with CaptureQueriesContext(connection) as few:
        client.get("/nodes/")
    for _ in range(3):
        services.record_simulated_samples()
    with CaptureQueriesContext(connection) as more:
        html = client.get("/nodes/").content.decode()
    assert len(more.captured_queries) == len(few.captured_queries)
    node = cluster["nodes"][0]
    assert html.count('data-gpu-util="') == 16
    assert f'data-live="nodes:util.{node.pk}.0"' in html
    assert re.search(r'data-gpu-util="(8[5-9]|9[0-5])\.\d+"', html)  # training's GPUs
    assert 'data-gpu-util="0.000000"' in html  # an idle one
    assert ' style="' not in html
