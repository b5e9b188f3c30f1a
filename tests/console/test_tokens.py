"""Expiring API tokens (issue 14): a token is refused with a 401 CONSOLE_TOKEN_TTL_HOURS after it
was issued; signing in again then issues a new one."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import AbstractUser
from django.utils import timezone
from rest_framework.test import APIClient

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
TOKEN = "/api/v1/auth/token/"


def _sign_in(username: str = "alice") -> dict[str, Any]:
    response = APIClient().post(TOKEN, {"username": username, "password": PASSWORD}, format="json")
    assert response.status_code == 200, response.json()
    body: dict[str, Any] = response.json()
    return body


def _me(token: str) -> Any:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get("/api/v1/quotas/")


def test_a_token_works_until_its_ttl_then_is_a_clear_401(make_user: Callable[..., AbstractUser]) -> None:
    make_user("alice")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        body = _sign_in()
        assert body["expires_at"].startswith((start + timedelta(hours=720)).strftime("%Y-%m-%dT%H:%M"))
        clock.shift(timedelta(hours=719, minutes=59))
        assert _me(body["token"]).status_code == 200
        clock.shift(timedelta(minutes=1))
        expired = _me(body["token"])
        assert expired.status_code == 401
        assert expired["WWW-Authenticate"] == "Token"
        assert expired.json()["detail"].startswith("Token expired at ")
        assert "sign in again at /api/v1/auth/token/" in expired.json()["detail"]


def test_signing_in_after_expiry_issues_a_new_token(make_user: Callable[..., AbstractUser]) -> None:
    make_user("alice")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        old = _sign_in()["token"]
        assert _sign_in()["token"] == old  # still valid: the same token
        clock.shift(timedelta(hours=721))
        new = _sign_in()["token"]
        assert new != old
        assert _me(new).status_code == 200
        assert _me(old).status_code == 401


def test_a_client_still_sending_its_expired_token_can_sign_in_again(make_user: Callable[..., AbstractUser]) -> None:
    make_user("alice")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        old = _sign_in()["token"]
        clock.shift(timedelta(hours=721))
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {old}")
        response = client.post(TOKEN, {"username": "alice", "password": PASSWORD}, format="json")
        assert response.status_code == 200
        assert response.json()["token"] != old


def test_the_ttl_comes_from_the_setting(make_user: Callable[..., AbstractUser], settings: Any) -> None:
    settings.CONSOLE_TOKEN_TTL_HOURS = 1
    make_user("alice")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        token = _sign_in()["token"]
        clock.shift(timedelta(minutes=59))
        assert _me(token).status_code == 200
        clock.shift(timedelta(minutes=1))
        assert _me(token).status_code == 401
