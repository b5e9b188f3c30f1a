"""Account-level writes: users, their API tokens and their sessions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AbstractUser, AnonymousUser
from django.contrib.sessions.models import Session
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.authtoken.models import Token

from console import selectors, tokens
from quotas import audit
from workspaces.access import notify_access_changed


@transaction.atomic
def create_user(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    username: str,
    password: str,
    email: str = "",
    is_platform_admin: bool = False,
) -> AbstractUser:
    user_model = get_user_model()
    if user_model.objects.filter(username=username).exists():
        raise ValidationError({"username": f"A user named {username!r} already exists."})
    user: AbstractUser = user_model.objects.create_user(
        username=username,
        password=password,
        email=email,
        is_superuser=is_platform_admin,
        is_staff=is_platform_admin,
    )
    audit.record(
        actor=actor,
        action="user.create",
        object_type="user",
        object_id=user.pk,
        object_repr=username,
        after={"username": username, "email": email, "is_platform_admin": is_platform_admin},
    )
    return user


@dataclass(frozen=True)
class Revoked:
    """What a revocation removed: API tokens and browser sessions."""

    tokens: int
    sessions: int


def issue_token(*, user: AbstractBaseUser) -> Token:
    """The user's API token, made anew when the old one has expired (console.tokens): a sign-in
    that gave back an expired token would get a 401 on its first call."""
    with transaction.atomic():
        token, created = Token.objects.select_for_update().get_or_create(user_id=user.pk)
        if not created and tokens.is_expired(token):
            token.delete()
            token = Token.objects.create(user_id=user.pk)
    return token


def _revoke(user: AbstractBaseUser) -> Revoked:
    token_count, _ = Token.objects.filter(user_id=user.pk).delete()
    keys = selectors.session_keys_of(user)
    session_count, _ = Session.objects.filter(session_key__in=keys).delete()
    # Open websockets outlive their session row; tell them (after commit) to re-check and close.
    notify_access_changed(user_ids=[int(user.pk)])
    return Revoked(tokens=token_count, sessions=session_count)


@transaction.atomic
def sign_out_everywhere(*, actor: AbstractBaseUser | AnonymousUser | None, user: AbstractBaseUser) -> Revoked:
    """Revoke every token and session of the user: a lost laptop or a leaked token stops working
    at once, on every device, without an administrator."""
    revoked = _revoke(user)
    audit.record(
        actor=actor,
        action="user.sign_out_everywhere",
        object_type="user",
        object_id=user.pk,
        object_repr=user.get_username(),
        after={"tokens": revoked.tokens, "sessions": revoked.sessions},
    )
    return revoked


@transaction.atomic
def update_user(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    user: AbstractUser,
    email: str | None = None,
    is_active: bool | None = None,
    is_platform_admin: bool | None = None,
) -> AbstractUser:
    """Change an account. Deactivating it also revokes its tokens and sessions: Django already
    refuses an inactive user's sign-in, but a token or session kept would outlive a reactivation."""
    if is_active is False and actor is not None and actor.pk == user.pk:
        # An admin (or a fuzzer signed in as one) would lock the account out of the console,
        # perhaps the last platform admin's; another admin has to do it.
        raise ValidationError({"is_active": "You cannot deactivate your own account; ask another platform admin."})
    before = {"email": user.email, "is_active": user.is_active, "is_platform_admin": user.is_superuser}
    if email is not None:
        user.email = email
    if is_active is not None:
        user.is_active = is_active
    if is_platform_admin is not None:
        user.is_superuser = is_platform_admin
        user.is_staff = is_platform_admin
    user.save(update_fields=["email", "is_active", "is_superuser", "is_staff"])
    after: dict[str, Any] = {"email": user.email, "is_active": user.is_active, "is_platform_admin": user.is_superuser}
    if before["is_active"] and not user.is_active:
        revoked = _revoke(user)
        after["revoked"] = {"tokens": revoked.tokens, "sessions": revoked.sessions}
    audit.record(
        actor=actor,
        action="user.update",
        object_type="user",
        object_id=user.pk,
        object_repr=user.get_username(),
        before=before,
        after=after,
    )
    return user


@transaction.atomic
def user_deactivated(*, actor: AbstractBaseUser | AnonymousUser | None, user: AbstractUser) -> Revoked:
    """For writers that saved `is_active=False` themselves (the admin's change form): revoke what
    the user still holds, and record it."""
    revoked = _revoke(user)
    audit.record(
        actor=actor,
        action="user.deactivate",
        object_type="user",
        object_id=user.pk,
        object_repr=user.get_username(),
        after={"is_active": user.is_active, "revoked": {"tokens": revoked.tokens, "sessions": revoked.sessions}},
    )
    return revoked
