"""Live updates in headless Chromium (issue 12): the job page's state changes without a reload
when the job is cancelled through the API, and the badge says "Live"; a waiting job's History
follows its start.

pytest-django's live_server speaks WSGI only, so this serves the real ASGI application (HTTP
with static files, and /ws/live/ over the Redis channel layer) with uvicorn in a thread."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from channels.routing import ProtocolTypeRouter
from django.contrib.auth.models import AbstractUser
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application
from django.db import connections
from playwright.sync_api import Page, expect
from rest_framework.test import APIClient

from console.asgi import application
from quotas.models import Quota
from scheduling import services as job_services
from scheduling.models import Job, JobEvent
from tests.conftest import PASSWORD
from tests.console.conftest import check_accessibility
from workspaces.models import Workspace

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


class AsgiServer:
    """The console's ASGI application (HTTP with static files, and websockets) served by uvicorn
    in a thread on one loopback port; it can be stopped and started again on the same port."""

    def __init__(self) -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = ProtocolTypeRouter(
            {"http": ASGIStaticFilesHandler(get_asgi_application()), "websocket": application}
        )
        self.server: uvicorn.Server | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        self.server = uvicorn.Server(uvicorn.Config(self.app, lifespan="off", log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [listener]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.server.started, "uvicorn did not start"

    def stop(self) -> None:
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(timeout=10)
        self.server = self.thread = None


@pytest.fixture
def served(transactional_db: None) -> Iterator[AsgiServer]:
    server = AsgiServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def asgi_server(served: AsgiServer) -> str:
    return served.url


def sign_in_as(page: Page, url: str, username: str) -> None:
    page.goto(f"{url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("signed-in-user")).to_contain_text(username)


def cancel_through_the_api(user: AbstractUser, job: Job) -> None:
    """Another client cancels it; in a thread of its own, as Playwright's event loop runs in this
    one (and publishing after commit may not run inside an event loop's thread)."""
    answers: list[int] = []

    def cancel() -> None:
        client = APIClient()
        client.force_authenticate(user=user)
        try:
            answers.append(client.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json").status_code)
        finally:
            connections.close_all()  # this thread's own: a pooled connection left open is a slot lost

    canceller = threading.Thread(target=cancel)
    canceller.start()
    canceller.join(timeout=10)
    assert answers == [200]


def test_job_page_state_changes_live_when_cancelled_through_the_api(
    asgi_server: str, pai_world: dict[str, AbstractUser], browser_page: Page, settings: Any
) -> None:
    settings.SCHEDULER_PUBLISH_EVENTS = True
    page = browser_page
    sign_in_as(page, asgi_server, "dave")

    job = Job.objects.get(name="train-b")
    page.goto(f"{asgi_server}/jobs/{job.pk}/")
    state = page.get_by_test_id("job-state")
    expect(state).to_have_text("Running")
    badge = page.get_by_test_id("live-status")
    expect(badge).to_have_text("Live")
    expect(badge).to_have_attribute("aria-live", "polite")
    check_accessibility(page)
    marker = page.evaluate("() => { window.__notReloaded = true; return true; }")
    assert marker
    # While the socket is live the block's 2 s poll is skipped; a change refreshes it instead.
    polls: list[str] = []
    page.on("request", lambda request: polls.append(request.url) if "part=live" in request.url else None)
    page.wait_for_timeout(2500)
    assert polls == [], "the job page polled while its socket was live"

    cancel_through_the_api(pai_world["developer"], job)

    expect(state).to_have_text("Cancelled", timeout=5000)
    expect(state).to_have_class("badge cancelled")
    assert page.evaluate("() => window.__notReloaded === true"), "the page was reloaded"
    for _ in range(50):  # the change's refresh of the block (placement, events): once, not on a timer
        if polls:
            break
        page.wait_for_timeout(100)
    assert polls, "the change on the socket did not refresh the job's block"


def test_job_list_state_cells_are_marked_live(
    asgi_server: str, pai_world: dict[str, AbstractUser], browser_page: Page
) -> None:
    page = browser_page
    sign_in_as(page, asgi_server, "dave")
    page.goto(f"{asgi_server}/jobs/")
    job = Job.objects.get(name="train-b")
    expect(page.locator(f'[data-live="job:{job.pk}:state"]')).to_have_text("Running")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")


def test_reconnect_reads_the_state_missed_while_the_server_was_down(
    served: AsgiServer, pai_world: dict[str, AbstractUser], browser_page: Page, settings: Any
) -> None:
    """The server goes away, the job is cancelled meanwhile (no socket hears it), the server comes
    back: the page reconnects, re-reads its state over HTTP and shows Cancelled, without a reload."""
    settings.SCHEDULER_PUBLISH_EVENTS = True
    page = browser_page
    sign_in_as(page, served.url, "dave")
    job = Job.objects.get(name="train-b")
    page.goto(f"{served.url}/jobs/")
    state = page.locator(f'[data-live="job:{job.pk}:state"]')
    badge = page.get_by_test_id("live-status")
    expect(badge).to_have_text("Live")
    page.evaluate("() => { window.__notReloaded = true; }")

    served.stop()
    expect(badge).to_have_text("Reconnecting…")
    cancel_through_the_api(pai_world["developer"], job)
    expect(state).to_have_text("Running")  # nobody was listening
    served.start()

    expect(badge).to_have_text("Live", timeout=15000)
    expect(state).to_have_text("Cancelled", timeout=5000)
    expect(state).to_have_class("badge cancelled")
    assert page.evaluate("() => window.__notReloaded === true"), "the page was reloaded"


def test_job_page_history_shows_the_start_without_a_reload(
    asgi_server: str, pai_world: dict[str, AbstractUser], browser_page: Page, settings: Any
) -> None:
    """A job waits, its page is open; another job is cancelled and it starts: the state and the
    History (its events) follow without a reload. The History comes with the live block's answer,
    out of band (docs/live.md); with it taken out, History stayed at "Submitted"."""
    settings.SCHEDULER_PUBLISH_EVENTS = True
    quota, workspace = Quota.objects.get(name="Quota1.1"), Workspace.objects.get(name="workspace-b")
    waiting = job_services.submit_job(
        actor=pai_world["developer"],
        workspace=workspace,
        quota=quota,
        name="wait-b",
        kind="training",
        gpus=8,
        replicas=2,
    )
    job_services.converge()
    assert Job.objects.get(pk=waiting.pk).state == "pending"  # 16 asked, 8 free

    page = browser_page
    sign_in_as(page, asgi_server, "dave")
    page.goto(f"{asgi_server}/jobs/{waiting.pk}/")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
    state = page.get_by_test_id("job-state")
    expect(state).to_have_text("Pending")
    history = page.get_by_role("table", name="History")
    expect(history.get_by_test_id("job-event")).to_have_count(1)
    expect(history.get_by_role("cell", name="Submitted", exact=True)).to_be_visible()
    page.evaluate("() => { window.__notReloaded = true; }")

    cancel_through_the_api(pai_world["developer"], Job.objects.get(name="train-b"))  # frees 24 GPUs

    expect(state).to_have_text("Running", timeout=5000)
    expect(history.get_by_role("cell", name="Admitted", exact=True)).to_be_visible(timeout=5000)
    kinds = history.get_by_test_id("job-event").locator("td:nth-child(2)").all_inner_texts()
    recorded = [event.get_kind_display() for event in JobEvent.objects.filter(job=waiting).order_by("at", "id")]
    assert kinds == recorded and kinds[0] == "Submitted" and "Admitted" in kinds
    assert page.evaluate("() => window.__notReloaded === true"), "the page was reloaded"
    check_accessibility(page)
    shots = Path(os.environ.get("TABS_SHOTS", "/tmp/uilive-shots"))
    shots.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(300)
        page.screenshot(path=str(shots / f"job-history-started-{width}.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= width
