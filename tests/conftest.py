"""Fixtures every test package shares: users and API clients."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

PASSWORD = "correct-horse-battery"


@pytest.fixture
def make_user(db: None) -> Callable[..., AbstractUser]:
    def make(username: str, *, platform_admin: bool = False) -> AbstractUser:
        user: AbstractUser = get_user_model().objects.create_user(  # type: ignore[attr-defined]
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
