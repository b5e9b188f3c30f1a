"""API tokens that expire: DRF's token, refused CONSOLE_TOKEN_TTL_HOURS after it was issued.

DRF's tokens live forever, so a token copied once into a script or a leaked shell history works
until someone deletes it by hand. Here a token's `created` time bounds it; signing in again on
/api/v1/auth/token/ after that issues a fresh one (console.services.issue_token).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed


def token_lifetime() -> timedelta:
    return timedelta(hours=float(settings.CONSOLE_TOKEN_TTL_HOURS))


def expires_at(token: Token) -> datetime:
    created: datetime = token.created
    return created + token_lifetime()


def is_expired(token: Token, *, now: datetime | None = None) -> bool:
    return (now or timezone.now()) >= expires_at(token)


class ExpiringTokenAuthentication(TokenAuthentication):
    """`Authorization: Token …` as DRF reads it, refused with a 401 once the token has expired.

    A 401 (not 403) because the header names the Token scheme: the client learns to sign in again."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        user, token = super().authenticate_credentials(key)
        if is_expired(token):
            raise AuthenticationFailed(
                f"Token expired at {expires_at(token):%Y-%m-%d %H:%M} UTC; "
                "sign in again at /api/v1/auth/token/ for a new one."
            )
        return user, token
