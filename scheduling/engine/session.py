"""The working state of one cycle over a frozen snapshot: named arrays, the journal, placement and undo.

The snapshot is never mutated. The session keeps its own working arrays, one entry per job
(struct of arrays: a cycle walks tens of thousands of jobs, and lists indexed by the job's
position cost a fraction of objects), one entry per quota-tree node (`allocated`, `fair_share`), and a
journal (KAI-Scheduler's Statement): every change made through the primitives below is recorded
as its inverse, so that a victim search can try evictions and placements and roll them back.

Indexes: a job is its position in `snapshot.jobs`; a leaf is the tree node its jobs count
against (a quota without children, or a parent's "self"); a node of the tree is its position in
`QuotaTree`. The actions (`scheduling.engine.actions`) read and change the session only through
these arrays and primitives.
"""

from __future__ import annotations

from operator import attrgetter, mul
from typing import Any

from scheduling.engine import resources
from scheduling.engine.cluster import Cluster, Journal, Placement
from scheduling.engine.fairshare import (
    MILLI,
    NO_LIMIT,
    QuotaTree,
    cluster_capacity,
    divide,
    fractional_nodes,
    job_replica_milli,
    quota_tree,
    subtree_requests,
)
from scheduling.engine.policies import victim_key
from scheduling.engine.reservations import Reservations
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

_QUOTA = attrgetter("quota")
_GPUS = attrgetter("gpus")
_REPLICAS = attrgetter("replicas")
_MIN_REPLICAS = attrgetter("min_replicas")
_STATE = attrgetter("state")


