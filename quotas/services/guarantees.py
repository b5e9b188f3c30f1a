"""Moving guarantee: scale a quota's guarantees, or transfer guarantee between siblings."""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ValidationError
from django.db import transaction

from quotas import audit, signals
from quotas.models import Quota
from quotas.services.common import _TOLERANCE, Actor, _is_number, _on_commit_send, _require_platform_admin
from quotas.services.errors import _amount, _Errors, _number, _unit
from quotas.services.preview import DryRunResult, _dry_run
from quotas.services.rules import _save, _Tree


def preview_scale_quota(
    *,
    actor: Actor,
    quota: Quota,
    gpus: float | None = None,
    cpu: float | None = None,
    memory_gib: float | None = None,
) -> DryRunResult:
    """`scale_quota` in a rolled-back transaction: whether it is valid, and what it would move."""
    change = _scale_quota_change(actor=actor, quota=quota, gpus=gpus, cpu=cpu, memory_gib=memory_gib)
    return _dry_run(change, pool_id=quota.pool_id)


def scale_quota(
    *,
    actor: Actor,
    quota: Quota,
    gpus: float | None = None,
    cpu: float | None = None,
    memory_gib: float | None = None,
) -> Quota:
    """Set new guarantees (absolute amounts; None leaves a resource as it is).

    Up needs room in the parent (the pool, for a root); down is allowed unless the quota's own
    children already hold more than the new amount.
    """
    return _scale_quota_change(actor=actor, quota=quota, gpus=gpus, cpu=cpu, memory_gib=memory_gib)()


def _scale_quota_change(
    *, actor: Actor, quota: Quota, gpus: float | None, cpu: float | None, memory_gib: float | None
) -> Callable[[], Quota]:
    _require_platform_admin(actor, "scale quotas")
    amounts = {field: amount for field, amount in (("gpus", gpus), ("cpu", cpu), ("memory_gib", memory_gib))}
    amounts = {field: amount for field, amount in amounts.items() if amount is not None}

    def apply() -> Quota:
        if not amounts:
            raise ValidationError({"gpus": "Name at least one of gpus, cpu, memory_gib to scale."})
        with transaction.atomic():
            tree = _Tree.locked(quota.pool_id)
            current = tree.get(quota)
            before = {field: getattr(current, field) for field in amounts}
            for field, amount in amounts.items():
                setattr(current, field, amount)
            tree.validate([current], _Errors())
            _save(current)
            audit.record(
                actor=actor,
                action="quota.scale",
                object_type="quota",
                object_id=current.pk,
                object_repr=current.name,
                before=before,
                after=dict(amounts),
            )
            _on_commit_send(signals.quota_tree_changed, Quota, action="quota.scale", quota_ids=[current.pk])
            return current

    return apply


def preview_transfer_quota(
    *,
    actor: Actor,
    source: Quota,
    target: Quota,
    gpus: float = 0,
    cpu: float = 0,
    memory_gib: float = 0,
) -> DryRunResult:
    """`transfer_quota` in a rolled-back transaction: whether it is valid, and what it would move."""
    change = _transfer_quota_change(
        actor=actor, source=source, target=target, gpus=gpus, cpu=cpu, memory_gib=memory_gib
    )
    return _dry_run(change, pool_id=source.pool_id)


def transfer_quota(
    *,
    actor: Actor,
    source: Quota,
    target: Quota,
    gpus: float = 0,
    cpu: float = 0,
    memory_gib: float = 0,
) -> tuple[Quota, Quota]:
    """Move guarantee from `source` to its sibling `target` in one step (PAI: 80→72 and 48→56 at once).

    Returns (source, target) as they are after the move.
    """
    return _transfer_quota_change(
        actor=actor, source=source, target=target, gpus=gpus, cpu=cpu, memory_gib=memory_gib
    )()


def _transfer_quota_change(
    *, actor: Actor, source: Quota, target: Quota, gpus: float, cpu: float, memory_gib: float
) -> Callable[[], tuple[Quota, Quota]]:
    _require_platform_admin(actor, "transfer quota")
    amounts = {"gpus": gpus, "cpu": cpu, "memory_gib": memory_gib}

    def apply() -> tuple[Quota, Quota]:
        errors = _Errors()
        for field, amount in amounts.items():
            if not _is_number(amount):
                errors.add(field, f"The {field} to transfer must be a number, got {amount!r}.")
            elif amount < 0:
                errors.add(field, f"The {field} to transfer must be at least 0, got {_number(amount)}.")
        errors.raise_if_any()
        if all(amount == 0 for amount in amounts.values()):
            raise ValidationError({"gpus": "A transfer must move something: gpus, cpu and memory_gib are all 0."})
        if source.pk == target.pk:
            raise ValidationError({"to": f"{source.name} cannot transfer to itself."})
        if source.pool_id != target.pool_id:
            raise ValidationError({"to": f"{target.name} is in another resource pool than {source.name}."})
        with transaction.atomic():
            tree = _Tree.locked(source.pool_id)
            giver = tree.get(source)
            taker = tree.get(target)
            if taker.parent_id != giver.parent_id:
                giver_parent = tree.parent_of(giver)
                taker_parent = tree.parent_of(taker)
                raise ValidationError(
                    {
                        "to": f"{taker.name} is not a sibling of {giver.name}: their parents are "
                        f"{taker_parent.name if taker_parent else 'none (a root)'} and "
                        f"{giver_parent.name if giver_parent else 'none (a root)'}; transfers move guarantee "
                        "between quotas of one parent."
                    }
                )
            before = {giver.name: {}, taker.name: {}}  # type: dict[str, dict[str, float | None]]
            after = {giver.name: {}, taker.name: {}}  # type: dict[str, dict[str, float | None]]
            move_errors = _Errors()
            for field, amount in amounts.items():
                if amount == 0:
                    continue
                unit = _unit(field)
                has = getattr(giver, field)
                if has is None:
                    move_errors.add(field, f"{giver.name} has no {field} guarantee to give.")
                    continue
                if amount > has + _TOLERANCE:
                    move_errors.add(
                        field, f"{giver.name} has {_amount(has, unit)}; it cannot give {_amount(amount, unit)}."
                    )
                    continue
                before[giver.name][field] = has
                before[taker.name][field] = getattr(taker, field)
                setattr(giver, field, max(0.0, has - amount))
                setattr(taker, field, (getattr(taker, field) or 0) + amount)
                after[giver.name][field] = getattr(giver, field)
                after[taker.name][field] = getattr(taker, field)
            move_errors.raise_if_any()
            tree.validate([giver, taker], _Errors())
            _save(giver)
            _save(taker)
            audit.record(
                actor=actor,
                action="quota.transfer",
                object_type="quota",
                object_id=giver.pk,
                object_repr=f"{giver.name} → {taker.name}",
                before=before,
                after=after,
            )
            _on_commit_send(signals.quota_tree_changed, Quota, action="quota.transfer", quota_ids=[giver.pk, taker.pk])
            return giver, taker

    return apply
