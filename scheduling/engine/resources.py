"""CPU and memory as managed resources (SCHEDULING.md "Managed resources"), KAI-Scheduler's way:
its proportion plugin keeps guarantees, limits, over-quota weights and fair shares per resource,
and every rule of §1–§3 is asked of each resource in turn.

A pool manages CPU (memory) when any of its root quotas sets `cpu` (`memory_gib`); a pool that
manages GPUs only builds no ledger here, and every rule reads as before. For a managed resource
a quota has:

- guarantee: its `cpu` / `memory_gib`; not set is 0. A parent's own jobs ("self") get what its
  children's guarantees leave of its own, as for GPUs.
- limit: `cpu_limit` / `memory_gib_limit`; not set is no limit.
- weight: the quota's `weight` when set (one number, so idle CPU and idle GPUs are lent in the
  same proportions); otherwise its guarantee of that resource, so idle CPU is lent in proportion
  to CPU quota as idle GPUs are in proportion to GPU quota. A group of siblings none of which
  sets the resource (a tree that sets CPU on its roots only) divides its parent's CPU by their
  GPU weights instead: CPU follows the GPUs there rather than going to nobody.

Amounts are held in thousandths (milli-cores, milli-GiB) as ints, as GPUs are in milli-GPUs, and
fair shares keep fractions: a core or a GiB is divisible, so the "whole GPUs take whole GPUs"
rounding of §1 does not apply. A resource a job does not ask for (cpu 0) never stops it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from operator import attrgetter, sub
from typing import Any, Protocol

from scheduling.engine.cluster import Journal, Placement
from scheduling.engine.fairshare import MILLI, NO_LIMIT, QuotaTree, divide, subtree_requests, to_milli
from scheduling.engine.policies import saturation
from scheduling.engine.types import (
    CPU,
    EXCEEDS_CLUSTER,
    GUARANTEED_ONLY,
    INSUFFICIENT_CAPACITY,
    MANAGED_RESOURCES,
    MEMORY,
    PENDING,
    QUOTA_LIMIT,
    RUNNING,
    Job,
    Node,
    Quota,
    Snapshot,
)


class Working(Protocol):
    """What a ledger reads of the cycle's working state (engine.session.Session), named here so
    that this module needs no import of the session, which builds the ledgers."""

    snapshot: Snapshot
    jobs: tuple[Job, ...]
    tree: QuotaTree
    job_leaf: list[int]
    admit_count: list[int]
    state: list[str]
    placements: list[tuple[Placement, ...]]
    held: list[tuple[Placement, ...]]
    waiting_for: dict[int, list[int]]
    allocated: list[int]
    fair_share: list[int]
    capacity: int


# The bounds a rule holds a quota to (`Ledger.bound`).
FAIR_SHARE = 0  # the fair-share rule of reclaim
GUARANTEE = 1  # admit_guaranteed: non-preemptible jobs, the guarantee rule
ENTITLED = 2  # the larger of the two: allocate's second pass, where reclaim may look
CEILING = 3  # the limit, and the guarantee room promised to a waiting beneficiary
OWN_GUARANTEE = 4  # the quota's own guarantee (child-level preemption keeps P's subtree in it)

LABEL = {CPU: "cpu", MEMORY: "memory"}
UNIT = {CPU: "cores", MEMORY: "GiB"}
NOUN = {CPU: "CPU", MEMORY: "memory"}


def guarantee_of(quota: Quota, resource: str) -> float | None:
    return quota.cpu if resource == CPU else quota.memory_gib


def limit_of(quota: Quota, resource: str) -> float | None:
    return quota.cpu_limit if resource == CPU else quota.memory_gib_limit


def per_replica(job: Job, resource: str) -> float:
    return job.cpu if resource == CPU else job.memory_gib


def node_amount(node: Node, resource: str) -> float:
    return node.cpu if resource == CPU else node.memory_gib


def managed(quotas: Sequence[Quota]) -> tuple[str, ...]:
    """The resources besides GPUs that a pool's quotas manage: those any root sets."""
    names = {quota.name for quota in quotas}
    roots = [quota for quota in quotas if quota.parent is None or quota.parent not in names]
    return tuple(r for r in MANAGED_RESOURCES if any(guarantee_of(quota, r) is not None for quota in roots))


