"""Sign-in throttling (issue 14): a username is locked after CONSOLE_SIGNIN_FAILURE_LIMIT failed
sign-ins for CONSOLE_SIGNIN_LOCKOUT_MINUTES, on the token endpoint and the login page alike."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
TOKEN = "/api/v1/auth/token/"
LOCKED = "too many failed sign-ins for dave; try again in 5 minutes"


def _token(client: APIClient, username: str, password: str) -> Any:
    return client.post(TOKEN, {"username": username, "password": password}, format="json")


def test_the_fifth_failure_locks_the_username_and_the_answer_says_so(
    make_user: Callable[..., AbstractUser], api_client: APIClient
) -> None:
    make_user("dave")
    for _ in range(4):
        assert _token(api_client, "dave", "wrong").status_code == 400
    locked = _token(api_client, "dave", "wrong")
    assert locked.status_code == 429
    assert locked.json() == {"non_field_errors": [LOCKED]}
    right = _token(api_client, "dave", PASSWORD)
    assert right.status_code == 429
    assert right.json() == {"non_field_errors": [LOCKED]}
    assert "token" not in right.json()


def test_the_right_password_after_25_wrong_ones_is_refused_until_the_lockout_ends(
    make_user: Callable[..., AbstractUser], api_client: APIClient
) -> None:
    make_user("dave")
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        statuses = [_token(api_client, "dave", f"guess-{n}").status_code for n in range(25)]
        assert statuses == [400] * 4 + [429] * 21
        assert _token(api_client, "dave", PASSWORD).status_code == 429
        clock.shift(timedelta(minutes=4, seconds=59))
        assert _token(api_client, "dave", PASSWORD).status_code == 429
        clock.shift(timedelta(minutes=5, seconds=1))  # five minutes after the last failure
        answer = _token(api_client, "dave", PASSWORD)
        assert answer.status_code == 200, answer.json()
        assert answer.json()["token"]


def test_a_success_resets_the_count(make_user: Callable[..., AbstractUser], api_client: APIClient) -> None:
    make_user("dave")
    for _ in range(4):
        assert _token(api_client, "dave", "wrong").status_code == 400
    assert _token(api_client, "dave", PASSWORD).status_code == 200
    for _ in range(4):
        assert _token(api_client, "dave", "wrong").status_code == 400  # counting starts again
    assert _token(api_client, "dave", PASSWORD).status_code == 200


def test_the_lockout_is_per_username(make_user: Callable[..., AbstractUser], api_client: APIClient) -> None:
    make_user("dave")
    make_user("erin")
    for _ in range(5):
        _token(api_client, "dave", "wrong")
    assert _token(api_client, "dave", PASSWORD).status_code == 429
    assert _token(api_client, "erin", PASSWORD).status_code == 200


def test_the_limits_come_from_the_settings(
    make_user: Callable[..., AbstractUser], api_client: APIClient, settings: Any
) -> None:
    settings.CONSOLE_SIGNIN_FAILURE_LIMIT = 2
    settings.CONSOLE_SIGNIN_LOCKOUT_MINUTES = 1
    make_user("dave")
    assert _token(api_client, "dave", "wrong").status_code == 400
    locked = _token(api_client, "dave", "wrong")
    assert (locked.status_code, locked.json()) == (
        429,
        {"non_field_errors": ["too many failed sign-ins for dave; try again in 1 minute"]},
    )
    with time_machine.travel(timezone.now() + timedelta(minutes=1, seconds=1)):
        assert _token(api_client, "dave", PASSWORD).status_code == 200


def test_the_settings_read_the_environment() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "from django.conf import settings; "
        "print(settings.CONSOLE_SIGNIN_FAILURE_LIMIT, settings.CONSOLE_SIGNIN_LOCKOUT_MINUTES, "
        "settings.CONSOLE_TOKEN_TTL_HOURS)"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "CONSOLE_SIGNIN_FAILURE_LIMIT": "7",
        "CONSOLE_SIGNIN_LOCKOUT_MINUTES": "15",
        "CONSOLE_TOKEN_TTL_HOURS": "12",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "7 15 12.0"


def test_the_login_page_locks_too_and_says_the_same_sentence(
    make_user: Callable[..., AbstractUser], client: Client
) -> None:
    make_user("dave")
    for _ in range(4):
        page = client.post("/login/", {"username": "dave", "password": "wrong"})
        assert page.status_code == 200
        assert b"did not match" in page.content
    locked = client.post("/login/", {"username": "dave", "password": "wrong"})
    assert locked.status_code == 429
    right = client.post("/login/", {"username": "dave", "password": PASSWORD})
    assert right.status_code == 429
    text = right.content.decode()
    assert LOCKED in text
    assert "<h1>Sign in</h1>" in text  # the console's own page, with its form, not axes' bare one
    assert "Traceback" not in text and "Account locked" not in text
    assert client.get("/").status_code == 302  # not signed in


def test_the_page_and_the_api_share_one_count(
    make_user: Callable[..., AbstractUser], client: Client, api_client: APIClient
) -> None:
    make_user("dave")
    for _ in range(3):
        client.post("/login/", {"username": "dave", "password": "wrong"})
    for _ in range(2):
        _token(api_client, "dave", "wrong")
    assert _token(api_client, "dave", PASSWORD).status_code == 429
    assert client.post("/login/", {"username": "dave", "password": PASSWORD}).status_code == 429


def test_a_page_sign_in_resets_the_count(make_user: Callable[..., AbstractUser], client: Client) -> None:
    make_user("dave")
    for _ in range(4):
        client.post("/login/", {"username": "dave", "password": "wrong"})
    assert client.post("/login/", {"username": "dave", "password": PASSWORD}).status_code == 302
    client.post("/logout/")
    for _ in range(4):
        assert client.post("/login/", {"username": "dave", "password": "wrong"}).status_code == 200
    assert client.post("/login/", {"username": "dave", "password": PASSWORD}).status_code == 302


def test_the_token_request_states_its_bounds_in_the_schema(admin_client_api: APIClient) -> None:
    schema = admin_client_api.get("/api/schema/?format=json").json()
    fields = schema["components"]["schemas"]["TokenRequest"]["properties"]
    assert (fields["username"]["minLength"], fields["username"]["maxLength"]) == (1, 150)
    assert (fields["password"]["minLength"], fields["password"]["maxLength"]) == (1, 4096)
    answers = schema["paths"]["/api/v1/auth/token/"]["post"]["responses"]
    assert {"200", "400", "429"} <= set(answers)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"username": "", "password": "x"}, id="empty-username"),
        pytest.param({"username": "dave", "password": ""}, id="empty-password"),
        pytest.param({"username": "d" * 151, "password": "x"}, id="long-username"),
        pytest.param({"username": "dave", "password": "x" * 4097}, id="long-password"),
    ],
)
def test_out_of_bounds_credentials_are_a_400_naming_the_field(api_client: APIClient, body: dict[str, str]) -> None:
    response = api_client.post(TOKEN, body, format="json")
    assert response.status_code == 400
    assert set(response.json()) <= {"username", "password"}
