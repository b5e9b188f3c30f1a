"""The quota tree and fair share (SCHEDULING.md §1).

GPU amounts are held in milli-GPUs (int) so that fractions add up exactly and rounding to
whole GPUs is an integer operation. Every job sits in a leaf: a quota without children, or
the synthetic "self" child of a parent that has jobs of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from scheduling.engine.pools import single_pool, split_by_pool
from scheduling.engine.types import FIFO, PENDING, Job, Quota, Snapshot

MILLI = 1000
NO_LIMIT = 1 << 60
SELF_SUFFIX = "/self"
_CHILD_PREEMPTION_RANK = 1 << 40


def to_milli(gpus: float) -> int:
    return round(gpus * MILLI)


def job_replica_milli(job: Job) -> int:
    """GPUs of one replica; a whole-GPU replica above 1 asking a fraction is rounded up."""
    if job.gpus < 1:
        return max(1, to_milli(job.gpus))
    return math.ceil(job.gpus - 1e-9) * MILLI


class QuotaTree:
    """Parallel arrays over tree nodes; index order is the walk order (parents first)."""

    __slots__ = (
        "admit_guaranteed",
        "chain",
        "child_preemption",
        "children",
        "created",
        "depth",
        "fifo",
        "guaranteed",
        "index",
        "is_self",
        "leaf_of",
        "limit",
        "min_runtime",
        "names",
        "parent",
        "quota_name",
        "rank",
        "roots",
        "same_level",
        "weight",
    )

    def __init__(self, quotas: Sequence[Quota], owners: Iterable[str]) -> None:
        by_name: dict[str, Quota] = {}
        for quota in quotas:
            by_name.setdefault(quota.name, quota)
        kids: dict[str | None, list[Quota]] = {}
        for quota in by_name.values():
            parent = quota.parent if quota.parent in by_name else None
            if parent is not None and _has_cycle(by_name, quota.name):
                parent = None
            kids.setdefault(parent, []).append(quota)
        for group in kids.values():
            group.sort(key=lambda q: (q.created_order, q.name))
        with_own_jobs = set(owners)

        self.names: list[str] = []
        self.quota_name: list[str] = []
        self.parent: list[int] = []
        self.children: list[list[int]] = []
        self.is_self: list[bool] = []
        self.guaranteed: list[int] = []
        self.admit_guaranteed: list[int] = []
        self.limit: list[int] = []
        self.weight: list[float] = []
        self.rank: list[int] = []
        self.created: list[int] = []
        self.child_preemption: list[bool] = []
        self.same_level: list[bool] = []
        self.fifo: list[bool] = []
        self.min_runtime: list[float] = []
        self.depth: list[int] = []
        self.index: dict[str, int] = {}
        self.leaf_of: dict[str, int] = {}
        self.roots: list[int] = []

        def add(name: str, quota: Quota, parent: int, is_self: bool) -> int:
            i = len(self.names)
            self.names.append(name)
            self.quota_name.append(quota.name)
            self.parent.append(parent)
            self.children.append([])
            self.is_self.append(is_self)
            if parent >= 0:
                self.children[parent].append(i)
                self.depth.append(self.depth[parent] + 1)
                inherited = self.min_runtime[parent]
            else:
                self.roots.append(i)
                self.depth.append(0)
                inherited = 0.0
            own = quota.min_runtime_seconds
            self.min_runtime.append(inherited if own is None else float(own))
            return i

        stack: list[tuple[Quota, int]] = [(q, -1) for q in reversed(kids.get(None, []))]
        while stack:
            quota, above = stack.pop()
            i = add(quota.name, quota, above, False)
            self.index[quota.name] = i
            g = to_milli(quota.gpus)
            self.guaranteed.append(g)
            self.admit_guaranteed.append(g)
            self.limit.append(NO_LIMIT if quota.limit is None else to_milli(quota.limit))
            self.weight.append(float(quota.gpus if quota.weight is None else quota.weight))
            self.rank.append(quota.rank)
            self.created.append(quota.created_order)
            self.child_preemption.append(quota.child_preemption)
            self.same_level.append(quota.same_level_preemption)
            self.fifo.append(quota.queue_policy == FIFO)
            children = kids.get(quota.name, [])
            if not children:
                self.leaf_of[quota.name] = i
                continue
            if quota.name in with_own_jobs:
                # A parent's own jobs are one more child, "self", holding what the children's
                # guarantees leave of the parent's; child_preemption lets them use all of it.
                remainder = max(0, g - sum(to_milli(c.gpus) for c in children))
                s = add(quota.name + SELF_SUFFIX, quota, i, True)
                self.leaf_of[quota.name] = s
                self.guaranteed.append(remainder)
                self.admit_guaranteed.append(g if quota.child_preemption else remainder)
                self.limit.append(NO_LIMIT)
                self.weight.append(float(remainder) / MILLI)
                self.rank.append(_CHILD_PREEMPTION_RANK if quota.child_preemption else 0)
                self.created.append(quota.created_order)
                self.child_preemption.append(False)
                self.same_level.append(quota.same_level_preemption)
                self.fifo.append(quota.queue_policy == FIFO)
            for child in reversed(children):
                stack.append((child, i))

        self.chain: list[tuple[int, ...]] = []
        for i in range(len(self.names)):
            up = [i]
            p = self.parent[i]
            while p >= 0:
                up.append(p)
                p = self.parent[p]
            self.chain.append(tuple(up))

    def __len__(self) -> int:
        return len(self.names)

    def self_of(self, parent: int) -> int:
        """The "self" leaf of a parent, or -1."""
        kids = self.children[parent]
        if kids and self.is_self[kids[0]]:
            return kids[0]
        return -1


_built: list[tuple[tuple[Quota, ...], frozenset[str], frozenset[str], QuotaTree]] = []  # see quota_tree


def quota_tree(quotas: tuple[Quota, ...], owners: set[str]) -> QuotaTree:
    """`QuotaTree(quotas, owners)`, or the one built before from equal quotas whose parents have
    the same own jobs (all that a tree depends on): a runtime hands the engine the same quotas
    cycle after cycle, and a tree is read-only once built. A few are kept (one per pool)."""
    global _built
    for built_from, parents, with_jobs, tree in _built:
        if built_from == quotas and parents.intersection(owners) == with_jobs:  # the same Quotas: no field read
            return tree
    tree = QuotaTree(quotas, owners)
    parents = frozenset(tree.quota_name[i] for i in range(len(tree)) if tree.children[i])
    _built = [(quotas, parents, parents.intersection(owners), tree), *_built[:3]]
    return tree


def _has_cycle(by_name: dict[str, Quota], start: str) -> bool:
    seen = {start}
    parent = by_name[start].parent
    while parent is not None and parent in by_name:
        if parent in seen:
            return True
        seen.add(parent)
        parent = by_name[parent].parent
    return False


def subtree_requests(tree: QuotaTree, leaf_request: Sequence[int]) -> list[int]:
    """Leaf requests summed upwards (the index order puts parents before children)."""
    request = list(leaf_request)
    parent = tree.parent
    for i in range(len(request) - 1, -1, -1):
        p = parent[i]
        if p >= 0:
            request[p] += request[i]
    return request


def divide(
    tree: QuotaTree, request: Sequence[int], capacity: int, fractional: Sequence[bool] | None = None
) -> list[int]:
    """Fair share of every tree node, top-down (SCHEDULING.md §1).

    `fractional[i]`: node i has fractional jobs in its subtree and may take fractions of a GPU
    from idle capacity; others take whole GPUs.
    """
    share = [0] * len(tree)
    if fractional is None:
        fractional = [r % MILLI != 0 for r in request]
    _divide_level(tree, tree.roots, capacity, request, share, None, fractional)
    for i in range(len(tree)):
        kids = tree.children[i]
        if kids:
            squeeze = -1
            if tree.child_preemption[i] and tree.is_self[kids[0]]:
                squeeze = tree.guaranteed[i]
            _divide_level(tree, kids, share[i], request, share, squeeze, fractional)
    return share


def _divide_level(
    tree: QuotaTree,
    kids: list[int],
    amount: int,
    request: Sequence[int],
    share: list[int],
    squeeze: int | None,
    fractional: Sequence[bool],
) -> None:
    guaranteed = tree.guaranteed
    limit = tree.limit
    wanted: list[int] = []
    total = 0
    for k in kids:
        cap = request[k]
        lim = limit[k]
        if lim < cap:
            cap = lim
        wanted.append(cap)
        g = guaranteed[k]
        take = g if g < cap else cap
        share[k] = take
        total += take
    if squeeze is not None and squeeze >= 0:
        # child_preemption: the parent's own jobs come first against its whole guarantee.
        own = kids[0]
        own_take = min(squeeze, wanted[0])
        share[own] = own_take
        others = sum(share[k] for k in kids[1:])
        budget = max(0, squeeze - own_take)
        if others > budget:
            _scale_down(tree, kids[1:], budget, others, share)
        total = sum(share[k] for k in kids)
    remaining = amount - total
    if remaining <= 0:
        return
    hungry = [(k, wanted[n]) for n, k in enumerate(kids) if share[k] < wanted[n]]
    if not hungry:
        return
    rank = tree.rank
    if len({rank[k] for k, _ in hungry}) > 1:
        hungry.sort(key=lambda kw: -rank[kw[0]])
    start = 0
    while start < len(hungry) and remaining > 0:
        end = start
        group_rank = rank[hungry[start][0]]
        while end < len(hungry) and rank[hungry[end][0]] == group_rank:
            end += 1
        remaining = _idle_rounds(tree, hungry[start:end], remaining, fractional, share)
        start = end


def _scale_down(tree: QuotaTree, kids: list[int], budget: int, total: int, share: list[int]) -> None:
    lost: list[tuple[int, int, int]] = []
    given = 0
    for k in kids:
        exact = share[k] * budget
        take = exact // total
        take -= take % MILLI
        lost.append((-(exact - take * total), tree.created[k], k))
        share[k] = take
        given += take
    lost.sort()
    left = budget - given
    for _, _, k in lost:
        if left < MILLI:
            break
        share[k] += MILLI
        left -= MILLI


def _idle_rounds(
    tree: QuotaTree,
    group: list[tuple[int, int]],
    remaining: int,
    fractional: Sequence[bool],
    share: list[int],
) -> int:
    """Idle phase of one rank group: the rounds in closed form, then rounding and leftovers.

    Offering `weight / Σ weights` of what remains, round after round, until every child is
    satisfied or nothing remains, converges to water-filling: every unsatisfied child ends at
    the same level × weight. Computing that level directly and rounding once keeps each child
    within one GPU of its exact proportional share (the rounds, floored each time, drift).
    """
    weight = tree.weight
    # (room / weight, k, room, weight) of every child that still wants more
    active = []
    total_weight = 0.0
    for k, cap in group:
        w = weight[k]
        room = cap - share[k]
        if w > 0 and room > 0:
            active.append((room / w, k, room, w))
            total_weight += w
    if not active:
        return remaining
    active.sort()
    left = float(remaining)
    ideal: list[tuple[int, float]] = []
    for position, (_, k, room, w) in enumerate(active):
        level = left / total_weight
        if room <= level * w:
            ideal.append((k, room))
            left -= room
            total_weight -= w
            continue
        ideal.extend((j, level * wj) for _, j, _, wj in active[position:])
        break
    lost: list[tuple[float, int, int]] = []
    rooms: dict[int, int] = {}
    created = tree.created
    for (k, amount), (_, _, room, _) in zip(ideal, active, strict=False):
        if fractional[k]:
            got = int(amount)
        else:
            got = int(amount) // MILLI * MILLI
            if amount - got > 1e-6:
                lost.append((-(amount - got), created[k], k))
        share[k] += got
        remaining -= got
        rooms[k] = room - got
    # Whole GPUs lost to rounding go to the largest loss, the older quota on ties.
    lost.sort()
    while remaining >= MILLI and lost:
        still: list[tuple[float, int, int]] = []
        for entry in lost:
            k = entry[2]
            if remaining < MILLI:
                break
            if rooms[k] >= MILLI:
                share[k] += MILLI
                rooms[k] -= MILLI
                remaining -= MILLI
                still.append(entry)
        lost = still
    return remaining


def requests_by_leaf(tree: QuotaTree, jobs: Iterable[Job]) -> list[int]:
    """Request of each leaf: running GPUs plus what pending jobs ask, elastic jobs in full."""
    leaf_request = [0] * len(tree)
    leaf_of = tree.leaf_of
    for job in jobs:
        leaf = leaf_of.get(job.quota)
        if leaf is None:
            continue
        leaf_request[leaf] += job_replica_milli(job) * job.replicas
    return leaf_request


def fractional_nodes(tree: QuotaTree, jobs: Iterable[Job]) -> list[bool]:
    """Nodes whose subtree holds a job with a fractional replica."""
    flags = [False] * len(tree)
    leaf_of = tree.leaf_of
    for job in jobs:
        if job.gpus < 1:
            leaf = leaf_of.get(job.quota)
            if leaf is not None:
                for node in tree.chain[leaf]:
                    flags[node] = True
    return flags


def cluster_capacity(snapshot: Snapshot) -> int:
    """Milli-GPUs that fair share divides: every GPU of a node that takes new placements, and of
    a cordoned or draining node only what its jobs hold now.

    A cordoned node's idle GPUs are not available for new work (as in Kueue and KAI-Scheduler),
    so dividing them would promise shares that nobody can be given. The GPUs its jobs still
    hold do count: left out, those jobs would push their quotas over a fair share worked out on
    a cluster without them, and make them reclaim victims for nothing. As the jobs leave (a
    drain), the capacity shrinks with them. A node that is not ready counts for nothing.
    """
    total = sum(node.console_gpus for node in snapshot.nodes if node.placeable) * MILLI
    cordoned = {node.name for node in snapshot.nodes if node.ready and not node.placeable}
    if not cordoned:
        return total
    held: dict[tuple[str, int], int] = {}
    for job in snapshot.jobs:
        if job.state == PENDING:
            continue
        for placement in job.placements:
            if placement.node not in cordoned:
                continue
            milli = to_milli(placement.fraction) if placement.fraction < 1 else MILLI
            for device in placement.devices:
                key = (placement.node, device)
                held[key] = min(MILLI, held.get(key, 0) + milli)
    return total + sum(held.values())


def fair_shares(snapshot: Snapshot) -> dict[str, float]:
    """Fair share in GPUs of every quota (self leaves are reported under "<parent>/self"); each
    pool divides its own capacity (engine.pools)."""
    if not single_pool(snapshot):
        shares: dict[str, float] = {}
        for _pool, part in split_by_pool(snapshot):
            shares.update(fair_shares(part))
        return shares
    owners = {job.quota for job in snapshot.jobs}
    tree = quota_tree(snapshot.quotas, owners)
    request = subtree_requests(tree, requests_by_leaf(tree, snapshot.jobs))
    fractional = fractional_nodes(tree, snapshot.jobs)
    share = divide(tree, request, cluster_capacity(snapshot), fractional)
    return {tree.names[i]: share[i] / MILLI for i in range(len(tree))}


__all__ = [
    "MILLI",
    "NO_LIMIT",
    "PENDING",
    "QuotaTree",
    "cluster_capacity",
    "divide",
    "fair_shares",
    "job_replica_milli",
    "requests_by_leaf",
    "subtree_requests",
    "to_milli",
]