class Session:
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.now = snapshot.now
        self.spread = snapshot.placement == SPREAD
        self.journal = Journal()
        jobs = snapshot.jobs
        self.jobs = jobs
        # Columns of the snapshot's jobs, one C-level pass each: a cycle at S4 reads 150,000 jobs.
        quota_of: list[str] = list(map(_QUOTA, jobs))
        tree = quota_tree(snapshot.quotas, set(quota_of))
        self.tree = tree
        cluster = Cluster(snapshot.nodes, self.journal)
        self.cluster = cluster
        node_index = cluster.index

        # Per job (index `job`, its position in snapshot.jobs): its leaf, the milli-GPUs of one
        # replica, the replicas it is admitted with (min_replicas for an elastic job) and their
        # total, its state and placements as this cycle has changed them.
        n = len(jobs)
        leaf_of = tree.leaf_of
        self.job_leaf = job_leaf = [leaf_of.get(quota, -1) for quota in quota_of]
        del quota_of
        gpus_of: list[float] = list(map(_GPUS, jobs))
        # one conversion per distinct GPU figure, not one call per job
        milli_of = {g: job_replica_milli(Job("", "", g)) for g in set(gpus_of)}
        self.replica_milli = replica = list(map(milli_of.__getitem__, gpus_of))
        replicas: list[int] = list(map(_REPLICAS, jobs))
        # Jobs with min_replicas set (elastic, or not quite: min_replicas ≥ replicas), in job order.
        self.elastic_jobs = [job for job, least in enumerate(map(_MIN_REPLICAS, jobs)) if least is not None]
        self.admit_count = list(replicas)
        for job in self.elastic_jobs:
            least = jobs[job].min_replicas
            if least is not None and 0 < least < replicas[job]:
                self.admit_count[job] = least
        self.needs: list[int] = list(map(mul, self.admit_count, replica))
        self.state: list[str] = list(map(_STATE, jobs))
        self.placements: list[tuple[Placement, ...]] = [()] * n
        self.held: list[tuple[Placement, ...]] = [()] * n  # releasing: what it still holds
        self.touched = [False] * n  # evicted, shrunk, moved or admitted this cycle
        self.promised = [False] * n  # pending beneficiary of releasing victims
        self.admitted_now = [False] * n
        self.grown: dict[int, list[Placement]] = {}
        self.decisions: list[Any] = []
        self.reasons: dict[int, tuple[str, tuple[Any, ...]]] = {}
        # The snapshot's pending jobs and the jobs it holds placed (running or releasing), in job order.
        self.queued = [job for job, now in enumerate(self.state) if now == PENDING]
        self.placed = [job for job, now in enumerate(self.state) if now != PENDING]

        leaf_request = [0] * len(tree)
        for leaf, milli, count in zip(job_leaf, replica, replicas, strict=True):
            if leaf >= 0:
                leaf_request[leaf] += milli * count
        del replicas
        alloc = [0] * len(tree)
        waiting_for: dict[int, list[int]] = {}
        releasing_without_beneficiary: list[int] = []
        releasing: list[int] = []
        dev_free, cpu_free, mem_free = cluster.dev_free, cluster.cpu_free, cluster.mem_free
        placements = self.placements
        for job in self.placed:
            spec = jobs[job]
            milli = replica[job] if replica[job] < MILLI else MILLI
            cpu, memory = spec.cpu, spec.memory_gib
            placed = []
            for rp in spec.placements:
                node = node_index.get(rp.node)
                if node is None:
                    continue
                pl: Placement = (node, tuple(rp.devices), milli)
                placed.append(pl)
                # what it holds is not free (before the cluster's index is built: no journal)
                free = dev_free[node]
                for d in pl[1]:
                    if 0 <= d < len(free):
                        free[d] -= milli
                cpu_free[node] -= cpu
                mem_free[node] -= memory
            if spec.state == RELEASING:
                self.held[job] = tuple(placed)
                releasing.append(job)
                continue
            placements[job] = tuple(placed)
            leaf = job_leaf[job]
            if leaf >= 0:
                alloc[leaf] += replica[job] * len(placed)
        cluster.build_index()
        # Job ids are looked up only for beneficiaries (of releasing jobs, and of pending jobs
        # evicted for a job still pending), which most cycles have none of.
        asking = [job for job in self.queued if jobs[job].beneficiary is not None]
        index_of: dict[str, int] = {spec.id: job for job, spec in enumerate(jobs)} if releasing or asking else {}
        for job in releasing:
            target = index_of.get(jobs[job].beneficiary or "", -1)
            if target >= 0 and jobs[target].state == PENDING:
                waiting_for.setdefault(target, []).append(job)
            else:
                releasing_without_beneficiary.append(job)
        # A releasing job's GPUs are promised to its beneficiary: they count for the
        # beneficiary's quota, so nobody evicts more for it or counts them twice.
        for job in releasing_without_beneficiary:
            if job_leaf[job] >= 0:
                alloc[job_leaf[job]] += replica[job] * len(self.held[job])
        self.waiting_for = waiting_for
        # A pending job evicted for a job that is still pending (its victims have released) waits
        # while that job starts: the promise outlives the release, so the freed GPUs go to the
        # beneficiary first and the victim is not evicted for it again (no ping-pong).
        self.evicted_for: dict[int, int] = {}
        for job in asking:
            target = index_of.get(jobs[job].beneficiary or "", -1)
            if target >= 0 and target != job and jobs[target].state == PENDING:
                self.evicted_for[job] = target
        self.owed = sorted(set(self.evicted_for.values()))
        for target in waiting_for:
            self.promised[target] = True
            if job_leaf[target] >= 0:
                alloc[job_leaf[target]] += self.needs[target]
        # Per tree node: milli-GPUs held in its subtree (`allocated`), asked (`request`), its
        # fair share (SCHEDULING.md §1) and one past its last descendant (`end`: a subtree is a slice).
        self.allocated = subtree_requests(tree, alloc)
        # Counts changes to `allocated`; a failed victim search puts it back with the state.
        self.allocated_generation = 0
        # The leaves whose `allocated` changed, in order (actions.reclaim keeps its ranking of
        # leaves by excess up to date from it instead of ranking thousands of leaves again).
        self.allocated_leaves: list[int] = []
        self.request = subtree_requests(tree, leaf_request)
        self.capacity = cluster_capacity(snapshot)
        fractional_jobs = [jobs[job] for job, g in enumerate(gpus_of) if g < 1] if any(g < 1 for g in milli_of) else []
        self.fair_share = divide(tree, self.request, self.capacity, fractional_nodes(tree, fractional_jobs))
        self.end = subtree_ends(tree)
        # The guarantee room of a waiting non-preemptible beneficiary is promised to it too: in
        # its chain, nobody else goes above the guarantee while its victims release.
        self.guard = [NO_LIMIT] * len(tree)
        for target in waiting_for:
            if not jobs[target].preemptible and job_leaf[target] >= 0:
                for node in tree.chain[job_leaf[target]]:
                    self.guard[node] = tree.admit_guaranteed[node]
        guard = self.guard
        # A limit or a promised guarantee somewhere in the chain; parents come first in the tree.
        limited = [False] * len(tree)
        for node, parent in enumerate(tree.parent):
            limited[node] = tree.limit[node] != NO_LIMIT or guard[node] != NO_LIMIT or (parent >= 0 and limited[parent])
        self.limited = limited
        self.gpu_limited = self.limited  # the same but for CPU and memory (below)
        # CPU and memory where the pool manages them (engine.resources); empty: GPUs only.
        self.resources = resources.ledgers(self, releasing_without_beneficiary)
        if self.resources:
            self.limited = resources.limited(self.resources, self.limited, self.job_leaf)
        self.messages: dict[tuple[Any, ...], str] = {}  # explain: one sentence per quota and job shape
        self.most_free: dict[tuple[Any, ...], tuple[float, float]] = {}  # explain: CPU, memory beside free GPUs
        # Filled by actions.allocate: each leaf's pending jobs in queue order, the jobs it tried
        # (the victim searches' order), the smallest single replica that found no room, and the
        # jobs that no static refusal can stop whatever the allocations.
        self.queues: dict[int, list[int]] = {}
        self.tried: list[int] = []
        self.smallest_failed = 1 << 60
        self.failed_shapes: list[tuple[int, float, float]] = []  # replicas with CPU or memory that found no room
        self.easy: list[bool] = []
        # Filled by actions.reclaim: victim candidates per leaf in victim order, the leaves that
        # have any (sorted, so that a subtree is a slice), running elastic jobs above their
        # minimum, and the leaves ranked by excess over fair share per region (a cache).
        self.candidates_by_leaf: dict[int, list[int]] = {}
        self.candidates_sorted: set[int] = set()  # the leaves whose candidates are in victim order
        self.candidate_leaves: list[int] = []
        self.elastic: list[int] = []
        self.ranked: dict[tuple[int, int], Any] = {}
        self.reserved: dict[int, list[Placement]] = {}
        # Filled by actions.reserve: this cycle's reservations for gangs at the head of a queue.
        self.reservations: Reservations | None = None
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
            spec = self.jobs[v]
            for pl in self.held[v]:
                cluster.adjust(pl, +1, spec.cpu, spec.memory_gib)
        placed = self.place_gang(target, self.admit_count[target])
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

    def place_promised(self, job: int) -> list[Placement] | None:
        """A beneficiary of releasing victims may use what is kept for it, and any free GPUs."""
        journal = self.journal
        mark = journal.checkpoint()
        for pl in self.reserved.get(job, ()):
            self.cluster.adjust(pl, +1, 0.0, 0.0)
        placed = self.place_gang(job, self.admit_count[job])
        if placed is None:
            journal.rollback(mark)
        return placed

    def victims_in(self, leaf: int) -> list[int]:
        """The leaf's victim candidates (actions.reclaim) in victim order (`policies.victim_key`),
        sorted the first time they are asked for."""
        members = self.candidates_by_leaf.get(leaf)
        if members is None:
            return []
        if leaf not in self.candidates_sorted:
            jobs = self.jobs
            members.sort(key=lambda victim: victim_key(jobs[victim], victim))
            self.candidates_sorted.add(leaf)
        return members

    def protected(self, job: int) -> bool:
        """Too young to be a victim (min_runtime_seconds of its quota, inherited)."""
        spec = self.jobs[job]
        minimum = self.tree.min_runtime[self.job_leaf[job]] if self.job_leaf[job] >= 0 else 0.0
        if minimum <= 0:
            return False
        started = spec.started_at if spec.started_at is not None else self.now
        if self.admitted_now[job]:
            started = self.now
        return self.now - started < minimum

    def add_allocated(self, leaf: int, amount: int) -> None:
        alloc = self.allocated
        for node in self.tree.chain[leaf]:
            alloc[node] += amount
        self.allocated_generation += 1
        self.allocated_leaves.append(leaf)
        self.journal.record(self._undo_allocated, leaf, amount)

    def add_replicas(self, job: int, count: int) -> None:
        """`count` replicas of the job start (below 0: leave) holding their GPUs, and their CPU
        and memory where the pool manages them, in the job's quota and every ancestor."""
        leaf = self.job_leaf[job]
        self.add_allocated(leaf, self.replica_milli[job] * count)
        if self.resources:
            self.resources.add(self.journal, self.tree.chain[leaf], job, count)

    def _undo_allocated(self, leaf: int, amount: int) -> None:
        alloc = self.allocated
        for node in self.tree.chain[leaf]:
            alloc[node] -= amount
        self.allocated_generation += 1
        self.allocated_leaves.append(leaf)

    def set_journaled(self, array: list[Any], job: int, value: Any) -> None:
        self.journal.record(array.__setitem__, job, array[job])
        array[job] = value

    def decide(self, decision: Any) -> None:
        self.decisions.append(decision)
        self.journal.record(self.decisions.pop)

    def place_gang(self, job: int, count: int) -> list[Placement] | None:
        """All `count` replicas or none (gang)."""
        cluster = self.cluster
        replica = self.replica_milli[job]
        total = replica * count
        if cluster.free_total < total:
            return None
        spec = self.jobs[job]
        mark = self.journal.checkpoint()
        placed: list[Placement] = []
        for _ in range(count):
            pl = cluster.place_replica(replica, spec.cpu, spec.memory_gib, self.spread)
            if pl is None:
                self.journal.rollback(mark)
                return None
            placed.append(pl)
        return placed

    def static_refusal(self, job: int) -> tuple[str, tuple[Any, ...]] | None:
        """Refusals that no placement cures: unknown quota, too big, limit, guarantee."""
        spec = self.jobs[job]
        leaf = self.job_leaf[job]
        if leaf < 0:
            return (UNKNOWN_QUOTA, (spec.quota,))
        replica = self.replica_milli[job]
        need = self.needs[job]
        cluster = self.cluster
        if replica >= MILLI and replica // MILLI > cluster.max_gpus:
            return (EXCEEDS_CLUSTER, ("node", replica, cluster.max_gpus * MILLI))
        if need > self.capacity:
            return (EXCEEDS_CLUSTER, ("pool", need, self.capacity))
        if self.resources and (refused := resources.too_big(self.resources, job)) is not None:
            return refused
        if self.promised[job] or (spec.preemptible and not self.limited[leaf]):
            return None
        if spec.preemptible and not self.gpu_limited[leaf]:
            # no GPU limit or promise in its chain: only a ceiling of CPU or memory may refuse it
            return resources.ceiling_refusal(self.resources, job, leaf)
        tree = self.tree
        alloc = self.allocated
        for node in tree.chain[leaf]:
            limit = tree.limit[node]
            if limit != NO_LIMIT and alloc[node] + need > limit:
                return (QUOTA_LIMIT, (tree.quota_name[node], alloc[node], need, limit))
        managed = self.resources  # CPU and memory, where the pool manages them
        refused = resources.refusal(managed, job, tree.chain[leaf], resources.CEILING) if managed else None
        if refused is not None:
            return refused
        if not spec.preemptible:
            for node in tree.chain[leaf]:
                g = tree.admit_guaranteed[node]
                if alloc[node] + need > g:
                    return (GUARANTEED_ONLY, (tree.names[node], alloc[node], need, g))
            refused = resources.refusal(managed, job, tree.chain[leaf], resources.GUARANTEE) if managed else None
            if refused is not None:
                return refused
        guard = self.guard
        for node in tree.chain[leaf]:
            if alloc[node] + need > guard[node]:
                return SHORT  # that room is promised to a beneficiary whose victims release
        return None

    def admit(self, job: int, placed: list[Placement]) -> None:
        if not self.promised[job]:
            self.add_replicas(job, len(placed))
        else:
            self.set_journaled(self.promised, job, False)
            extra = len(placed) - self.admit_count[job]
            if extra:
                self.add_replicas(job, extra)
        self.set_journaled(self.state, job, RUNNING)
        self.set_journaled(self.placements, job, tuple(placed))
        self.set_journaled(self.admitted_now, job, True)
        self.set_journaled(self.touched, job, True)
        self.decide(("admit", job))

    def eligible_victim(self, victim: int) -> bool:
        return self.state[victim] == RUNNING and not self.touched[victim] and not self.protected(victim)

    def take_victim(self, unit: Unit) -> None:
        victim, replica_placement = unit
        spec = self.jobs[victim]
        if replica_placement is None:
            for pl in self.placements[victim]:
                self.cluster.adjust(pl, +1, spec.cpu, spec.memory_gib)
            self.add_replicas(victim, -len(self.placements[victim]))
            self.set_journaled(self.state, victim, PENDING)
            self.set_journaled(self.touched, victim, True)
        else:
            self.cluster.adjust(replica_placement, +1, spec.cpu, spec.memory_gib)
            self.add_replicas(victim, -1)
            self.set_journaled(self.placements, victim, self.placements[victim][:-1])

    def give_back_victim(self, unit: Unit, placements: tuple[Placement, ...]) -> None:
        victim, replica_placement = unit
        spec = self.jobs[victim]
        if replica_placement is None:
            for pl in placements:
                self.cluster.adjust(pl, -1, spec.cpu, spec.memory_gib)
            self.add_replicas(victim, len(placements))
            self.set_journaled(self.state, victim, RUNNING)
            self.set_journaled(self.touched, victim, False)
        else:
            self.cluster.adjust(replica_placement, -1, spec.cpu, spec.memory_gib)
            self.add_replicas(victim, 1)
            self.set_journaled(self.placements, victim, self.placements[victim] + (replica_placement,))


def subtree_ends(tree: QuotaTree) -> list[int]:
    """Index one past the last descendant; the tree's index order is a preorder walk."""
    size = len(tree)
    end = list(range(1, size + 1))
    for node in range(size - 1, -1, -1):
        parent = tree.parent[node]
        if parent >= 0 and end[node] > end[parent]:
            end[parent] = end[node]
    return end
