"""The audit log writer every app's services call inside their transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from quotas.models import AuditRecord
from utilities import inserts


def build(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    action: str,
    object_type: str,
    object_id: object = "",
    object_repr: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditRecord:
    """One audit record, not yet saved: `record` saves it, `record_all` saves many in one insert."""
    signed_in = actor if actor is not None and actor.is_authenticated else None
    return AuditRecord(
        actor=signed_in,  # type: ignore[misc]  # the project uses Django's User; stubs see AbstractBaseUser
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        object_repr=object_repr[:200],
        before=before,
        after=after,
    )


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
    entry = build(
        actor=actor,
        action=action,
        object_type=object_type,
        object_id=object_id,
        object_repr=object_repr,
        before=before,
        after=after,
    )
    entry.save(force_insert=True)
    return entry


def record_all(entries: Sequence[AuditRecord]) -> list[AuditRecord]:
    """Write records made by `build` in one insert: a bulk service's one record per object."""
    return inserts.create_all(entries)
