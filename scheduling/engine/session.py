"""The working state of one cycle over a frozen snapshot: named arrays, the journal, placement and undo.

The snapshot is never mutated. The session keeps its own working arrays, one entry per job
(struct of arrays: a cycle walks tens of thousands of jobs, and lists indexed by the job's
position cost a fraction of objects), one entry per quota-tree node (`alloc`, `share`), and a
journal (KAI-Scheduler's Statement): every change made through the primitives below is recorded
as its inverse, so that a victim search can try evictions and placements and roll them back.

Indexes: a job is its position in `snapshot.jobs`; a leaf is the tree node its jobs count
against (a quota without children, or a parent's "self"); a node of the tree is its position in
`QuotaTree`. The actions (`scheduling.engine.actions`) read and change the session only through
these arrays and primitives.
"""

from __future__ import annotations

from typing import Any

from scheduling.engine.cluster import Cluster, Journal, Placement
from scheduling.engine.fairshare import (
    MILLI,
    NO_LIMIT,
    QuotaTree,
    cluster_capacity,
    divide,
    fractional_nodes,
    job_replica_milli,
    subtree_requests,
)
from scheduling.engine.types import (
    EXCEEDS_CLUSTER,
    GUARANTEED_ONLY,
    INSUFFICIENT_CAPACITY,
    PENDING,
    QUOTA_LIMIT,
    RELEASING,
    RUNNING,
    SPREAD,
    UNKNOWN_QUOTA,
    WAITING_FOR_EVICTION,
    Job,
    Snapshot,
)

# A job's refusal: a reason code and the figures its sentence quotes (see `explain`).
Refusal = tuple[str, tuple[Any, ...]]

WAITING: Refusal = (WAITING_FOR_EVICTION, ())
SHORT: Refusal = (INSUFFICIENT_CAPACITY, ())

# Victim unit: (job index, replica placement or None for the whole job)
Unit = tuple[int, Placement | None]


