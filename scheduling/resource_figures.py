"""CPU and memory figures of the quotas of pools that manage them (SCHEDULING.md "Managed
resources"): what the API's `status.cpu` / `status.memory_gib` and the pages show.

Guaranteed and limit are the quota's own settings, allocated is what its subtree's jobs hold now
(per replica × replicas placed), both read live like the GPU figures; the fair share is the
engine's, as the last cycle worked it out (`record_fair_shares`, called in the cycle's commit),
since working it out again per read would mean a full snapshot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime

from quotas.hooks import ResourceFigures
from scheduling import engine
from scheduling.engine.types import MANAGED_RESOURCES
from scheduling.models import ResourceFairShare

# A float read back from JSON may differ in its last bits; a share that moved less is not rewritten.
_MOVED = 1e-9


def managed_by_pool(quotas: Iterable[engine.Quota]) -> dict[str, tuple[str, ...]]:
    """The resources besides GPUs each pool manages: those a root quota of it sets."""
    managed: dict[str, set[str]] = defaultdict(set)
    for quota in quotas:
        if quota.parent is None:
            managed[quota.pool].update(name for name in MANAGED_RESOURCES if getattr(quota, name) is not None)
    return {pool: tuple(r for r in MANAGED_RESOURCES if r in resources) for pool, resources in managed.items()}


def stored_fair_shares() -> dict[str, dict[str, float]]:
    """The engine's fair shares per quota name and resource, as the last cycle left them."""
    return dict(ResourceFairShare.objects.values_list("quota__name", "shares"))


def resource_figures(
    quotas: list[engine.Quota],
    held_own: Mapping[str, Mapping[str, float]],
    fair_share: Mapping[str, Mapping[str, float]],
) -> dict[str, dict[str, ResourceFigures]]:
    """Per quota name and managed resource: its figures. `held_own` is what each quota's own jobs
    hold, per resource; the subtree's sum is worked out here. Quotas of pools that manage GPUs
    only get no entry."""
    managed = managed_by_pool(quotas)
    if not any(managed.values()):
        return {}
    parent_of = {quota.name: quota.parent for quota in quotas}
    held: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for own, amounts in held_own.items():
        name: str | None = own
        while name is not None and name in parent_of:
            for resource, amount in amounts.items():
                held[name][resource] += amount
            name = parent_of.get(name)
    figures: dict[str, dict[str, ResourceFigures]] = {}
    for quota in quotas:
        resources = managed.get(quota.pool, ())
        if not resources:
            continue
        figures[quota.name] = {
            resource: ResourceFigures(
                fair_share=float(fair_share.get(quota.name, {}).get(resource, 0.0)),
                allocated=float(held.get(quota.name, {}).get(resource, 0.0)),
                # None in a pool that manages the resource: nothing guaranteed (the engine's 0).
                guaranteed=float(getattr(quota, resource) or 0.0),
                limit=getattr(quota, f"{resource}_limit"),
            )
            for resource in resources
        }
    return figures


def record_fair_shares(*, result: engine.CycleResult, quota_ids: Mapping[str, int], at: datetime) -> int:
    """Keep the engine's CPU and memory fair shares of this cycle, in its commit; rewrite only the
    quotas whose share moved, and drop those of pools that stopped managing either. Returns how
    many rows changed. Where every pool manages GPUs only this costs one query."""
    wanted: dict[int, dict[str, float]] = {}
    for name, quota_id in quota_ids.items():
        status = result.quotas.get(name)
        if status is not None and status.resources:
            wanted[quota_id] = {resource: float(figures.fair_share) for resource, figures in status.resources.items()}
    stored: dict[int, dict[str, float]] = dict(ResourceFairShare.objects.values_list("quota_id", "shares"))
    if not wanted and not stored:
        return 0
    gone = [quota_id for quota_id in stored if quota_id not in wanted]
    moved = [
        ResourceFairShare(quota_id=quota_id, shares=shares, at=at)
        for quota_id, shares in wanted.items()
        if not _same(stored.get(quota_id), shares)
    ]
    if gone:
        ResourceFairShare.objects.filter(quota_id__in=gone).delete()
    if moved:
        ResourceFairShare.objects.bulk_create(
            moved, update_conflicts=True, unique_fields=["quota"], update_fields=["shares", "at"]
        )
    return len(gone) + len(moved)


def _same(before: Mapping[str, float] | None, after: Mapping[str, float]) -> bool:
    if before is None or before.keys() != after.keys():
        return False
    return all(abs(float(before[resource]) - after[resource]) <= _MOVED for resource in after)