def resource_tree(tree: QuotaTree, quotas: Sequence[Quota], resource: str) -> QuotaTree:
    """The quota tree with one resource's guarantees, limits and weights in place of the GPUs';
    its shape (children, rank, switches, order) is the GPU tree's, shared, not copied."""
    by_name: dict[str, Quota] = {}
    for quota in quotas:
        by_name.setdefault(quota.name, quota)
    size = len(tree)
    guaranteed = [0] * size
    admit = [0] * size
    limit = [NO_LIMIT] * size
    sets = [False] * size
    for i in range(size):
        if tree.is_self[i]:
            continue
        quota = by_name[tree.quota_name[i]]
        own = guarantee_of(quota, resource)
        sets[i] = own is not None
        guaranteed[i] = admit[i] = to_milli(own or 0)
        ceiling = limit_of(quota, resource)
        limit[i] = NO_LIMIT if ceiling is None else to_milli(ceiling)
    for i in range(size):
        if tree.is_self[i]:
            # what the children's guarantees leave of the parent's (SCHEDULING.md "Words")
            p = tree.parent[i]
            remainder = max(0, guaranteed[p] - sum(guaranteed[c] for c in tree.children[p] if c != i))
            guaranteed[i] = remainder
            admit[i] = guaranteed[p] if tree.child_preemption[p] else remainder
            sets[i] = sets[p]
    weight = [0.0] * size
    for group in (tree.roots, *(kids for kids in tree.children if kids)):
        if not any(sets[k] for k in group if not tree.is_self[k]):
            for k in group:
                weight[k] = tree.weight[k]  # nobody here sets the resource: it follows the GPUs
            continue
        for k in group:
            explicit = None if tree.is_self[k] else by_name[tree.quota_name[k]].weight
            weight[k] = float(explicit) if explicit is not None else guaranteed[k] / MILLI
    view = copy.copy(tree)
    view.guaranteed = guaranteed
    view.admit_guaranteed = admit
    view.limit = limit
    view.weight = weight
    return view


def capacity(snapshot: Snapshot, resource: str) -> int:
    """What fair share divides of one resource, as `fairshare.cluster_capacity` counts GPUs: all
    of a node that takes placements, of a cordoned or draining one what its jobs hold there."""
    total = sum(to_milli(node_amount(node, resource)) for node in snapshot.nodes if node.placeable)
    cordoned = {node.name: node for node in snapshot.nodes if node.ready and not node.placeable}
    if not cordoned:
        return total
    held: dict[str, int] = {}
    for job in snapshot.jobs:
        if job.state == PENDING:
            continue
        for placement in job.placements:
            if placement.node in cordoned:
                held[placement.node] = held.get(placement.node, 0) + to_milli(per_replica(job, resource))
    return total + sum(min(amount, to_milli(node_amount(cordoned[name], resource))) for name, amount in held.items())


class Milli(dict[float, int]):
    """Thousandths of each figure met, converted once."""

    def __missing__(self, figure: float) -> int:
        self[figure] = amount = to_milli(figure)
        return amount


class JobShape:
    """What every ledger reads of the jobs, found once for all of them: the jobs admitted with
    more than one replica and their count, those with more than one replica, and each running
    job's leaf and replicas held (a leaf of -1 adds to the slot past the tree, dropped)."""

    __slots__ = ("admitted_many", "holding", "replicas_many")

    def __init__(self, session: Working) -> None:
        self.admitted_many = [(job, count) for job, count in enumerate(session.admit_count) if count != 1]
        self.replicas_many = [
            (job, spec.replicas)
            for job, spec in enumerate(session.jobs)
            if spec.replicas != 1 and session.job_leaf[job] >= 0
        ]
        state, job_leaf = session.state, session.job_leaf
        self.holding = [
            (job_leaf[job], job, len(placed))
            for job, placed in enumerate(session.placements)
            if placed and state[job] == RUNNING
        ]


