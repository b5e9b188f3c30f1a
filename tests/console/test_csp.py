"""Content-Security-Policy (issue 14): our own origin only, the websocket to it, no inline code;
and every page works under it in a real browser, with no violation reported."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from playwright.sync_api import ConsoleMessage, Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas.models import Quota
from scheduling.models import Job
from tests.scheduling.test_pages import build_pai, sign_in
from workspaces.models import Workspace


def _directives(header: str) -> dict[str, list[str]]:
    parts = (part.strip().split() for part in header.split(";") if part.strip())
    return {name: values for name, *values in parts}


@pytest.mark.django_db
def test_the_policy_allows_our_origin_and_its_websocket_only(client: Client) -> None:
    policy = _directives(client.get("/login/")["Content-Security-Policy"])
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["img-src"] == ["'self'", "data:"]
    assert policy["connect-src"] == ["'self'", "ws://testserver"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert not any("unsafe" in value for values in policy.values() for value in values)


@pytest.mark.django_db
def test_behind_tls_the_websocket_is_wss_of_the_same_host(client: Client) -> None:
    response = client.get("/login/", secure=True, headers={"host": "localhost"})
    assert _directives(response["Content-Security-Policy"])["connect-src"] == ["'self'", "wss://localhost"]


@pytest.mark.django_db
def test_api_answers_carry_the_policy_too(client: Client) -> None:
    assert "frame-ancestors 'none'" in client.get("/api/v1/quotas/")["Content-Security-Policy"]


ROOT = Path(__file__).resolve().parents[2]
_INLINE = {
    "style attribute": re.compile(r"\sstyle\s*=", re.IGNORECASE),
    "<style> block": re.compile(r"<style[\s>]", re.IGNORECASE),
    "inline <script>": re.compile(r"<script(?![^>]*\ssrc=)[^>]*>", re.IGNORECASE),
    "event handler attribute": re.compile(r"\son[a-z]+\s*=", re.IGNORECASE),
    "javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
}


def test_no_template_carries_inline_code() -> None:
    """Pages the browser walk cannot reach (500.html, error pages) are held to the policy here."""
    found = []
    for template in sorted(ROOT.glob("**/templates/**/*.html")):
        if ".venv" in template.parts:
            continue
        text = template.read_text()
        found += [f"{template.relative_to(ROOT)}: {what}" for what, pattern in _INLINE.items() if pattern.search(text)]
    assert found == []


# Chromium reports a violation both as a console error ("Refused to … because it violates the
# following Content Security Policy directive") and as a `securitypolicyviolation` event; the
# init script (run by the browser's debugger, outside the page's policy) logs the event too.
_REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  console.error(`CSP violation: ${event.violatedDirective} blocked ${event.blockedURI}`);
});
"""


