"""Fixtures every test package shares: users and API clients."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

if TYPE_CHECKING:
    from playwright.sync_api import Page

PASSWORD = "correct-horse-battery"


@pytest.fixture
def make_user(db: None) -> Callable[..., AbstractUser]:
    def make(username: str, *, platform_admin: bool = False) -> AbstractUser:
        user: AbstractUser = get_user_model().objects.create_user(
            username=username, password=PASSWORD, is_superuser=platform_admin, is_staff=platform_admin
        )
        return user

    return make


@pytest.fixture
def platform_admin(make_user: Callable[..., AbstractUser]) -> AbstractUser:
    return make_user("platform-admin", platform_admin=True)


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def client_for() -> Callable[[AbstractUser | None], APIClient]:
    """An API client signed in as the given user (None: anonymous)."""

    def make(user: AbstractUser | None) -> APIClient:
        client = APIClient()
        if user is not None:
            client.force_authenticate(user=user)
        return client

    return make


@pytest.fixture
def admin_client_api(platform_admin: AbstractUser, client_for: Callable[[AbstractUser | None], APIClient]) -> APIClient:
    return client_for(platform_admin)


CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def browser_page() -> Iterator[Page]:
    """A real headless Chromium page (Debian's chromium, driven by Playwright)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI needs /usr/bin/chromium for the browser tests (.ci/run installs it)")
        pytest.skip("no /usr/bin/chromium here: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; Django's ORM then refuses to run
    # "from an async context" although the test itself is synchronous.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        page = browser.new_page()
        page.set_default_timeout(10_000)
        try:
            yield page
        finally:
            # Queries made while Playwright's loop runs get connections of that context; close
            # them here, or they keep the test database from being dropped.
            from django.db import connections

            connections.close_all()
            browser.close()
