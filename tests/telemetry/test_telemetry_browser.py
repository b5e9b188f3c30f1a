"""Telemetry in headless Chromium, over the real ASGI application (websockets on the Redis layer):
the Nodes page colours each GPU cell by utilisation, with the figure in words, and recolours it
live; the Job page's chart has a trace per GPU and grows live with Plotly.extendTraces. axe on
both; screenshots at 1280 and 390 px in /tmp/shots-telemetry/."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.db import connections
from playwright.sync_api import Page, expect

from quotas import services as quota_services
from quotas.models import Node
from scheduling import services as job_services
from scheduling.models import Job
from telemetry import services
from telemetry.services import GpuReading
from tests.console.conftest import check_accessibility, pai_world  # noqa: F401 (a fixture)
from tests.console.test_live_browser import asgi_server, served, sign_in_as  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(90)]

SHOTS = Path(os.environ.get("TELEMETRY_SHOTS", "/tmp/shots-telemetry"))


def in_a_thread(write: Callable[[], Any]) -> None:
    """Publishing after commit uses async_to_sync, which refuses to run in the thread of
    Playwright's event loop; another client writes, as in production."""
    done: list[Any] = []

    def run() -> None:
        try:
            done.append(write())
        finally:
            # This thread's own connection goes back to the pool: on PostgreSQL each one left
            # behind takes a slot of the worker's pool for good, and late in a run it ran dry.
            connections.close_all()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(timeout=20)
    assert done, "the write did not finish"


def rgb(page: Page, selector: str, prop: str) -> tuple[int, ...]:
    text = page.eval_on_selector(selector, f"e => getComputedStyle(e)['{prop}']")
    return tuple(int(part) for part in text[text.index("(") + 1 : text.index(")")].split(",")[:3])


def test_nodes_page_colours_gpu_cells_by_utilisation_live(
    asgi_server: str,  # noqa: F811
    pai_world: dict[str, AbstractUser],  # noqa: F811
    browser_page: Page,
    settings: Any,
) -> None:
    settings.SCHEDULER_PUBLISH_EVENTS = True
    page = browser_page
    in_a_thread(services.record_simulated_samples)
    busy = Job.objects.get(name="train-b").placements.order_by("node__name").first()
    assert busy is not None
    idle_node = Node.objects.exclude(pk__in=Job.objects.get(name="train-b").placements.values("node_id")).get()
    sign_in_as(page, asgi_server, "platform-admin")
    page.goto(f"{asgi_server}/nodes/")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    hot = f"section[data-node-id='{busy.node_id}'] li[data-gpu='{busy.devices[0]}']"
    cold = f"section[data-node-id='{idle_node.pk}'] li[data-gpu='0']"
    expect(page.locator(hot).get_by_test_id("gpu-util")).to_have_text(re.compile(r"Util (8[5-9]|9[0-5]) %"))
    expect(page.locator(cold).get_by_test_id("gpu-util")).to_have_text("Util 0 %")
    hot_colour = rgb(page, f"{hot} .gpu-heat", "backgroundColor")
    cold_colour = rgb(page, f"{cold} .gpu-heat", "backgroundColor")
    assert hot_colour[0] > 200 and hot_colour[1] < 100, hot_colour  # red: busy
    assert cold_colour == (42, 157, 143), cold_colour  # teal: idle
    assert rgb(page, hot, "borderLeftColor") == hot_colour
    check_accessibility(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(SHOTS / f"nodes-{width}.png"), full_page=False)
    page.set_viewport_size({"width": 1280, "height": 900})

    # The agent of that node reports its first GPU nearly idle: text and colour follow, no reload.
    node = Node.objects.get(pk=busy.node_id)
    readings = [GpuReading(gpu, 12.0 if gpu == busy.devices[0] else 90.0, 4096, 81920) for gpu in range(node.gpus)]
    in_a_thread(lambda: services.record_gpu_samples(node, readings))
    expect(page.locator(hot).get_by_test_id("gpu-util")).to_have_text("Util 12 %")
    page.wait_for_function(
        "s => getComputedStyle(document.querySelector(s)).backgroundColor !== 'rgb(214, 40, 40)'"
        " && getComputedStyle(document.querySelector(s)).backgroundColor.indexOf('rgb(') === 0",
        arg=f"{hot} .gpu-heat",
    )
    cooled = rgb(page, f"{hot} .gpu-heat", "backgroundColor")
    assert cooled[1] > cooled[0], cooled  # towards teal