class Ledger:
    """One managed resource of a session: per tree node its allocation, request, fair share and
    bounds (the tree's arrays), per job what one replica and its admission ask."""

    __slots__ = (
        "allocated",
        "bounds",
        "capacity",
        "capped",
        "ceiling",
        "entitled",
        "fair_share",
        "largest_node",
        "name",
        "needs",
        "oversized",
        "per_replica",
        "request",
        "tree",
    )

    def __init__(
        self,
        session: Working,
        resource: str,
        releasing_alone: Sequence[int],
        shape: JobShape,
    ) -> None:
        snapshot = session.snapshot
        jobs = session.jobs
        tree = resource_tree(session.tree, snapshot.quotas, resource)
        self.name = resource
        self.tree = tree
        # one conversion per distinct figure, not one call per job (a cycle holds tens of thousands);
        # most jobs have one replica: their request and need are their replica's, the same ints
        milli = Milli()
        self.per_replica = per_job = list(map(milli.__getitem__, map(attrgetter(resource), jobs)))
        self.needs = per_job
        if shape.admitted_many:
            self.needs = list(per_job)
            for job, count in shape.admitted_many:
                self.needs[job] = per_job[job] * count
        size = len(tree)
        # One slot past the tree for the jobs of no quota (leaf -1): summed without a test per job.
        leaf_request = [0] * (size + 1)
        for leaf, asked in zip(session.job_leaf, per_job, strict=True):
            leaf_request[leaf] += asked
        for job, count in shape.replicas_many:
            leaf_request[session.job_leaf[job]] += per_job[job] * (count - 1)
        del leaf_request[size]
        alloc = [0] * (size + 1)
        for leaf, job, count in shape.holding:
            alloc[leaf] += per_job[job] * count
        del alloc[size]
        # As for GPUs: a releasing job counts for its pending beneficiary, who counts in full.
        for job in releasing_alone:
            if session.job_leaf[job] >= 0:
                alloc[session.job_leaf[job]] += per_job[job] * len(session.held[job])
        for target in session.waiting_for:
            if session.job_leaf[target] >= 0:
                alloc[session.job_leaf[target]] += self.needs[target]
        self.allocated = subtree_requests(tree, alloc)
        self.request = subtree_requests(tree, leaf_request)
        self.capacity = capacity(snapshot, resource)
        self.fair_share = divide(tree, self.request, self.capacity, [True] * size)
        self.entitled = [s if s > g else g for s, g in zip(self.fair_share, tree.admit_guaranteed, strict=True)]
        self.ceiling = list(tree.limit)
        for target in session.waiting_for:
            if not jobs[target].preemptible and session.job_leaf[target] >= 0:
                for node in tree.chain[session.job_leaf[target]]:
                    self.ceiling[node] = min(self.ceiling[node], tree.admit_guaranteed[node])
        # Per tree node, the nodes of its chain with a ceiling, its own first (as `tree.chain`):
        # most chains have none, or only a root's. Parents come first in the tree's order.
        ceiling = self.ceiling
        capped: list[tuple[int, ...]] = []
        for node, parent in enumerate(tree.parent):
            above = capped[parent] if parent >= 0 else ()
            capped.append((node, *above) if ceiling[node] != NO_LIMIT else above)
        self.capped = capped
        # indexed by the bound kinds (FAIR_SHARE ... OWN_GUARANTEE)
        self.bounds = (self.fair_share, tree.admit_guaranteed, self.entitled, ceiling, tree.guaranteed)
        tracked = [to_milli(node_amount(node, resource)) for node in snapshot.nodes if node.placeable]
        # a node that does not report the resource (0) is not checked for it (types.Node)
        self.largest_node = NO_LIMIT if not tracked or min(tracked) == 0 else max(tracked)
        # jobs no placement can ever take, found once: static_refusal asks of every job often
        self.oversized: dict[int, tuple[str, tuple[Any, ...]]] = {}
        largest_ask = max(milli.values(), default=0)
        too_wide = largest_ask > self.largest_node
        largest_need = max(self.needs, default=0) if shape.admitted_many else largest_ask
        if too_wide or (self.capacity and largest_need > self.capacity):
            for job, amount in enumerate(per_job):
                if amount > self.largest_node:
                    self.oversized[job] = (EXCEEDS_CLUSTER, ("node", amount, self.largest_node, resource))
                elif self.capacity and self.needs[job] > self.capacity:
                    self.oversized[job] = (EXCEEDS_CLUSTER, ("pool", self.needs[job], self.capacity, resource))

    def bound(self, kind: int) -> list[int]:
        return self.bounds[kind]


