"""Auth as API.md says: token login, 401 for anonymous requests, users created by platform admins only."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client
from rest_framework.test import APIClient

from quotas.models import AuditRecord
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def test_token_login_then_token_auth(make_user: Callable[..., AbstractUser], api_client: APIClient) -> None:
    make_user("alice")
    response = api_client.post("/api/v1/auth/token/", {"username": "alice", "password": PASSWORD}, format="json")
    assert response.status_code == 200
    token = response.json()["token"]
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert api_client.get("/api/v1/users/").status_code == 403  # signed in, but not a platform admin


def test_wrong_password_gets_no_token(make_user: Callable[..., AbstractUser], api_client: APIClient) -> None:
    make_user("alice")
    response = api_client.post("/api/v1/auth/token/", {"username": "alice", "password": "nope"}, format="json")
    assert response.status_code == 400
    assert "token" not in response.json()


@pytest.mark.parametrize("path", ["/api/v1/users/", "/api/v1/quotas/", "/api/v1/nodes/"])
def test_anonymous_requests_get_401(api_client: APIClient, path: str) -> None:
    response = api_client.get(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_platform_admin_creates_users(admin_client_api: APIClient) -> None:
    response = admin_client_api.post(
        "/api/v1/users/",
        {"username": "bob", "password": "long-enough-pw", "email": "bob@example.org", "is_platform_admin": False},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json() == {
        "id": response.json()["id"],
        "username": "bob",
        "email": "bob@example.org",
        "is_platform_admin": False,
        "is_active": True,
    }
    bob = get_user_model().objects.get(username="bob")
    assert bob.check_password("long-enough-pw")
    assert AuditRecord.objects.filter(action="user.create", object_repr="bob").exists()


def test_duplicate_username_is_a_400_naming_the_field(admin_client_api: APIClient) -> None:
    body = {"username": "bob", "password": "long-enough-pw"}
    assert admin_client_api.post("/api/v1/users/", body, format="json").status_code == 201
    response = admin_client_api.post("/api/v1/users/", body, format="json")
    assert response.status_code == 400
    assert "username" in response.json()


def test_non_admins_cannot_create_users(
    make_user: Callable[..., AbstractUser], client_for: Callable[[AbstractUser | None], APIClient]
) -> None:
    alice = make_user("alice")
    response = client_for(alice).post("/api/v1/users/", {"username": "mallory", "password": "long-enough-pw"})
    assert response.status_code == 403
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_session_login_and_logout_pages(make_user: Callable[..., AbstractUser], client: Client) -> None:
    make_user("alice")
    assert client.get("/").status_code == 302  # the dashboard needs a signed-in user
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    page = client.get("/")
    assert page.status_code == 200
    assert b'data-testid="signed-in-user">alice' in page.content
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_createsuperuser_noinput_reads_the_environment() -> None:
    # Run against a throwaway SQLite file so the command's own connection sees its own database.
    env = {
        **os.environ,
        "DJANGO_SUPERUSER_USERNAME": "root",
        "DJANGO_SUPERUSER_PASSWORD": "s3cret-pass!",
        "DJANGO_SUPERUSER_EMAIL": "root@example.org",
        "DJANGO_SETTINGS_MODULE": "console.settings",
    }
    env.pop("DATABASE_URL", None)
    with_tmp = {**env, "DATABASE_URL": f"sqlite:///{ROOT / 'var' / 'createsuperuser-test.sqlite3'}"}
    (ROOT / "var").mkdir(exist_ok=True)
    db_file = ROOT / "var" / "createsuperuser-test.sqlite3"
    db_file.unlink(missing_ok=True)
    try:
        for command in (["migrate", "--noinput"], ["createsuperuser", "--noinput"]):
            result = subprocess.run(
                [sys.executable, "manage.py", *command],
                cwd=ROOT,
                env=with_tmp,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert result.returncode == 0, result.stderr
        check = subprocess.run(
            [
                sys.executable,
                "manage.py",
                "shell",
                "-c",
                "from django.contrib.auth.models import User; u = User.objects.get(username='root'); "
                "print(u.is_superuser, u.check_password('s3cret-pass!'))",
            ],
            cwd=ROOT,
            env=with_tmp,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.stdout.strip().splitlines()[-1] == "True True"
    finally:
        db_file.unlink(missing_ok=True)


def test_a_service_refusal_keeps_its_reason_in_the_403() -> None:
    from django.core.exceptions import PermissionDenied

    from console.api import exception_handler

    response = exception_handler(PermissionDenied("role 'visitor' may not use Quota1.1 in workspace-b"), {})
    assert response is not None
    assert (response.status_code, response.data) == (
        403,
        {"detail": "role 'visitor' may not use Quota1.1 in workspace-b"},
    )
