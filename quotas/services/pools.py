"""Resource pools: create, change (name, placement policy, description), delete.

A pool's nodes and quotas are written by `nodes` and `tree`; a pool is deleted only once it
holds neither, and the refusal names what it still holds.
"""

from __future__ import annotations

from typing import Any, TypedDict, Unpack

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from quotas import audit, bounds, hooks
from quotas.models import Node, PlacementPolicy, Quota, ResourcePool
from quotas.services.common import Actor, _lock_pool, _require_platform_admin
from quotas.services.errors import _Errors
from quotas.services.rules import check_name

POOL_FIELDS = ("name", "placement", "description")
# How many names a refusal lists before it says "and N more".
_NAMED_AT_MOST = 5


class PoolChanges(TypedDict, total=False):
    name: str
    placement: str
    description: str


def pool_snapshot(pool: ResourcePool) -> dict[str, Any]:
    return {field: getattr(pool, field) for field in POOL_FIELDS}


def named(names: list[str]) -> str:
    """`a, b, c` or `a, b, c, d, e and 3 more`: a refusal names what holds it without growing unbounded."""
    shown = ", ".join(names[:_NAMED_AT_MOST])
    rest = len(names) - _NAMED_AT_MOST
    return f"{shown} and {rest} more" if rest > 0 else shown


def _check_pool(pool: ResourcePool, errors: _Errors) -> None:
    name = pool.name
    check_name(name, "pool", errors)
    if pool.placement not in PlacementPolicy.values:
        errors.add("placement", f"placement {pool.placement!r} is not one of {', '.join(PlacementPolicy.values)}.")
    if not isinstance(pool.description, str):
        errors.add("description", f"description must be text, got {pool.description!r}.")
    elif len(pool.description) > bounds.DESCRIPTION_MAX_LENGTH:
        errors.add(
            "description",
            f"description has at most {bounds.DESCRIPTION_MAX_LENGTH:,} characters, got {len(pool.description):,}.",
        )
    if isinstance(name, str):
        others = ResourcePool.objects.filter(name=name)
        if pool.pk is not None:
            others = others.exclude(pk=pool.pk)
        if others.exists():
            errors.add("name", f"A pool named {name!r} already exists; pool names are unique.")


def _save_pool(pool: ResourcePool) -> None:
    try:
        with transaction.atomic():
            pool.save()
    except IntegrityError:
        raise ValidationError({"name": f"A pool named {pool.name!r} already exists; pool names are unique."}) from None


def create_pool(
    *, actor: Actor, name: str, placement: str = PlacementPolicy.PACK, description: str = ""
) -> ResourcePool:
    """A new, empty pool: nodes move into it (`update_node(pool=…)`) and root quotas name it."""
    _require_platform_admin(actor, "create pools")
    with transaction.atomic():
        pool = ResourcePool(name=name, placement=placement, description=description)
        errors = _Errors()
        _check_pool(pool, errors)
        errors.raise_if_any()
        _save_pool(pool)
        audit.record(
            actor=actor,
            action="pool.create",
            object_type="pool",
            object_id=pool.pk,
            object_repr=pool.name,
            after=pool_snapshot(pool),
        )
        return pool


def update_pool(*, actor: Actor, pool: ResourcePool, **changes: Unpack[PoolChanges]) -> ResourcePool:
    """Rename a pool, change its placement policy (the next cycle places by it) or its description."""
    _require_platform_admin(actor, "change pools")
    unknown = set(changes) - set(POOL_FIELDS)
    if unknown:
        raise ValidationError({field: f"{field} is not a field of a pool." for field in sorted(unknown)})
    with transaction.atomic():
        current = _lock_pool(pool.pk)
        before = pool_snapshot(current)
        for field, value in changes.items():
            setattr(current, field, value)
        errors = _Errors()
        _check_pool(current, errors)
        errors.raise_if_any()
        after = pool_snapshot(current)
        changed_fields = [field for field in POOL_FIELDS if before[field] != after[field]]
        if changed_fields:
            _save_pool(current)
            hooks.record_change("pool.update")  # its placement policy decides where jobs go
            audit.record(
                actor=actor,
                action="pool.update",
                object_type="pool",
                object_id=current.pk,
                object_repr=current.name,
                before={field: before[field] for field in changed_fields},
                after={field: after[field] for field in changed_fields},
            )
        return current


def pool_delete_blockers(pool: ResourcePool) -> list[str]:
    """Why a pool must stay: the nodes and the quotas it holds, by name."""
    reasons: list[str] = []
    nodes = list(Node.objects.filter(pool=pool).order_by("id").values_list("name", flat=True))
    if nodes:
        reasons.append(f"The pool {pool.name} holds {len(nodes)} node(s) ({named(nodes)}); move or delete them first.")
    quotas = list(Quota.objects.filter(pool=pool).order_by("id").values_list("name", flat=True))
    if quotas:
        reasons.append(f"The pool {pool.name} holds {len(quotas)} quota(s) ({named(quotas)}); delete them first.")
    return reasons


def delete_pool(*, actor: Actor, pool: ResourcePool) -> None:
    """Refused while the pool holds nodes or quotas (the refusal names them)."""
    _require_platform_admin(actor, "delete pools")
    with transaction.atomic():
        current = _lock_pool(pool.pk)
        reasons = pool_delete_blockers(current)
        if reasons:
            raise ValidationError({"pool": reasons})
        before = pool_snapshot(current)
        row_id = current.pk
        current.delete()
        audit.record(
            actor=actor,
            action="pool.delete",
            object_type="pool",
            object_id=row_id,
            object_repr=before["name"],
            before=before,
        )