class Session:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.now = snapshot.now
        self.spread = snapshot.placement == SPREAD
        self.journal = Journal()
        jobs = snapshot.jobs
        self.jobs = jobs
        owners = {job.quota for job in jobs}
        tree = QuotaTree(snapshot.quotas, owners)
        self.tree = tree
        cluster = Cluster(snapshot.nodes, self.journal)
        self.cluster = cluster
        node_index = cluster.index

        n = len(jobs)
        leaf_of = tree.leaf_of
        self.leaf = [leaf_of.get(job.quota, -1) for job in jobs]
        # one conversion per distinct GPU figure, not one call per job
        milli_of = {g: job_replica_milli(Job("", "", g)) for g in {job.gpus for job in jobs}}
        self.replica = [milli_of[job.gpus] for job in jobs]
        self.count = [
            job.min_replicas if job.min_replicas is not None and 0 < job.min_replicas < job.replicas else job.replicas
            for job in jobs
        ]
        self.needs = [c * r for c, r in zip(self.count, self.replica, strict=True)]
        self.state = [job.state for job in jobs]
        self.placements: list[tuple[Placement, ...]] = [()] * n
        self.held: list[tuple[Placement, ...]] = [()] * n  # releasing: what it still holds
        self.touched = [False] * n  # evicted, shrunk, moved or admitted this cycle
        self.promised = [False] * n  # pending beneficiary of releasing victims
        self.admitted_now = [False] * n
        self.grown: dict[int, list[Placement]] = {}
        self.decisions: list[Any] = []
        self.reasons: dict[int, tuple[str, tuple[Any, ...]]] = {}
        self.index_of = {job.id: i for i, job in enumerate(jobs)}

        leaf_request = [0] * len(tree)
        alloc = [0] * len(tree)
        waiting_for: dict[int, list[int]] = {}
        releasing_without_beneficiary: list[int] = []
        replica = self.replica
        leaf = self.leaf
        for i, job in enumerate(jobs):
            lf = leaf[i]
            if lf >= 0:
                leaf_request[lf] += replica[i] * job.replicas
            if job.state == PENDING:
                continue
            placed = []
            for rp in job.placements:
                node = node_index.get(rp.node)
                if node is None:
                    continue
                milli = replica[i] if replica[i] < MILLI else MILLI
                pl: Placement = (node, tuple(rp.devices), milli)
                placed.append(pl)
                cluster.occupy_initial(pl, job.cpu, job.memory_gib)
            if job.state == RELEASING:
                self.held[i] = tuple(placed)
                target = self.index_of.get(job.beneficiary or "", -1)
                if target >= 0 and jobs[target].state == PENDING:
                    waiting_for.setdefault(target, []).append(i)
                else:
                    releasing_without_beneficiary.append(i)
                continue
            self.placements[i] = tuple(placed)
            if lf >= 0:
                alloc[lf] += replica[i] * len(placed)
        cluster.build_index()
        # A releasing job's GPUs are promised to its beneficiary: they count for the
        # beneficiary's quota, so nobody evicts more for it or counts them twice.
        for i in releasing_without_beneficiary:
            if leaf[i] >= 0:
                alloc[leaf[i]] += replica[i] * len(self.held[i])
        self.waiting_for = waiting_for
        # A pending job evicted for a job that is still pending (its victims have released) waits
        # while that job starts: the promise outlives the release, so the freed GPUs go to the
        # beneficiary first and the victim is not evicted for it again (no ping-pong).
        self.evicted_for: dict[int, int] = {}
        for i, job in enumerate(jobs):
            if job.state == PENDING and job.beneficiary is not None:
                target = self.index_of.get(job.beneficiary, -1)
                if target >= 0 and target != i and jobs[target].state == PENDING:
                    self.evicted_for[i] = target
        self.owed = sorted(set(self.evicted_for.values()))
        for target in waiting_for:
            self.promised[target] = True
            if leaf[target] >= 0:
                alloc[leaf[target]] += self.needs[target]
        self.alloc = subtree_requests(tree, alloc)
        # Counts changes to `alloc`; a failed victim search puts it back with the state.
        self.alloc_generation = 0
        self.request = subtree_requests(tree, leaf_request)
        self.capacity = cluster_capacity(snapshot)
        self.share = divide(tree, self.request, self.capacity, fractional_nodes(tree, jobs))
        self.end = subtree_ends(tree)
        # The guarantee room of a waiting non-preemptible beneficiary is promised to it too: in
        # its chain, nobody else goes above the guarantee while its victims release.
        self.guard = [NO_LIMIT] * len(tree)
        for target in waiting_for:
            if not jobs[target].preemptible and leaf[target] >= 0:
                for node in tree.chain[leaf[target]]:
                    self.guard[node] = tree.admit_guaranteed[node]
        guard = self.guard
        self.limited = [any(tree.limit[c] != NO_LIMIT or guard[c] != NO_LIMIT for c in chain) for chain in tree.chain]
        self.messages: dict[tuple[Any, ...], str] = {}  # explain: one sentence per quota and job shape
        # Filled by actions.allocate: each leaf's pending jobs in queue order, the jobs it tried
        # (the victim searches' order), the smallest single replica that found no room, and the
        # jobs that no static refusal can stop whatever the allocations.
        self.queues: dict[int, list[int]] = {}
        self.tried: list[int] = []
        self.smallest_failed = 1 << 60
        self.easy: list[bool] = []
        # Filled by actions.reclaim: victim candidates per leaf in victim order, the leaves that
        # have any (sorted, so that a subtree is a slice), running elastic jobs above their
        # minimum, and the leaves ranked by excess over fair share per region (a cache).
        self.candidates_by_leaf: dict[int, list[int]] = {}
        self.candidate_leaves: list[int] = []
        self.elastic: list[int] = []
        self.ranked: dict[tuple[int, int], list[tuple[float, int, int]]] = {}
        self.ranked_generation = -1
        self.reserved: dict[int, list[Placement]] = {}
        for target in sorted(waiting_for):
            self.reserve_for_beneficiary(target, waiting_for[target])

    def reserve_for_beneficiary(self, target: int, victims: list[int]) -> None:
        """Keep the free GPUs a beneficiary needs beside its releasing victims (the promise).

        The beneficiary is placed as if its victims were gone; the part of that placement that is
        free now is taken out of the pool, so nobody else takes it while the victims release.
        """
        cluster = self.cluster
        journal = self.journal
        mark = journal.checkpoint()
        for v in victims:
            job = self.jobs[v]
            for pl in self.held[v]:
                cluster.adjust(pl, +1, job.cpu, job.memory_gib)
        placed = self.place_gang(target, self.count[target])
        journal.rollback(mark)
        if placed is None:
            return
        keep: list[Placement] = []
        for node, devices, milli in placed:
            free = cluster.dev_free[node]
            for d in devices:
                amount = min(milli, free[d])
                if amount > 0:
                    keep.append((node, (d,), amount))
        for pl in keep:
            cluster.adjust(pl, -1, 0.0, 0.0)
        self.reserved[target] = keep

    def place_promised(self, i: int) -> list[Placement] | None:
        """A beneficiary of releasing victims may use what is kept for it, and any free GPUs."""
        journal = self.journal
        mark = journal.checkpoint()
        for pl in self.reserved.get(i, ()):
            self.cluster.adjust(pl, +1, 0.0, 0.0)
        placed = self.place_gang(i, self.count[i])
        if placed is None:
            journal.rollback(mark)
        return placed

    def protected(self, i: int) -> bool:
        """Too young to be a victim (min_runtime_seconds of its quota, inherited)."""
        job = self.jobs[i]
        minimum = self.tree.min_runtime[self.leaf[i]] if self.leaf[i] >= 0 else 0.0
        if minimum <= 0:
            return False
        started = job.started_at if job.started_at is not None else self.now
        if self.admitted_now[i]:
            started = self.now
        return self.now - started < minimum

    def add_allocated(self, lf: int, amount: int) -> None:
        alloc = self.alloc
        for node in self.tree.chain[lf]:
            alloc[node] += amount
        self.alloc_generation += 1
        self.journal.record(self._undo_allocated, lf, amount)

    def _undo_allocated(self, lf: int, amount: int) -> None:
        alloc = self.alloc
        for node in self.tree.chain[lf]:
            alloc[node] -= amount
        self.alloc_generation += 1

    def set_journaled(self, array: list[Any], i: int, value: Any) -> None:
        self.journal.record(array.__setitem__, i, array[i])
        array[i] = value

    def decide(self, decision: Any) -> None:
        self.decisions.append(decision)
        self.journal.record(self.decisions.pop)

    def place_gang(self, i: int, count: int) -> list[Placement] | None:
        """All `count` replicas or none (gang)."""
        cluster = self.cluster
        replica = self.replica[i]
        total = replica * count
        if cluster.free_total < total:
            return None
        job = self.jobs[i]
        mark = self.journal.checkpoint()
        placed: list[Placement] = []
        for _ in range(count):
            pl = cluster.place_replica(replica, job.cpu, job.memory_gib, self.spread)
            if pl is None:
                self.journal.rollback(mark)
                return None
            placed.append(pl)
        return placed

    def static_refusal(self, i: int) -> tuple[str, tuple[Any, ...]] | None:
        """Refusals that no placement cures: unknown quota, too big, limit, guarantee."""
        job = self.jobs[i]
        lf = self.leaf[i]
        if lf < 0:
            return (UNKNOWN_QUOTA, (job.quota,))
        replica = self.replica[i]
        need = self.needs[i]
        cluster = self.cluster
        if replica >= MILLI and replica // MILLI > cluster.max_gpus:
            return (EXCEEDS_CLUSTER, ("node", replica, cluster.max_gpus * MILLI))
        if need > self.capacity:
            return (EXCEEDS_CLUSTER, ("pool", need, self.capacity))
        if self.promised[i] or (job.preemptible and not self.limited[lf]):
            return None
        tree = self.tree
        alloc = self.alloc
        for node in tree.chain[lf]:
            limit = tree.limit[node]
            if limit != NO_LIMIT and alloc[node] + need > limit:
                return (QUOTA_LIMIT, (tree.quota_name[node], alloc[node], need, limit))
        if not job.preemptible:
            for node in tree.chain[lf]:
                g = tree.admit_guaranteed[node]
                if alloc[node] + need > g:
                    return (GUARANTEED_ONLY, (tree.names[node], alloc[node], need, g))
        guard = self.guard
        for node in tree.chain[lf]:
            if alloc[node] + need > guard[node]:
                return SHORT  # that room is promised to a beneficiary whose victims release
        return None

    def admit(self, i: int, placed: list[Placement]) -> None:
        if not self.promised[i]:
            self.add_allocated(self.leaf[i], self.replica[i] * len(placed))
        else:
            self.set_journaled(self.promised, i, False)
            extra = self.replica[i] * len(placed) - self.needs[i]
            if extra:
                self.add_allocated(self.leaf[i], extra)
        self.set_journaled(self.state, i, RUNNING)
        self.set_journaled(self.placements, i, tuple(placed))
        self.set_journaled(self.admitted_now, i, True)
        self.set_journaled(self.touched, i, True)
        self.decide(("admit", i))

    def eligible_victim(self, m: int) -> bool:
        return self.state[m] == RUNNING and not self.touched[m] and not self.protected(m)

    def take_victim(self, unit: Unit) -> None:
        m, replica_placement = unit
        job = self.jobs[m]
        if replica_placement is None:
            for pl in self.placements[m]:
                self.cluster.adjust(pl, +1, job.cpu, job.memory_gib)
            self.add_allocated(self.leaf[m], -self.replica[m] * len(self.placements[m]))
            self.set_journaled(self.state, m, PENDING)
            self.set_journaled(self.touched, m, True)
        else:
            self.cluster.adjust(replica_placement, +1, job.cpu, job.memory_gib)
            self.add_allocated(self.leaf[m], -self.replica[m])
            self.set_journaled(self.placements, m, self.placements[m][:-1])

    def give_back_victim(self, unit: Unit, placements: tuple[Placement, ...]) -> None:
        m, replica_placement = unit
        job = self.jobs[m]
        if replica_placement is None:
            for pl in placements:
                self.cluster.adjust(pl, -1, job.cpu, job.memory_gib)
            self.add_allocated(self.leaf[m], self.replica[m] * len(placements))
            self.set_journaled(self.state, m, RUNNING)
            self.set_journaled(self.touched, m, False)
        else:
            self.cluster.adjust(replica_placement, -1, job.cpu, job.memory_gib)
            self.add_allocated(self.leaf[m], self.replica[m])
            self.set_journaled(self.placements, m, self.placements[m] + (replica_placement,))


def subtree_ends(tree: QuotaTree) -> list[int]:
    """Index one past the last descendant; the tree's index order is a preorder walk."""
    size = len(tree)
    end = list(range(1, size + 1))
    for i in range(size - 1, -1, -1):
        p = tree.parent[i]
        if p >= 0 and end[i] > end[p]:
            end[p] = end[i]
    return end
