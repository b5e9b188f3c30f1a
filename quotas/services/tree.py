"""The quota tree's shape: create a quota (or a whole tree at once), change it, delete it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from quotas import audit, hooks, signals
from quotas.models import QueuePolicy, Quota, ResourcePool
from quotas.services.common import (
    QUOTA_FIELDS,
    Actor,
    _delete_audited,
    _on_commit_send,
    _pool_or_default,
    _require_platform_admin,
)
from quotas.services.errors import _Errors
from quotas.services.preview import DryRunResult, _dry_run
from quotas.services.rules import _check_name_free, _check_row, _resolve_parent, _save, _Tree, quota_snapshot


class QuotaSettings(TypedDict, total=False):
    """A quota's guarantees, limit and switches; what is left out keeps the model's default."""

    gpus: float
    cpu: float | None
    memory_gib: float | None
    limit: float | None
    cpu_limit: float | None
    memory_gib_limit: float | None
    weight: float | None
    rank: int
    child_preemption: bool
    same_level_preemption: bool
    queue_policy: str
    min_runtime_seconds: int | None


class QuotaChanges(QuotaSettings, total=False):
    name: str
    parent: Quota | str | None
    pool: ResourcePool


def preview_create_quota(
    *,
    actor: Actor,
    name: str,
    parent: Quota | str | None = None,
    pool: ResourcePool | None = None,
    **settings: Unpack[QuotaSettings],
) -> DryRunResult:
    """`create_quota` in a rolled-back transaction: whether it is valid, and what it would move."""
    return _dry_run(
        _create_quota_change(actor=actor, name=name, parent=parent, pool=pool, settings=settings), pool_id=None
    )


def create_quota(
    *,
    actor: Actor,
    name: str,
    parent: Quota | str | None = None,
    pool: ResourcePool | None = None,
    **settings: Unpack[QuotaSettings],
) -> Quota:
    """A root (no parent: in `pool`, the default pool when None) or a child of `parent` (a quota or its name)."""
    return _create_quota_change(actor=actor, name=name, parent=parent, pool=pool, settings=settings)()


def _create_quota_change(
    *, actor: Actor, name: str, parent: Quota | str | None, pool: ResourcePool | None, settings: QuotaSettings
) -> Callable[[], Quota]:
    _require_platform_admin(actor, "create quotas")

    def apply() -> Quota:
        with transaction.atomic():
            parent_quota = _resolve_parent(parent)
            if parent_quota is not None and pool is not None and pool.pk != parent_quota.pool_id:
                raise ValidationError(
                    {
                        "pool": f"{name} would be a child of {parent_quota.name}, which is in the pool "
                        f"{parent_quota.pool.name}, not {pool.name}; a child has its parent's pool."
                    }
                )
            pool_id = parent_quota.pool_id if parent_quota is not None else _pool_or_default(pool).pk
            tree = _Tree.locked(pool_id)
            quota = Quota(
                pool_id=pool_id,
                name=name,
                parent=tree.get(parent_quota) if parent_quota is not None else None,
                **settings,
            )
            errors = _Errors()
            _check_name_free(name, quota_id=None, errors=errors)
            tree.validate([quota], errors)
            _save(quota)
            tree.quotas[quota.pk] = quota
            audit.record(
                actor=actor,
                action="quota.create",
                object_type="quota",
                object_id=quota.pk,
                object_repr=quota.name,
                after=quota_snapshot(quota, tree),
            )
            _on_commit_send(signals.quota_tree_changed, Quota, action="quota.create", quota_ids=[quota.pk])
            return quota

    return apply


@dataclass(frozen=True, slots=True)
class NewQuota:
    """One quota of a tree created at once: `parent` names a quota listed before it, or one that
    already exists in the pool; None makes a root. The defaults are create_quota's."""

    name: str
    parent: str | None = None
    gpus: float = 0
    cpu: float | None = None
    memory_gib: float | None = None
    limit: float | None = None
    cpu_limit: float | None = None
    memory_gib_limit: float | None = None
    weight: float | None = None
    rank: int = 0
    child_preemption: bool = False
    same_level_preemption: bool = False
    queue_policy: str = QueuePolicy.BEST_EFFORT
    min_runtime_seconds: int | None = None


