"""Live updates in headless Chromium (issue 12): the job page's state changes without a reload
when the job is cancelled through the API, and the badge says "Live".

pytest-django's live_server speaks WSGI only, so this serves the real ASGI application (HTTP
with static files, and /ws/live/ over the Redis channel layer) with uvicorn in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from channels.routing import ProtocolTypeRouter
from django.contrib.auth.models import AbstractUser
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application
from playwright.sync_api import Page, expect
from rest_framework.test import APIClient

from console.asgi import application
from scheduling.models import Job
from tests.conftest import PASSWORD
from tests.console.conftest import check_accessibility

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.fixture
def asgi_server(transactional_db: None) -> Iterator[str]:
    """The console's ASGI application on a free loopback port; its URL."""
    served = ProtocolTypeRouter({"http": ASGIStaticFilesHandler(get_asgi_application()), "websocket": application})
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(served, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


def test_job_page_state_changes_live_when_cancelled_through_the_api(
    asgi_server: str, pai_world: dict[str, AbstractUser], browser_page: Page, settings: Any
) -> None:
    settings.SCHEDULER_PUBLISH_EVENTS = True
    page = browser_page
    page.goto(f"{asgi_server}/login/")
    page.get_by_label("Username").fill("dave")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("signed-in-user")).to_contain_text("dave")

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

    # Another client cancels it; in a thread of its own, as Playwright's event loop runs in this one.
    answers: list[int] = []

    def cancel() -> None:
        client = APIClient()
        client.force_authenticate(user=pai_world["developer"])
        answers.append(client.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json").status_code)

    canceller = threading.Thread(target=cancel)
    canceller.start()
    canceller.join(timeout=10)
    assert answers == [200]

    expect(state).to_have_text("Cancelled", timeout=5000)
    expect(state).to_have_class("badge cancelled")
    assert page.evaluate("() => window.__notReloaded === true"), "the page was reloaded"


def test_job_list_state_cells_are_marked_live(
    asgi_server: str, pai_world: dict[str, AbstractUser], browser_page: Page
) -> None:
    page = browser_page
    page.goto(f"{asgi_server}/login/")
    page.get_by_label("Username").fill("dave")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.goto(f"{asgi_server}/jobs/")
    job = Job.objects.get(name="train-b")
    expect(page.locator(f'[data-live="job:{job.pk}:state"]')).to_have_text("Running")
    expect(page.get_by_test_id("live-status")).to_have_text("Live")
