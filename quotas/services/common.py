"""What every write of the quotas app shares: who may act, the guaranteed resources and their
bounds, the pool's lock, announcing after commit, and deleting a row with its audit record."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from quotas import audit, bounds, hooks
from quotas.models import Node, Quota, ResourcePool

Actor = AbstractBaseUser | AnonymousUser | None


# (field, unit) of each guaranteed resource; GPUs are always managed, CPU and memory when set.
RESOURCES: tuple[tuple[str, str], ...] = (("gpus", "GPUs"), ("cpu", "CPU cores"), ("memory_gib", "GiB of memory"))
# (guarantee field, its limit's field, unit): a limit is never below its guarantee.
LIMITS: tuple[tuple[str, str, str], ...] = (
    ("gpus", "limit", "GPUs"),
    ("cpu", "cpu_limit", "CPU cores"),
    ("memory_gib", "memory_gib_limit", "GiB of memory"),
)
# The most a client may ask of each amount of a quota (quotas.bounds).
_QUOTA_MAXIMA: Mapping[str, float] = {
    "gpus": bounds.QUOTA_GPUS_MAX,
    "cpu": bounds.QUOTA_CPU_MAX,
    "memory_gib": bounds.QUOTA_MEMORY_GIB_MAX,
    "limit": bounds.QUOTA_GPUS_MAX,
    "cpu_limit": bounds.QUOTA_CPU_MAX,
    "memory_gib_limit": bounds.QUOTA_MEMORY_GIB_MAX,
    "weight": bounds.QUOTA_WEIGHT_MAX,
}
_NODE_MAXIMA: Mapping[str, float] = {"cpu": bounds.NODE_CPU_MAX, "memory_gib": bounds.NODE_MEMORY_GIB_MAX}
# Sums of floats (0.1 + 0.2) must not fail a rule they meet exactly.
_TOLERANCE = 1e-9

QUOTA_FIELDS = (
    "name",
    "parent",
    "gpus",
    "cpu",
    "memory_gib",
    "limit",
    "cpu_limit",
    "memory_gib_limit",
    "weight",
    "rank",
    "child_preemption",
    "same_level_preemption",
    "queue_policy",
    "min_runtime_seconds",
)
NODE_FIELDS = ("name", "gpus", "cpu", "memory_gib", "gpu_model", "labels", "state", "executor")


def _require_platform_admin(actor: Actor, what: str) -> None:
    # None is the system itself (the scenario runner, management commands).
    if actor is None:
        return
    if not (actor.is_authenticated and getattr(actor, "is_superuser", False)):
        raise PermissionDenied(f"Only platform admins may {what}.")


def _is_number(amount: object) -> bool:
    return isinstance(amount, (int, float)) and not isinstance(amount, bool) and math.isfinite(amount)


def _pool_or_default(pool: ResourcePool | None) -> ResourcePool:
    if pool is not None:
        return pool
    try:
        created, _ = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)
    except IntegrityError:
        # Two first writers raced to create it; the other one won.
        created = ResourcePool.objects.get(name=ResourcePool.DEFAULT_NAME)
    return created


def _lock_pool(pool_id: int) -> ResourcePool:
    """Every writer of a pool's tree or inventory takes this lock first, so they serialise in one order."""
    return ResourcePool.objects.select_for_update().get(pk=pool_id)


def _on_commit_send(signal: Any, sender: type, **kwargs: Any) -> None:
    # Recorded now, in the write's own transaction: the signal comes only after the commit, and a
    # process killed in between would leave the change unseen until the beat's next full cycle.
    hooks.record_change(str(kwargs.get("action", "changed")))
    transaction.on_commit(lambda: signal.send(sender=sender, **kwargs))


def _still_referred(name: str, protected: ProtectedError) -> str:
    """What a foreign key with PROTECT still holds, e.g. finished jobs that keep their quota for history."""
    counts: dict[str, int] = defaultdict(int)
    for row in protected.protected_objects:
        counts[str(type(row)._meta.verbose_name_plural)] += 1
    held = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))
    return f"{name} is still referred to by {held}."


def _delete_audited(*, actor: Actor, row: Quota | Node, field: str, before: dict[str, Any]) -> int:
    """Delete a quota or node whose guards passed, and audit it (`<field>.delete`); returns its id.

    A PROTECT reference nobody guarded (a finished job's history, say) is the last line of
    defence: it becomes a ValidationError on `field` naming what still refers to the row.
    """
    row_id: int = row.pk
    try:
        with transaction.atomic():
            row.delete()
    except ProtectedError as protected:
        raise ValidationError({field: _still_referred(before["name"], protected)}) from None
    audit.record(
        actor=actor,
        action=f"{field}.delete",
        object_type=field,
        object_id=row_id,
        object_repr=before["name"],
        before=before,
    )
    return row_id