def create_quota_tree(*, actor: Actor, quotas: Sequence[NewQuota], pool: ResourcePool | None = None) -> list[Quota]:
    """Many quotas at once (a whole tree, or subtrees under existing quotas), all or nothing.

    The same rules and messages as `create_quota`, checked once for the whole set against the
    pool's tree (locked as create_quota locks it): names present and unique (in the set and in
    the database), amounts ≥ 0, limit ≥ gpus, parents known and in the pool, children's
    guarantees within their parent's, roots' within the pool's capacity. Then one insert per
    level of the tree and one audit record (`quota.create_tree`). Returns the quotas in the
    order given.
    """
    _require_platform_admin(actor, "create quotas")
    if not quotas:
        return []
    with transaction.atomic():
        pool_id = _pool_or_default(pool).pk
        tree = _Tree.locked(pool_id)
        existing = {quota.name: quota for quota in tree.quotas.values()}
        errors = _Errors()
        # Provisional negative ids let the tree's own rules see the new quotas beside the old.
        provisional: dict[str, Quota] = {}
        new: list[Quota] = []
        for number, spec in enumerate(quotas, start=1):
            quota = Quota(
                pk=-number,
                pool_id=pool_id,
                name=spec.name,
                gpus=spec.gpus,
                cpu=spec.cpu,
                memory_gib=spec.memory_gib,
                limit=spec.limit,
                cpu_limit=spec.cpu_limit,
                memory_gib_limit=spec.memory_gib_limit,
                weight=spec.weight,
                rank=spec.rank,
                child_preemption=spec.child_preemption,
                same_level_preemption=spec.same_level_preemption,
                queue_policy=spec.queue_policy,
                min_runtime_seconds=spec.min_runtime_seconds,
            )
            if spec.parent is not None:
                parent = provisional.get(spec.parent) or existing.get(spec.parent)
                if parent is not None:
                    quota.parent_id = parent.pk
                elif any(other.name == spec.parent for other in quotas[number:]):
                    errors.add("parent", f"The parent of {spec.name}, {spec.parent}, must come before it.")
                elif Quota.objects.filter(name=spec.parent).exists():
                    errors.add("parent", f"The parent of {spec.name} is not a quota of pool {tree.pool.name}.")
                else:
                    errors.add("parent", f"There is no quota named {spec.parent!r}.")
            if isinstance(spec.name, str):
                if spec.name in provisional or spec.name in existing:
                    errors.add("name", f"A quota named {spec.name!r} already exists; quota names are unique.")
                else:
                    provisional[spec.name] = quota
            new.append(quota)
        taken = set(
            Quota.objects.filter(name__in=[name for name in provisional if name not in existing]).values_list(
                "name", flat=True
            )
        )
        for name in sorted(taken):  # in another pool
            errors.add("name", f"A quota named {name!r} already exists; quota names are unique.")
        for quota in new:
            _check_row(quota, errors)
        errors.raise_if_any()
        for quota in new:
            tree.quotas[quota.pk] = quota
        for quota in new:
            tree._check_place(quota, errors)
        errors.raise_if_any()
        parents_checked: set[int | None] = set()
        for quota in new:
            if quota.parent_id not in parents_checked:
                parents_checked.add(quota.parent_id)
                tree._check_room_under_parent(quota, new, errors)
        tree._check_limits_managed(new, errors)
        errors.raise_if_any()

        # One insert per level: a level's parents have their real ids by then.
        real_id: dict[int, int] = {quota.pk: quota.pk for quota in existing.values()}
        remaining = new
        while remaining:
            level = [quota for quota in remaining if quota.parent_id is None or quota.parent_id in real_id]
            assert level, "validated parents always come first"
            provisional_ids = [quota.pk for quota in level]
            for quota in level:
                quota.pk = None
                if quota.parent_id is not None:
                    quota.parent_id = real_id[quota.parent_id]
            try:
                with transaction.atomic():
                    Quota.objects.bulk_create(level)
            except IntegrityError:
                raise ValidationError(
                    {"name": "A quota of this tree already exists (created meanwhile); quota names are unique."}
                ) from None
            for old_id, quota in zip(provisional_ids, level, strict=True):
                real_id[old_id] = quota.pk
            remaining = [quota for quota in remaining if quota.pk < 0]  # not inserted yet
        names = {quota.pk: quota.name for quota in [*existing.values(), *new]}
        audit.record(
            actor=actor,
            action="quota.create_tree",
            object_type="quota",
            object_id=pool_id,
            object_repr=f"{len(new)} quotas in pool {tree.pool.name}",
            after={
                "quotas": [
                    {
                        **{field: getattr(quota, field) for field in QUOTA_FIELDS if field != "parent"},
                        "parent": names.get(quota.parent_id) if quota.parent_id is not None else None,
                    }
                    for quota in new
                ]
            },
        )
        _on_commit_send(
            signals.quota_tree_changed, Quota, action="quota.create_tree", quota_ids=[quota.pk for quota in new]
        )
        return new