def _is_violation(message: ConsoleMessage) -> bool:
    text = message.text
    return "CSP violation" in text or "Content Security Policy" in text


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_every_page_works_under_the_policy(
    live_server: LiveServer, make_user: Callable[..., AbstractUser], browser_page: Page, settings: Any
) -> None:
    settings.SCHEDULER_TRIGGER = "none"
    build_pai(make_user)
    page = browser_page
    violations: list[str] = []
    page.add_init_script(_REPORT_VIOLATIONS)

    def collect(message: ConsoleMessage) -> None:
        if _is_violation(message):
            violations.append(f"{page.url}: {message.text}")

    page.on("console", collect)

    login = page.goto(f"{live_server.url}/login/")
    assert login is not None and "frame-ancestors 'none'" in (login.header_value("content-security-policy") or "")
    sign_in(page, live_server.url, "admin")

    workspace = Workspace.objects.get(name="workspace-b")
    job = Job.objects.get(name="train-b")
    first_member = workspace.memberships.order_by("pk")[0].pk
    pages = [
        ("/", "Welcome"),
        ("/quotas/", "Resource Quotas"),
        ("/nodes/", "Nodes"),
        ("/workspaces/", None),
        (f"/workspaces/{workspace.pk}/", None),
        (f"/workspaces/{workspace.pk}/quotas/", None),
        (f"/workspaces/{workspace.pk}/scheduling/", "Resource Usage"),
        (f"/workspaces/{workspace.pk}/usage/", "Last 24 hours"),
        (f"/workspaces/{workspace.pk}/members/{workspace.memberships.order_by('pk')[0].pk}/remove/", None),
        (f"/workspaces/{workspace.pk}/members/{first_member}/role/preview/?member-{first_member}-role=visitor", None),
        ("/jobs/", None),
        ("/jobs/new/", "Submit job"),
        (f"/jobs/{job.pk}/", None),
    ]
    for path, heading in pages:
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None and response.status == 200, path
        assert "default-src 'self'" in (response.header_value("content-security-policy") or ""), path
        if heading:
            expect(page.get_by_role("heading", name=heading).first).to_be_visible()
        # The stylesheet applied: the top bar is dark (a refused stylesheet leaves it white).
        expect(page.locator("header.topbar")).to_have_css("background-color", "rgb(20, 32, 51)")
    # The quota tree keeps its indentation without style="" attributes.
    page.goto(f"{live_server.url}/quotas/")
    child = page.locator('tr[data-quota="Quota1.1"] th').first
    expect(child).to_have_css("padding-left", "28px")  # depth 1 (console.css: .quota-tree .depth-1)

    # The Nodes page's GPU grid draws how much of each GPU is held from a script file, and the
    # Quota page's Nodes tab brings the page's stylesheet along when htmx swaps it in.
    page.goto(f"{live_server.url}/nodes/")
    expect(page.locator(".gpu-cell.held .gpu-fill").first).to_have_css("width", re.compile(r"^[1-9]"))
    page.goto(f"{live_server.url}/quotas/")
    page.get_by_role("link", name="Quota1", exact=True).click()
    page.get_by_role("navigation", name="Quota sections").get_by_role("link", name="Nodes").click()
    expect(page.get_by_test_id("quota-nodes")).to_be_visible()

    # The charts: plotly.js draws them with no <style> element and no style="" (console/plotly_assets.py).
    page.goto(f"{live_server.url}/quotas/?view=overview")
    expect(page.locator("[data-chart][data-ready='true']")).to_have_count(2)
    quota = Quota.objects.get(name="Quota1.1")
    page.goto(f"{live_server.url}/quotas/{quota.pk}/?tab=monitoring")
    expect(page.locator("[data-chart][data-ready='true']")).to_have_count(1)

    # +Add on the Scheduling Configurations tab adds a row from a script file, in place.
    page.goto(f"{live_server.url}/workspaces/{workspace.pk}/scheduling/")
    rows = page.locator("main [data-testid=rule-form-row]")
    before = rows.count()
    page.get_by_role("button", name="+Add").click()
    expect(rows).to_have_count(before + 1)

    # The job list's state filter submits on change, from a script file (it was an onchange="").
    page.goto(f"{live_server.url}/jobs/")
    page.get_by_label("State").select_option("running")
    expect(page).to_have_url(f"{live_server.url}/jobs/?state=running")

    # Submit job: the live estimate arrives by htmx as the form changes, and the kind's presets
    # come from a script file (no inline handler), all without a violation.
    page.goto(f"{live_server.url}/jobs/new/")
    page.get_by_label("GPUs per replica").fill("2")
    expect(page.get_by_test_id("estimate")).to_contain_text("needs 2 GPUs")  # the pool is full here
    page.get_by_label("Kind").select_option("inference")
    expect(page.get_by_label("Priority")).to_have_value("7")

    # Swagger UI: its init script is a file, its inline style a stylesheet; it renders the operations.
    docs = page.goto(f"{live_server.url}/api/docs/")
    assert docs is not None and docs.status == 200
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
    expect(page.locator("body")).to_have_css("background-color", "rgb(250, 250, 250)")

    # Sign-out-everywhere and the lockout page also render under the policy.
    page.goto(f"{live_server.url}/")
    page.get_by_role("button", name="Sign out everywhere").click()
    expect(page.get_by_text("Signed out everywhere")).to_be_visible()

    assert violations == []
