"""Resource pools: each is scheduled on its own (SCHEDULING.md "Pool").

A pool has its own nodes, its own quota tree and its own placement policy, so a cycle over
several pools is one cycle per pool over that pool's part of the snapshot: a job sees only
its quota's pool's nodes, fair shares divide only that pool's capacity (no lending across
pools), and a reclaim looks for victims only among that pool's jobs. The results are merged
into one, which the runtime commits at once under its one lock and fence.

A snapshot whose nodes and quotas all name one pool (or none) is not split at all, so the
common case costs one pass over the nodes and quotas.
"""

from __future__ import annotations

from scheduling.engine.types import CycleResult, Decision, Job, Node, PendingReason, Quota, QuotaStatus, Snapshot


def single_pool(snapshot: Snapshot) -> bool:
    """True when every node and quota is in one pool: the snapshot is scheduled as it is."""
    nodes, quotas = snapshot.nodes, snapshot.quotas
    if nodes:
        pool = nodes[0].pool
    elif quotas:
        pool = quotas[0].pool
    else:
        return True
    return all(node.pool == pool for node in nodes) and all(quota.pool == pool for quota in quotas)


def split_by_pool(snapshot: Snapshot) -> list[tuple[str, Snapshot]]:
    """One snapshot per pool: its nodes, its quotas, the jobs of its quotas, its placement policy.

    Pools come in the order they first appear (quotas first, then nodes), so that a cycle's
    decisions come out the same every time. A child quota is in its root's pool whatever it
    names (a tree never spans pools). A job whose quota is unknown goes with the first pool,
    whose cycle then gives it `unknown_quota`.
    """
    by_name = {quota.name: quota for quota in snapshot.quotas}
    pool_of_quota: dict[str, str] = {}
    for quota in snapshot.quotas:
        root = quota
        for _ in range(len(by_name)):  # bounded: a broken snapshot with a cycle still ends
            if root.parent is None or root.parent not in by_name:
                break
            root = by_name[root.parent]
        pool_of_quota[quota.name] = root.pool
    order: dict[str, None] = dict.fromkeys(pool_of_quota.values())
    order.update((node.pool, None) for node in snapshot.nodes if node.pool not in order)
    pools = list(order)
    nodes: dict[str, list[Node]] = {pool: [] for pool in pools}
    quotas: dict[str, list[Quota]] = {pool: [] for pool in pools}
    jobs: dict[str, list[Job]] = {pool: [] for pool in pools}
    for node in snapshot.nodes:
        nodes[node.pool].append(node)
    for quota in snapshot.quotas:
        quotas[pool_of_quota[quota.name]].append(quota)
    first = pools[0]
    for job in snapshot.jobs:
        jobs[pool_of_quota.get(job.quota, first)].append(job)
    placements = dict(snapshot.pool_placements)
    node_count = len(snapshot.nodes)
    return [
        (
            pool,
            Snapshot(
                nodes=tuple(nodes[pool]),
                quotas=tuple(quotas[pool]),
                jobs=tuple(jobs[pool]),
                now=snapshot.now,
                placement=placements.get(pool, snapshot.placement),
                bound_share=len(nodes[pool]) / node_count if node_count else 1.0,
            ),
        )
        for pool in pools
    ]


def merge(results: list[CycleResult]) -> CycleResult:
    """The pools' results as one: decisions pool after pool, every quota's status and every
    pending job's reason (names are unique across pools, so nothing collides)."""
    decisions: list[Decision] = []
    quotas: dict[str, QuotaStatus] = {}
    pending: dict[str, PendingReason] = {}
    for result in results:
        decisions.extend(result.decisions)
        quotas.update(result.quotas)
        pending.update(result.pending)
    return CycleResult(decisions=tuple(decisions), quotas=quotas, pending=pending)