def preview_update_quota(*, actor: Actor, quota: Quota, **changes: Unpack[QuotaChanges]) -> DryRunResult:
    """`update_quota` in a rolled-back transaction: whether it is valid, and what it would move."""
    return _dry_run(_update_quota_change(actor=actor, quota=quota, changes=changes), pool_id=quota.pool_id)


def update_quota(*, actor: Actor, quota: Quota, **changes: Unpack[QuotaChanges]) -> Quota:
    """Change any field: rename, move under another parent, scale, switches, policy, weight, rank, limit.

    Fields not named keep their value; naming one with None unsets it (no limit, weight that
    follows gpus, min runtime inherited).
    """
    return _update_quota_change(actor=actor, quota=quota, changes=changes)()


def _update_quota_change(*, actor: Actor, quota: Quota, changes: QuotaChanges) -> Callable[[], Quota]:
    _require_platform_admin(actor, "change quotas")
    unknown = set(changes) - {*QUOTA_FIELDS, "pool"}
    pool = changes.pop("pool", None)

    def apply() -> Quota:
        if unknown:
            raise ValidationError({field: f"{field} is not a field of a quota." for field in sorted(unknown)})
        if pool is not None and pool.pk != quota.pool_id:
            # Moving a tree between pools would move its guarantees and its running jobs' nodes at once.
            raise ValidationError(
                {
                    "pool": f"{quota.name} is in the pool {quota.pool.name}; a quota stays in the pool it was "
                    f"made in. Make a root quota in {pool.name} instead."
                }
            )
        with transaction.atomic():
            tree = _Tree.locked(quota.pool_id)
            current = tree.get(quota)
            before = quota_snapshot(current, tree)
            errors = _Errors()
            for field, value in changes.items():
                if field == "parent":
                    new_parent = _resolve_parent(value)  # type: ignore[arg-type]
                    if new_parent is not None and new_parent.pool_id != current.pool_id:
                        errors.add("parent", f"{new_parent.name} is in another resource pool than {current.name}.")
                        continue
                    current.parent_id = None if new_parent is None else new_parent.pk
                elif field in ("name", "gpus") and value is None:
                    errors.add(field, f"{field} of {current.name} cannot be empty.")
                else:
                    setattr(current, field, value)
            errors.raise_if_any()
            if "name" in changes:
                _check_name_free(current.name, quota_id=current.pk, errors=errors)
            tree.validate([current], errors)
            after = quota_snapshot(current, tree)
            changed_fields = [field for field in QUOTA_FIELDS if before[field] != after[field]]
            if changed_fields:
                _save(current)
                audit.record(
                    actor=actor,
                    action="quota.update",
                    object_type="quota",
                    object_id=current.pk,
                    object_repr=current.name,
                    before={field: before[field] for field in changed_fields},
                    after={field: after[field] for field in changed_fields},
                )
                _on_commit_send(
                    signals.quota_tree_changed,
                    Quota,
                    action="quota.update",
                    quota_ids=[current.pk],
                    fields=changed_fields,
                )
            return current

    return apply


def _quota_holders(quota: Quota) -> list[str]:
    """Why a quota must stay: children, bound workspaces, live jobs, and what higher apps register."""
    reasons: list[str] = []
    children = list(Quota.objects.filter(parent=quota).order_by("id").values_list("name", flat=True))
    if children:
        reasons.append(
            f"{quota.name} has {len(children)} child quota(s) ({', '.join(children[:5])}); delete them first."
        )
    # Bound workspaces and live jobs belong to the apps above, which register guards (they know
    # what binds and what is live); their PROTECT foreign keys stay as the last line.
    reasons.extend(reason for reason in hooks.quota_delete_blockers(quota) if reason not in reasons)
    return reasons


def preview_delete_quota(*, actor: Actor, quota: Quota) -> DryRunResult:
    """`delete_quota` in a rolled-back transaction: whether it is allowed, and what it would move."""
    return _dry_run(_delete_quota_change(actor=actor, quota=quota), pool_id=quota.pool_id)


def delete_quota(*, actor: Actor, quota: Quota) -> None:
    """Refused while the quota has children, bound workspaces or live jobs."""
    _delete_quota_change(actor=actor, quota=quota)()


def _delete_quota_change(*, actor: Actor, quota: Quota) -> Callable[[], None]:
    _require_platform_admin(actor, "delete quotas")

    def apply() -> None:
        with transaction.atomic():
            tree = _Tree.locked(quota.pool_id)
            current = tree.get(quota)
            reasons = _quota_holders(current)
            if reasons:
                raise ValidationError({"quota": reasons})
            quota_id = _delete_audited(actor=actor, row=current, field="quota", before=quota_snapshot(current, tree))
            _on_commit_send(signals.quota_tree_changed, Quota, action="quota.delete", quota_ids=[quota_id])

    return apply