def test_job_page_chart_has_a_trace_per_gpu_and_grows_live(
    asgi_server: str,  # noqa: F811
    pai_world: dict[str, AbstractUser],  # noqa: F811
    browser_page: Page,
    settings: Any,
) -> None:
    settings.SCHEDULER_PUBLISH_EVENTS = True
    page = browser_page
    job = Job.objects.get(name="train-b")
    for _ in range(2):
        in_a_thread(services.record_simulated_samples)
    sign_in_as(page, asgi_server, "dave")
    page.goto(f"{asgi_server}/jobs/{job.pk}/")
    chart = page.get_by_test_id("job-gpu-chart")
    expect(chart).to_have_attribute("data-ready", "true", timeout=20_000)
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    traces = page.eval_on_selector("[data-testid=job-gpu-chart]", "e => e.data.map(t => [t.name, t.x.length])")
    assert len(traces) == 48  # 24 GPUs: utilisation and memory each
    assert all(length == 2 for _name, length in traces)
    assert traces[0][0].endswith("GPU 0")
    check_accessibility(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (390, 1280):
        page.set_viewport_size({"width": width, "height": 900})
        page.reload()  # drawn at that width, as a phone opens it
        expect(chart).to_have_attribute("data-ready", "true", timeout=20_000)
        page.screenshot(path=str(SHOTS / f"job-{width}.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= width
    expect(page.get_by_test_id("live-status")).to_have_text("Live")

    in_a_thread(services.record_simulated_samples)
    expect(chart).to_have_attribute("data-extended", "1", timeout=10_000)
    lengths = page.eval_on_selector("[data-testid=job-gpu-chart]", "e => e.data.map(t => t.x.length)")
    assert lengths == [3] * 48
    last = page.eval_on_selector("[data-testid=job-gpu-chart]", "e => e.data[0].y[e.data[0].y.length - 1]")
    assert 85 <= last <= 95


UINITS_SHOTS = Path(os.environ.get("JOB_PAGE_SHOTS", "/tmp/uinits-shots"))


def test_a_pending_job_says_it_has_no_readings_and_its_chart_comes_with_the_first_sample(
    asgi_server: str,  # noqa: F811
    pai_world: dict[str, AbstractUser],  # noqa: F811
    browser_page: Page,
    settings: Any,
) -> None:
    """No empty chart for a job without samples (its time axis read "Jan 2000 … Nov 2000" above a
    tall blank area): a sentence. The page, left open, follows the job: the sentence changes when
    it starts, and its first GPU samples bring the chart, drawn and growing, without a reload."""
    settings.SCHEDULER_PUBLISH_EVENTS = True
    page = browser_page
    running = Job.objects.get(name="train-b")
    job_services.submit_job(
        actor=pai_world["developer"],
        workspace=running.workspace,
        quota=running.quota,
        name="sweep",
        kind="training",
        gpus=8,
        replicas=2,
    )
    job_services.converge()
    waiting = Job.objects.get(name="sweep")
    assert waiting.state == "pending"
    sign_in_as(page, asgi_server, "dave")
    page.goto(f"{asgi_server}/jobs/{waiting.pk}/")
    gpus = page.get_by_role("region", name="GPU utilisation and memory")
    expect(gpus.get_by_text("No GPU readings yet: the job has not started.")).to_be_visible()
    chart = page.get_by_test_id("job-gpu-chart")
    expect(chart).to_be_hidden()
    assert "2000" not in gpus.inner_text()
    assert gpus.bounding_box()["height"] < 160  # type: ignore[index]  # no tall blank area
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    check_accessibility(page)
    UINITS_SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(UINITS_SHOTS / f"job-pending-{width}.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.set_viewport_size({"width": 1280, "height": 900})

    def make_room() -> None:
        job_services.cancel_job(actor=None, job=running)
        job_services.converge()

    in_a_thread(make_room)
    expect(page.get_by_test_id("job-state")).to_have_text("Running", timeout=10_000)
    expect(gpus.get_by_text("No GPU readings yet: the chart appears when the job's GPUs first report.")).to_be_visible()
    expect(chart).to_be_hidden()

    in_a_thread(services.record_simulated_samples)
    expect(chart).to_be_visible(timeout=10_000)
    expect(chart).to_have_attribute("data-ready", "true", timeout=20_000)
    expect(chart).to_have_attribute("data-extended", "1", timeout=10_000)
    expect(gpus.get_by_text("Per GPU since the job was submitted")).to_be_visible()
    traces = page.eval_on_selector("[data-testid=job-gpu-chart]", "e => e.data.map(t => [t.name, t.x.length])")
    assert len(traces) == 32 and all(length == 1 for _name, length in traces)  # 16 GPUs: utilisation, memory
    first_tick = page.eval_on_selector("[data-testid=job-gpu-chart]", "e => String(e.layout.xaxis.range[0])")
    assert first_tick.startswith(str(waiting.submitted_at.year)), first_tick  # not 2000: the samples' time
    in_a_thread(services.record_simulated_samples)
    expect(chart).to_have_attribute("data-extended", "2", timeout=10_000)
    check_accessibility(page)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        # plotly.js follows the window's width (responsive), after its own short delay.
        page.wait_for_function("w => document.documentElement.scrollWidth <= w", arg=width, timeout=5_000)
        page.screenshot(path=str(UINITS_SHOTS / f"job-started-{width}.png"), full_page=True)


def test_gpu_samples_do_not_refresh_the_job_pages_polled_block(
    asgi_server: str,  # noqa: F811
    pai_world: dict[str, AbstractUser],  # noqa: F811
    browser_page: Page,
    settings: Any,
) -> None:
    """The placement block is refreshed on a state change; a sample every 5 s must not cost each
    viewer an HTTP request (live.js refreshes polled regions only for other changes)."""
    settings.SCHEDULER_PUBLISH_EVENTS = True
    page = browser_page
    job = Job.objects.get(name="train-b")
    sign_in_as(page, asgi_server, "dave")
    page.goto(f"{asgi_server}/jobs/{job.pk}/")
    chart = page.get_by_test_id("job-gpu-chart")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url) if "part=live" in request.url else None)
    for expected in ("1", "2"):  # the first sample also shows and draws the chart (no sample before it)
        in_a_thread(services.record_simulated_samples)
        expect(chart).to_have_attribute("data-extended", expected, timeout=20_000)
    page.wait_for_timeout(600)  # past live.js's 300 ms refresh debounce
    assert requests == []


def test_nodes_page_of_more_than_250_nodes_follows_a_far_node_live(
    asgi_server: str,  # noqa: F811
    make_user: Callable[..., AbstractUser],
    browser_page: Page,
    settings: Any,
) -> None:
    """Past LIVE_MAX_SUBSCRIPTIONS (250) nodes, the page still hears every node: one `nodes`
    topic, not one per node (before, node 251 and later never changed without a reload)."""
    settings.SCHEDULER_PUBLISH_EVENTS = True
    make_user("platform-admin", platform_admin=True)
    first = quota_services.create_node(actor=None, name="node-000", gpus=2)
    Node.objects.bulk_create(Node(pool=first.pool, name=f"node-{index:03d}", gpus=2) for index in range(1, 300))
    far = Node.objects.get(name="node-299")
    page = browser_page
    sign_in_as(page, asgi_server, "platform-admin")
    page.goto(f"{asgi_server}/nodes/")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    cell = f"section[data-node-id='{far.pk}'] li[data-gpu='1']"
    expect(page.locator(cell).get_by_test_id("gpu-util")).to_have_text("Util —")
    samples = [GpuReading(0, 20.0, 1024, 81920), GpuReading(1, 93.0, 2048, 81920)]
    in_a_thread(lambda: services.record_gpu_samples(far, samples))
    expect(page.locator(cell).get_by_test_id("gpu-util")).to_have_text("Util 93 %")
    page.wait_for_function(
        "s => getComputedStyle(document.querySelector(s)).backgroundColor.indexOf('rgb(2') === 0",
        arg=f"{cell} .gpu-heat",
    )
    assert rgb(page, f"{cell} .gpu-heat", "backgroundColor")[0] > 200  # red: busy
