"""The tree as it would be: loaded under lock, changed in memory, validated against the rules of
SCHEDULING.md §4, then saved."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Sum

from quotas import bounds
from quotas.models import Node, QueuePolicy, Quota, ResourcePool
from quotas.services.common import (
    _QUOTA_MAXIMA,
    _TOLERANCE,
    LIMITS,
    QUOTA_FIELDS,
    RESOURCES,
    _is_number,
    _lock_pool,
)
from quotas.services.errors import _amount, _Errors, _number


@dataclass
class _Capacity:
    gpus: float
    cpu: float
    memory_gib: float


class _Tree:
    """The quotas of one pool, locked, with the changes of one operation applied in memory."""

    def __init__(self, pool: ResourcePool) -> None:
        self.pool = pool
        # FOR UPDATE in id order: the second of two conflicting writers waits here and then
        # reads the first one's committed values.
        self.quotas: dict[int, Quota] = {
            quota.pk: quota for quota in Quota.objects.select_for_update().filter(pool=pool).order_by("id")
        }
        totals = Node.objects.filter(pool=pool).aggregate(
            gpus=Sum("gpus"), cpu=Sum("cpu"), memory_gib=Sum("memory_gib")
        )
        self.capacity = _Capacity(
            gpus=float(totals["gpus"] or 0), cpu=float(totals["cpu"] or 0), memory_gib=float(totals["memory_gib"] or 0)
        )

    @classmethod
    def locked(cls, pool_id: int) -> _Tree:
        return cls(_lock_pool(pool_id))

    def get(self, quota: Quota | int) -> Quota:
        quota_id = quota if isinstance(quota, int) else quota.pk
        try:
            return self.quotas[quota_id]
        except KeyError:
            raise ValidationError({"quota": f"Quota {quota_id} does not exist (any more)."}) from None

    def parent_of(self, quota: Quota) -> Quota | None:
        return None if quota.parent_id is None else self.quotas.get(quota.parent_id)

    def children_of(self, quota: Quota | None) -> list[Quota]:
        """The roots when `quota` is None."""
        parent_id = None if quota is None else quota.pk
        return [child for child in self.quotas.values() if child.parent_id == parent_id]

    def siblings_with(self, quota: Quota) -> list[Quota]:
        """The quota and every other child of its parent (the roots, for a root)."""
        return [other for other in self.quotas.values() if other.parent_id == quota.parent_id]

    # -- the rules ---------------------------------------------------------------------------

    def validate(self, changed: Iterable[Quota], errors: _Errors) -> None:
        changed = list(changed)
        for quota in changed:
            _check_row(quota, errors)
        errors.raise_if_any()
        for quota in changed:
            self._check_place(quota, errors)
        errors.raise_if_any()
        parents_checked: set[int | None] = set()
        for quota in changed:
            if quota.parent_id not in parents_checked:
                parents_checked.add(quota.parent_id)
                self._check_room_under_parent(quota, changed, errors)
            self._check_room_for_children(quota, errors)
        self._check_limits_managed(changed, errors)
        errors.raise_if_any()

    def managed(self, changed: Iterable[Quota] = ()) -> set[str]:
        """The resources besides GPUs this pool manages: those a root quota sets (SCHEDULING.md
        "Managed resources"), counting the roots of this operation not saved yet."""
        roots = [*self.children_of(None), *(quota for quota in changed if quota.pk is None and quota.parent_id is None)]
        return {field for field, _ in RESOURCES[1:] if any(getattr(root, field) is not None for root in roots)}

    def _check_limits_managed(self, changed: list[Quota], errors: _Errors) -> None:
        """A CPU or memory limit means something only where the pool manages that resource; one
        set elsewhere would be stored and never enforced, so it is refused, as is the change of a
        root that would stop the pool managing a resource some quota still limits."""
        managed = self.managed(changed)
        members = {id(quota): quota for quota in (*self.quotas.values(), *changed)}.values()
        for guarantee_field, limit_field, unit in LIMITS[1:]:
            if guarantee_field in managed:
                continue
            limited = [quota for quota in members if getattr(quota, limit_field) is not None]
            if not limited:
                continue
            names = ", ".join(sorted(quota.name for quota in limited))
            errors.add(
                limit_field,
                f"{names} would set a {limit_field} but the pool {self.pool.name} manages no {unit}: no root "
                f"quota of it sets {guarantee_field}. Give a root quota a {guarantee_field} guarantee first.",
            )

    def _check_place(self, quota: Quota, errors: _Errors) -> None:
        """No cycle, the parent in the same pool."""
        if quota.parent_id is None:
            return
        if quota.pk is not None and quota.parent_id == quota.pk:
            errors.add("parent", f"{quota.name} cannot be its own parent.")
            return
        parent = self.parent_of(quota)
        if parent is None:
            errors.add("parent", f"The parent of {quota.name} is not a quota of pool {self.pool.name}.")
            return
        seen: set[int] = set()
        ancestor: Quota | None = parent
        while ancestor is not None and ancestor.pk not in seen:
            if quota.pk is not None and ancestor.pk == quota.pk:
                errors.add(
                    "parent",
                    f"{quota.name} cannot move under {parent.name}: {parent.name} is inside the subtree of "
                    f"{quota.name}, which would make a cycle.",
                )
                return
            seen.add(ancestor.pk)
            ancestor = self.parent_of(ancestor)

    def _check_room_under_parent(self, quota: Quota, changed: list[Quota], errors: _Errors) -> None:
        """Children's guarantees add up to at most the parent's; the roots' to at most the pool's capacity."""
        parent = self.parent_of(quota)
        members = self.siblings_with(quota)
        if quota.pk is None:
            members.append(quota)
        for field, unit in RESOURCES:
            if parent is None:
                available: float = getattr(self.capacity, field)
                holder = f"the pool {self.pool.name}"
                left_for = "its root quotas"
            else:
                parent_amount = getattr(parent, field)
                if parent_amount is None:
                    if field != "gpus":
                        for member in members:
                            if getattr(member, field) is not None and member in changed:
                                errors.add(
                                    field,
                                    f"{member.name} sets {_amount(getattr(member, field), unit)} but its parent "
                                    f"{parent.name} guarantees no {unit}; give {parent.name} a {field} "
                                    "guarantee first.",
                                )
                    continue
                available = parent_amount
                holder = parent.name
                left_for = "its children"
            if parent is None and field != "gpus" and all(getattr(member, field) is None for member in members):
                continue
            total = sum(getattr(member, field) or 0 for member in members)
            if total <= available + _TOLERANCE:
                continue
            for member in members:
                if member not in changed:
                    continue
                needed = getattr(member, field) or 0
                others = total - needed
                left = available - others
                errors.add(
                    field,
                    f"{member.name} would need {_amount(needed, unit)} but {holder} has "
                    f"{_number(available)} − {_number(others)} = {_number(left)} left for {left_for}.",
                )

    def _check_room_for_children(self, quota: Quota, errors: _Errors) -> None:
        """A parent is never scaled below what its children already hold (that would break the sum rule)."""
        if quota.pk is None:
            return
        children = self.children_of(quota)
        if not children:
            return
        for field, unit in RESOURCES:
            held = [getattr(child, field) for child in children if getattr(child, field) is not None]
            if not held:
                continue
            own = getattr(quota, field)
            total = sum(held)
            if own is None:
                errors.add(
                    field,
                    f"{quota.name} cannot drop its {field} guarantee while its children hold {_amount(total, unit)}.",
                )
            elif total > own + _TOLERANCE:
                parts = " + ".join(_number(amount) for amount in held)
                errors.add(
                    field,
                    f"{quota.name} would guarantee {_amount(own, unit)} but its children hold "
                    f"{parts} = {_amount(total, unit)}; scale them down first.",
                )

    def check_capacity(self, capacity: _Capacity, errors: _Errors, field_for: Mapping[str, str], cause: str) -> None:
        """The roots' guarantees stay within a changed inventory."""
        roots = self.children_of(None)
        for field, unit in RESOURCES:
            guaranteed = [getattr(root, field) for root in roots if getattr(root, field) is not None]
            if not guaranteed:
                continue
            total = sum(guaranteed)
            new_capacity = getattr(capacity, field)
            if total > new_capacity + _TOLERANCE:
                errors.add(
                    field_for.get(field, field),
                    f"{cause} would leave the pool {self.pool.name} {_amount(new_capacity, unit)}, but its root "
                    f"quotas guarantee {_amount(total, unit)}.",
                )


