"""Account-level writes: users."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AbstractUser, AnonymousUser
from django.core.exceptions import ValidationError
from django.db import transaction

from quotas import audit


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
