"""Reads of the quotas app that the API, the pages and the scheduler share.

Every queryset a user is shown goes through `visible_quotas` / `visible_nodes`, so that the
workspaces app can later filter them for non-admins in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import F, QuerySet, Sum

from quotas import hooks
from quotas.models import AuditRecord, Node, NodeState, Quota, ResourcePool

Viewer = AbstractBaseUser | AnonymousUser | None


class QuotaTreeEntry(TypedDict):
    """A quota as the tree shows it; no id, since a dry run's new quota has none that lasts."""

    name: str
    parent: str | None
    gpus: float
    cpu: float | None
    memory_gib: float | None
    limit: float | None
    weight: float | None
    effective_weight: float
    rank: int
    child_preemption: bool
    same_level_preemption: bool
    queue_policy: str
    min_runtime_seconds: int | None


class PoolCapacity(TypedDict):
    """What the roots of a pool may guarantee: every node counts, ready or not."""

    gpus: float
    cpu: float
    memory_gib: float
    nodes: int
    ready_nodes: int
    ready_gpus: float


def visible_quotas(user: Viewer) -> QuerySet[Quota]:
    """The one choke point for which quotas a user may see (the rule is registered in hooks)."""
    return hooks.restrict_quotas(Quota.objects.all(), user)


def quota_list(*, user: Viewer = None) -> QuerySet[Quota]:
    """Quotas with `parent_name` and `pool_name` joined in; the timestamps, never shown, are not
    loaded (1,000 rows in 200 ms)."""
    return (
        visible_quotas(user)
        .annotate(parent_name=F("parent__name"), pool_name=F("pool__name"))
        .defer("created_at", "updated_at")
        .order_by("id")
    )


def visible_pools(user: Viewer) -> QuerySet[ResourcePool]:
    """Platform admins see every pool; everyone else the pools of the quotas they may see."""
    pools = ResourcePool.objects.order_by("id")
    if user is not None and getattr(user, "is_superuser", False):
        return pools
    return pools.filter(pk__in=visible_quotas(user).values("pool_id"))


def pool_by_name(name: str) -> ResourcePool | None:
    return ResourcePool.objects.filter(name=name).first()


class QuotaTreeRow(TypedDict):
    quota: Quota
    depth: int
    status: hooks.QuotaStatus


def quota_tree_rows(*, user: Viewer) -> list[QuotaTreeRow]:
    """The quotas the user may see in tree order (parents before children, siblings by age),
    each with its depth and status; a quota whose parent is hidden from the user starts a tree."""
    quotas = list(quota_list(user=user))
    statuses = quota_statuses(quotas)
    visible = {quota.pk for quota in quotas}
    children: dict[int | None, list[Quota]] = {}
    for quota in quotas:
        parent = quota.parent_id if quota.parent_id in visible else None
        children.setdefault(parent, []).append(quota)
    rows: list[QuotaTreeRow] = []
    stack = [(quota, 0) for quota in reversed(children.get(None, []))]
    while stack:
        quota, depth = stack.pop()
        rows.append(QuotaTreeRow(quota=quota, depth=depth, status=statuses[quota.pk]))
        stack.extend((child, depth + 1) for child in reversed(children.get(quota.pk, [])))
    return rows


def quota_statuses(quotas: Sequence[Quota]) -> dict[int, hooks.QuotaStatus]:
    """Status of a page of quotas in one call, so the queries do not grow with the page."""
    return hooks.quota_status(quotas)


def quota_tree(*, pool: ResourcePool | int | None = None) -> list[QuotaTreeEntry]:
    """The quota tree of a pool (all pools when None) as plain entries, parents by name, in one query."""
    quotas = Quota.objects.order_by("id")
    if pool is not None:
        quotas = quotas.filter(pool=pool)
    rows = quotas.values(
        "name",
        "parent__name",
        "gpus",
        "cpu",
        "memory_gib",
        "limit",
        "weight",
        "rank",
        "child_preemption",
        "same_level_preemption",
        "queue_policy",
        "min_runtime_seconds",
    )
    return [_tree_entry(row) for row in rows]


def _tree_entry(row: Mapping[str, Any]) -> QuotaTreeEntry:
    return QuotaTreeEntry(
        name=row["name"],
        parent=row["parent__name"],
        gpus=row["gpus"],
        cpu=row["cpu"],
        memory_gib=row["memory_gib"],
        limit=row["limit"],
        weight=row["weight"],
        effective_weight=row["gpus"] if row["weight"] is None else row["weight"],
        rank=row["rank"],
        child_preemption=row["child_preemption"],
        same_level_preemption=row["same_level_preemption"],
        queue_policy=row["queue_policy"],
        min_runtime_seconds=row["min_runtime_seconds"],
    )


def default_pool() -> ResourcePool | None:
    """The default pool, or None before anything was created in it (reads never create it)."""
    return ResourcePool.objects.filter(name=ResourcePool.DEFAULT_NAME).first()


def pool_capacity(*, pool: ResourcePool | int) -> PoolCapacity:
    nodes = Node.objects.filter(pool=pool)
    totals = nodes.aggregate(gpus=Sum("gpus"), cpu=Sum("cpu"), memory_gib=Sum("memory_gib"))
    ready = nodes.filter(state=NodeState.READY).aggregate(gpus=Sum("gpus"))
    return PoolCapacity(
        gpus=float(totals["gpus"] or 0),
        cpu=float(totals["cpu"] or 0),
        memory_gib=float(totals["memory_gib"] or 0),
        nodes=nodes.count(),
        ready_nodes=nodes.filter(state=NodeState.READY).count(),
        ready_gpus=float(ready["gpus"] or 0),
    )


def visible_nodes(user: Viewer) -> QuerySet[Node]:
    """The choke point for nodes; inventory is not secret, every signed-in user sees it."""
    del user
    return Node.objects.all()


def node_list(*, user: Viewer = None) -> QuerySet[Node]:
    return visible_nodes(user).select_related("agent", "pool").order_by("id")


def audit_log(
    *,
    action: str | None = None,
    object_type: str | None = None,
    actor: str | None = None,
) -> QuerySet[AuditRecord]:
    """Newest first; `actor` is a username."""
    records = AuditRecord.objects.select_related("actor").order_by("-at", "-id")
    if action:
        records = records.filter(action=action)
    if object_type:
        records = records.filter(object_type=object_type)
    if actor:
        records = records.filter(actor__username=actor)
    return records


def subtree_ids(*, quota: Quota) -> list[int]:
    """The quota and everything under it, in one query of its pool's parent links."""
    children: dict[int, list[int]] = {}
    for quota_id, parent_id in Quota.objects.filter(pool_id=quota.pool_id).values_list("id", "parent_id"):
        if parent_id is not None:
            children.setdefault(parent_id, []).append(quota_id)
    found: list[int] = []
    stack = [quota.pk]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, []))
    return found


def quota_audit(*, quota: Quota, limit: int = 100) -> list[AuditRecord]:
    """The audit log of a quota and its subtree, newest first (a transfer is filed under its giver)."""
    ids = [str(quota_id) for quota_id in subtree_ids(quota=quota)]
    return list(audit_log(object_type="quota").filter(object_id__in=ids)[:limit])
