"""Navigation: the Admin item for platform admins, the sign-in page for a signed-in user, the
favicon, and the way back from the API docs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import AbstractUser, User
from django.test import Client

pytestmark = pytest.mark.django_db


def signed_in(user: AbstractUser) -> Client:
    client = Client()
    assert isinstance(user, User)  # auth.User is the user model: what force_login is typed for
    client.force_login(user)  # axes' backend refuses Client.login()
    return client


def nav_labels(client: Client) -> list[str]:
    return [item["label"] for item in client.get("/").context["navigation"]]


def test_platform_admins_get_an_admin_item_and_members_do_not(make_user: Callable[..., AbstractUser]) -> None:
    admin = signed_in(make_user("root", platform_admin=True))
    member = signed_in(make_user("dave"))
    assert nav_labels(admin)[-1] == "Admin"
    assert "Admin" not in nav_labels(member)
    assert '<a href="/admin/">Admin</a>' in admin.get("/").content.decode()


def test_the_sign_in_page_sends_a_signed_in_user_to_the_dashboard(make_user: Callable[..., AbstractUser]) -> None:
    answer = signed_in(make_user("dave")).get("/login/")
    assert answer.status_code == 302
    assert answer["Location"] == "/"
    assert Client().get("/login/").status_code == 200  # signed out: the form


def test_a_favicon_is_linked_and_favicon_ico_is_no_404(make_user: Callable[..., AbstractUser]) -> None:
    page = Client().get("/login/").content.decode()
    assert '<link rel="icon" href="/static/console/favicon.svg" type="image/svg+xml">' in page
    answer = Client().get("/favicon.ico")
    assert answer.status_code == 301
    assert answer["Location"] == "/static/console/favicon.svg"


def test_the_api_docs_link_back_to_the_console(make_user: Callable[..., AbstractUser]) -> None:
    page = signed_in(make_user("dave")).get("/api/docs/").content.decode()
    assert '<a href="/">← GPU Quota Console</a>' in page
    assert 'id="swagger-ui"' in page