def check_name(name: object, kind: str, errors: _Errors) -> None:
    """The rules of a quota's or a pool's name (`kind`): present, bounded, no spaces at its ends."""
    if not isinstance(name, str) or not name.strip():
        errors.add("name", f"A {kind} needs a name.")
    elif len(name) > bounds.NAME_MAX_LENGTH:
        errors.add(
            "name", f"A {kind} name has at most {bounds.NAME_MAX_LENGTH} characters; {name[:20]}… has {len(name)}."
        )
    elif name != name.strip():
        errors.add("name", f"The name {name!r} has spaces at its ends.")


def _check_row(quota: Quota, errors: _Errors) -> None:
    """The rules of one quota on its own: a name, amounts ≥ 0, limit ≥ gpus, a known queue policy."""
    name = quota.name
    check_name(name, "quota", errors)
    label = name if isinstance(name, str) and name.strip() else "the quota"
    amounts = (*RESOURCES, *((limit, unit) for _, limit, unit in LIMITS), ("weight", ""))
    for field, unit in amounts:
        amount = getattr(quota, field)
        if amount is None and field != "gpus":
            continue
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount):
            errors.add(field, f"{field} of {label} must be a number, got {amount!r}.")
        elif amount < 0:
            what = f"{_number(amount)} {unit}".strip()
            errors.add(field, f"{field} of {label} must be at least 0, got {what}.")
        elif amount > _QUOTA_MAXIMA[field]:
            errors.add(
                field,
                f"{field} of {label} must be at most {bounds.readable(_QUOTA_MAXIMA[field])}, "
                f"got {bounds.readable(amount)}.",
            )
    for guarantee_field, limit_field, unit in LIMITS:
        limit, guaranteed = getattr(quota, limit_field), getattr(quota, guarantee_field)
        if not (_is_number(limit) and _is_number(guaranteed)) or limit >= guaranteed - _TOLERANCE:
            continue
        errors.add(
            limit_field,
            f"The {limit_field} of {label} ({_amount(limit, unit)}) is below its guarantee of "
            f"{_amount(guaranteed, unit)}; the {limit_field} must be at least {guarantee_field}.",
        )
    if isinstance(quota.rank, bool) or not isinstance(quota.rank, int):
        errors.add("rank", f"rank of {label} must be a whole number, got {quota.rank!r}.")
    elif abs(quota.rank) > bounds.QUOTA_RANK_MAX:
        side = "at most " if quota.rank > 0 else "at least -"
        errors.add(
            "rank",
            f"rank of {label} must be {side}{bounds.readable(bounds.QUOTA_RANK_MAX)}, "
            f"got {bounds.readable(quota.rank)}.",
        )
    runtime = quota.min_runtime_seconds
    if runtime is not None and (isinstance(runtime, bool) or not isinstance(runtime, int) or runtime < 0):
        errors.add(
            "min_runtime_seconds", f"min_runtime_seconds of {label} must be a whole number ≥ 0, got {runtime!r}."
        )
    elif runtime is not None and runtime > bounds.MIN_RUNTIME_SECONDS_MAX:
        errors.add(
            "min_runtime_seconds",
            f"min_runtime_seconds of {label} must be at most {bounds.readable(bounds.MIN_RUNTIME_SECONDS_MAX)} "
            f"(a year), got {bounds.readable(runtime)}.",
        )
    if quota.queue_policy not in QueuePolicy.values:
        errors.add(
            "queue_policy",
            f"queue_policy {quota.queue_policy!r} is not one of {', '.join(QueuePolicy.values)}.",
        )
    for switch in ("child_preemption", "same_level_preemption"):
        if not isinstance(getattr(quota, switch), bool):
            errors.add(switch, f"{switch} must be true or false, got {getattr(quota, switch)!r}.")