class Ledgers(list[Ledger]):
    """The ledgers of a session (empty: GPUs only), and per leaf three figures taken over GPUs
    and every managed resource at once, cached: allocate orders quotas by their dominant
    saturation after every admission, and each victim search ranks a region's thousand leaves
    by excess. A leaf's figures are worked out again only after its allocation changed; every
    change goes through `add` (the session's add_replicas) or its undo, which mark the leaf."""

    def __init__(self, ledgers: Sequence[Ledger] = ()) -> None:
        super().__init__(ledgers)
        # first ledger's refusal first, as `too_big` asked them in turn
        self.oversized: dict[int, tuple[str, tuple[Any, ...]]] = {}
        for ledger in reversed(ledgers):
            self.oversized.update(ledger.oversized)
        self.capping = [ledger for ledger in ledgers if any(ledger.capped)]  # a ceiling somewhere
        self.stale: list[int] = []  # leaves whose allocation changed since the figures
        self.primed = False
        self.excess: list[float] = []  # resource_rules.excess: over fair share, as a part of capacity
        self.entry: list[float] = []  # the same negated, as resource_rules.excess_entries works it out
        self.saturation: list[float] = []  # resource_rules.dominant_saturation

    def add(self, journal: Journal, chain: Sequence[int], job: int, count: int) -> None:
        """`count` replicas of the job start (below 0: leave) in every resource, journaled."""
        self._change(chain, job, count)
        journal.record(self._change, chain, job, -count)

    def _change(self, chain: Sequence[int], job: int, count: int) -> None:
        for ledger in self:
            amount = ledger.per_replica[job] * count
            if amount:
                alloc = ledger.allocated
                for node in chain:
                    alloc[node] += amount
        self.stale.append(chain[0])

    def refresh(self, session: Working) -> None:
        """Bring the per-leaf figures up to date with the allocations."""
        if not self.primed:
            self._prime(session)
        elif self.stale:
            for leaf in set(self.stale):
                self._work_out(session, leaf)
            self.stale.clear()

    def _prime(self, session: Working) -> None:
        # The same operations as `_work_out`, array by array: every float comes out the same.
        gpu_over = list(map(sub, session.allocated, session.fair_share))
        divisor = max(session.capacity, MILLI)
        scale = 1 / divisor
        excess = [over / divisor for over in gpu_over]
        entry = [over * scale for over in gpu_over]
        saturation_of = list(map(saturation, session.allocated, session.fair_share))
        for ledger in self:
            over = list(map(sub, ledger.allocated, ledger.fair_share))
            divisor = max(ledger.capacity, MILLI)
            per = 1 / divisor
            excess = [o / divisor if o / divisor > w else w for o, w in zip(over, excess, strict=True)]
            entry = [max(w, o * per) for o, w in zip(over, entry, strict=True)]
            saturation_of = list(map(max, saturation_of, map(saturation, ledger.allocated, ledger.fair_share)))
        self.excess = excess
        self.entry = [-w for w in entry]
        self.saturation = saturation_of
        self.primed = True
        self.stale.clear()

    def _work_out(self, session: Working, leaf: int) -> None:
        over = session.allocated[leaf] - session.fair_share[leaf]
        divisor = max(session.capacity, MILLI)
        excess = over / divisor
        entry = over * (1 / divisor)
        worst = saturation(session.allocated[leaf], session.fair_share[leaf])
        for ledger in self:
            over = ledger.allocated[leaf] - ledger.fair_share[leaf]
            divisor = max(ledger.capacity, MILLI)
            if over / divisor > excess:
                excess = over / divisor
            entry = max(entry, over * (1 / divisor))
            worst = max(worst, saturation(ledger.allocated[leaf], ledger.fair_share[leaf]))
        self.excess[leaf] = excess
        self.entry[leaf] = -entry
        self.saturation[leaf] = worst


