"""Revocation (issue 14): "sign out everywhere" (API and page) and deactivation (users API and
admin) end every token and session of the user, and only theirs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser, User
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from quotas.models import AuditRecord
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def _token_for(username: str) -> str:
    response = APIClient().post("/api/v1/auth/token/", {"username": username, "password": PASSWORD}, format="json")
    assert response.status_code == 200
    token: str = response.json()["token"]
    return token


def _token_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def _browser(user: AbstractUser) -> Client:
    client = Client()
    assert isinstance(user, User)  # auth.User is the user model: what force_login is typed for
    client.force_login(user)
    assert client.get("/").status_code == 200
    return client


@pytest.fixture
def alice_everywhere(make_user: Callable[..., AbstractUser]) -> dict[str, Any]:
    """Alice signed in on two browsers and with an API token; Bob signed in beside her."""
    alice = make_user("alice")
    bob = make_user("bob")
    return {
        "alice": alice,
        "laptop": _browser(alice),
        "phone": _browser(alice),
        "token": _token_for("alice"),
        "bob_browser": _browser(bob),
        "bob_token": _token_for("bob"),
    }


def _assert_alice_is_signed_out_everywhere(world: dict[str, Any]) -> None:
    assert world["laptop"].get("/").status_code == 302
    assert world["phone"].get("/").status_code == 302
    assert _token_client(world["token"]).get("/api/v1/quotas/").status_code == 401
    assert not Token.objects.filter(user=world["alice"]).exists()
    # Bob is untouched.
    assert world["bob_browser"].get("/").status_code == 200
    assert _token_client(world["bob_token"]).get("/api/v1/quotas/").status_code == 200


def test_sign_out_everywhere_by_api(alice_everywhere: dict[str, Any]) -> None:
    response = _token_client(alice_everywhere["token"]).post("/api/v1/auth/sign-out-everywhere/")
    assert response.status_code == 200
    assert response.json() == {"tokens": 1, "sessions": 2}
    _assert_alice_is_signed_out_everywhere(alice_everywhere)
    assert AuditRecord.objects.filter(action="user.sign_out_everywhere", object_repr="alice").exists()


def test_sign_out_everywhere_by_api_needs_a_signed_in_user(api_client: APIClient) -> None:
    assert api_client.post("/api/v1/auth/sign-out-everywhere/").status_code == 401


def test_sign_out_everywhere_from_the_user_menu(alice_everywhere: dict[str, Any]) -> None:
    laptop: Client = alice_everywhere["laptop"]
    page = laptop.get("/").content.decode()
    assert 'action="/sign-out-everywhere/"' in page
    assert ">Sign out everywhere</button>" in page
    response = laptop.post("/sign-out-everywhere/", follow=True)
    assert response.redirect_chain[-1][0] == "/login/"
    assert "Signed out everywhere: 2 session(s) ended and 1 API token(s) revoked." in response.content.decode()
    _assert_alice_is_signed_out_everywhere(alice_everywhere)


def test_sign_out_everywhere_page_takes_post_with_csrf_only(make_user: Callable[..., User]) -> None:
    alice = make_user("alice")
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.get("/sign-out-everywhere/").status_code == 405
    assert client.post("/sign-out-everywhere/").status_code == 403  # no CSRF token
    assert client.get("/").status_code == 200  # still signed in


def test_deactivating_a_user_through_the_api_revokes_their_tokens_and_sessions(
    alice_everywhere: dict[str, Any], admin_client_api: APIClient
) -> None:
    alice = alice_everywhere["alice"]
    response = admin_client_api.patch(f"/api/v1/users/{alice.pk}/", {"is_active": False}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["is_active"] is False
    _assert_alice_is_signed_out_everywhere(alice_everywhere)
    record = AuditRecord.objects.get(action="user.update", object_repr="alice")
    assert record.after is not None
    assert record.after["revoked"] == {"tokens": 1, "sessions": 2}
    # An inactive user cannot sign in again either.
    again = APIClient().post("/api/v1/auth/token/", {"username": "alice", "password": PASSWORD}, format="json")
    assert again.status_code == 400


def test_other_changes_through_the_api_revoke_nothing(
    alice_everywhere: dict[str, Any], admin_client_api: APIClient
) -> None:
    alice = alice_everywhere["alice"]
    response = admin_client_api.patch(f"/api/v1/users/{alice.pk}/", {"email": "a@example.org"}, format="json")
    assert response.status_code == 200
    assert alice_everywhere["laptop"].get("/").status_code == 200
    assert _token_client(alice_everywhere["token"]).get("/api/v1/quotas/").status_code == 200


def test_only_platform_admins_change_users_and_not_names_or_passwords(
    alice_everywhere: dict[str, Any], admin_client_api: APIClient
) -> None:
    alice = alice_everywhere["alice"]
    bob_api = _token_client(alice_everywhere["bob_token"])
    assert bob_api.patch(f"/api/v1/users/{alice.pk}/", {"is_active": False}, format="json").status_code == 403
    refused = admin_client_api.patch(f"/api/v1/users/{alice.pk}/", {"password": "new-password-1"}, format="json")
    assert refused.status_code == 400
    assert "password" in refused.json()
    assert admin_client_api.put(f"/api/v1/users/{alice.pk}/", {}, format="json").status_code == 405
    alice.refresh_from_db()
    assert alice.is_active and alice.check_password(PASSWORD)


def test_deactivating_a_user_in_the_admin_revokes_their_tokens_and_sessions(
    alice_everywhere: dict[str, Any], platform_admin: User
) -> None:
    alice = alice_everywhere["alice"]
    admin = Client()
    admin.force_login(platform_admin)
    form = {
        "username": "alice",
        "email": "",
        "first_name": "",
        "last_name": "",
        # is_active left out: the checkbox unticked
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01",
        "initial-date_joined_1": "00:00:00",
        "_save": "Save",
    }
    response = admin.post(f"/admin/auth/user/{alice.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    alice.refresh_from_db()
    assert alice.is_active is False
    _assert_alice_is_signed_out_everywhere(alice_everywhere)
    assert AuditRecord.objects.filter(action="user.deactivate", object_repr="alice").exists()


def test_the_deactivation_service_revokes_without_a_request(alice_everywhere: dict[str, Any]) -> None:
    from console import services

    user = get_user_model().objects.get(username="alice")
    services.update_user(actor=None, user=user, is_active=False)
    _assert_alice_is_signed_out_everywhere(alice_everywhere)


def test_an_admin_cannot_deactivate_their_own_account(
    platform_admin: AbstractUser, admin_client_api: APIClient
) -> None:
    response = admin_client_api.patch(f"/api/v1/users/{platform_admin.pk}/", {"is_active": False}, format="json")
    assert response.status_code == 400
    assert response.json() == {"is_active": ["You cannot deactivate your own account; ask another platform admin."]}
    platform_admin.refresh_from_db()
    assert platform_admin.is_active
