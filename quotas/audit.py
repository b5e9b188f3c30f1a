"""The audit log writer every app's services call inside their transaction."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from quotas.models import AuditRecord


def record(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    action: str,
    object_type: str,
    object_id: object = "",
    object_repr: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditRecord:
    """Write one audit record; anonymous or missing actors (the scheduler, a command) stay null."""
    signed_in = actor if actor is not None and actor.is_authenticated else None
    return AuditRecord.objects.create(
        actor=signed_in,  # type: ignore[misc]  # the project uses Django's User; stubs see AbstractBaseUser
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        object_repr=object_repr[:200],
        before=before,
        after=after,
    )