def ledgers(session: Working, releasing_alone: Sequence[int]) -> Ledgers:
    """A ledger per resource the session's pool manages besides GPUs (none: GPUs only)."""
    names = managed(session.snapshot.quotas)
    if not names:
        return Ledgers()
    shape = JobShape(session)
    return Ledgers([Ledger(session, resource, releasing_alone, shape) for resource in names])


def limited(ledgers: Ledgers, gpu_limited: Sequence[bool], job_leaf: Sequence[int]) -> list[bool]:
    """Per leaf, whether `Session.static_refusal` may refuse a preemptible job there: a GPU
    limit or promise in its chain (`gpu_limited`), a ceiling of a managed resource, or a job
    too big in one (allocate skips the refusals of the other jobs)."""
    out = list(gpu_limited)
    for ledger in ledgers:
        for leaf, capped in enumerate(ledger.capped):
            if capped:
                out[leaf] = True
    for job in ledgers.oversized:
        if job_leaf[job] >= 0:
            out[job_leaf[job]] = True
    return out


# -- the rules, per resource ----------------------------------------------------------------


def refusal(ledgers: Sequence[Ledger], job: int, chain: Sequence[int], kind: int) -> tuple[str, tuple[Any, ...]] | None:
    """The first managed resource whose limit (CEILING) or guarantee (GUARANTEE) the job breaks
    in its chain (`tree.chain` of its leaf), as a reason naming the resource; None when every
    resource fits."""
    for ledger in ledgers:
        need = ledger.needs[job]
        if not need:
            continue
        alloc = ledger.allocated
        tree = ledger.tree
        if kind == CEILING:
            ceiling = ledger.ceiling
            for node in ledger.capped[chain[0]]:
                if alloc[node] + need > ceiling[node]:
                    break
            else:
                continue  # the common case: no limit or promise in the way
            for node in chain:
                if tree.limit[node] != NO_LIMIT and alloc[node] + need > tree.limit[node]:
                    return (QUOTA_LIMIT, (tree.quota_name[node], alloc[node], need, tree.limit[node], ledger.name))
            return (INSUFFICIENT_CAPACITY, ())  # promised to a beneficiary whose victims release
        else:
            for node in chain:
                if alloc[node] + need > tree.admit_guaranteed[node]:
                    guaranteed = tree.admit_guaranteed[node]
                    return (GUARANTEED_ONLY, (tree.names[node], alloc[node], need, guaranteed, ledger.name))
    return None


def ceiling_refusal(ledgers: Ledgers, job: int, leaf: int) -> tuple[str, tuple[Any, ...]] | None:
    """`refusal` at CEILING for a job whose chain has no GPU limit or promise, asked of only the
    resources with a ceiling somewhere: static_refusal asks it of every pending job."""
    for ledger in ledgers.capping:
        capped = ledger.capped[leaf]
        if capped:
            need = ledger.needs[job]
            alloc, ceiling = ledger.allocated, ledger.ceiling
            for node in capped:
                if alloc[node] + need > ceiling[node]:
                    return refusal(ledgers, job, ledger.tree.chain[leaf], CEILING)
    return None


def too_big(ledgers: Ledgers, job: int) -> tuple[str, tuple[Any, ...]] | None:
    """A replica larger than every node, or a job larger than the pool, in a managed resource."""
    return ledgers.oversized.get(job)