def _check_name_free(name: str, *, quota_id: int | None, errors: _Errors) -> None:
    others = Quota.objects.filter(name=name)
    if quota_id is not None:
        others = others.exclude(pk=quota_id)
    if isinstance(name, str) and others.exists():
        errors.add("name", f"A quota named {name!r} already exists; quota names are unique.")


def _resolve_parent(parent: Quota | str | None) -> Quota | None:
    if parent is None or isinstance(parent, Quota):
        return parent
    found = Quota.objects.filter(name=parent).first()
    if found is None:
        raise ValidationError({"parent": f"There is no quota named {parent!r}."})
    return found


def quota_snapshot(quota: Quota, tree: _Tree | None = None) -> dict[str, Any]:
    """The fields of a quota as the API and the audit log show them (parent by name)."""
    parent_name: str | None = None
    if quota.parent_id is not None:
        parent = tree.quotas.get(quota.parent_id) if tree is not None else quota.parent
        parent_name = parent.name if parent is not None else None
    values: dict[str, Any] = {field: getattr(quota, field) for field in QUOTA_FIELDS if field != "parent"}
    values["parent"] = parent_name
    return values


def _save(quota: Quota) -> None:
    # The rules were checked on the tree; this turns a lost race on the name into the same 400.
    try:
        with transaction.atomic():
            quota.save()
    except IntegrityError:
        raise ValidationError(
            {"name": f"A quota named {quota.name!r} already exists; quota names are unique."}
        ) from None
