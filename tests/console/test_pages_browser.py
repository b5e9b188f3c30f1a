"""The base layout in a real browser: sign in, see who you are and the navigation, sign out."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from tests.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sign_in_shows_the_user_and_navigation_then_sign_out(
    live_server: LiveServer, make_user: Callable[..., AbstractUser], browser_page: Page
) -> None:
    make_user("alice")
    page = browser_page
    page.goto(f"{live_server.url}/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()

    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()

    expect(page.get_by_test_id("signed-in-user")).to_have_text("alice")
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Dashboard")).to_be_visible()
    expect(page.locator("link[rel=stylesheet]")).to_have_attribute("href", "/static/console/console.css")

    page.get_by_role("button", name="Sign out", exact=True).click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_wrong_password_is_said_plainly(
    live_server: LiveServer, make_user: Callable[..., AbstractUser], browser_page: Page
) -> None:
    make_user("alice")
    browser_page.goto(f"{live_server.url}/login/")
    browser_page.get_by_label("Username").fill("alice")
    browser_page.get_by_label("Password").fill("wrong")
    browser_page.get_by_role("button", name="Sign in").click()
    expect(browser_page.get_by_text("Your username and password did not match")).to_be_visible()
