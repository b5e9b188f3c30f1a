"""One scheduling cycle: a session over a frozen snapshot, actions in KAI-Scheduler's order.

drain -> allocate -> consolidate -> reclaim/preempt (victims of every kind combined) -> elastic grow.
The snapshot is never mutated: the session keeps its own working arrays and a journal, so a
victim search can try evictions and roll them back.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterator
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
from scheduling.engine.policies import RULE_ORDER, gpu_count, gpus, queue_key, saturation, victim_key
from scheduling.engine.types import (
    CHILD_PREEMPTION,
    CONSOLIDATION,
    DRAIN,
    EXCEEDS_CLUSTER,
    GUARANTEED_ONLY,
    INSUFFICIENT_CAPACITY,
    NO_FIT,
    PENDING,
    PREEMPT,
    QUEUE_BLOCKED,
    QUOTA_LIMIT,
    RECLAIM,
    RELEASING,
    RUNNING,
    SAME_LEVEL,
    SHRINK,
    SPREAD,
    UNKNOWN_QUOTA,
    WAITING_FOR_EVICTION,
    Admit,
    CycleResult,
    Decision,
    Evict,
    Grow,
    Job,
    PendingReason,
    QuotaStatus,
    ReplicaPlacement,
    Shrink,
    Snapshot,
)

# Bounds that keep a cycle fast on large pools; what they leave undone is retried next cycle.
# Victim searches are bounded apart: those that found victims (each one a decision, and what
# makes a cycle slow) by count, those that found none by the candidates they examined. The
# same searches fail again each cycle, so a count shared by both let a head of hopeless
# searches starve every job behind it, and the queue looked settled while jobs could reclaim.
MAX_VICTIM_SEARCHES = 64
MAX_FAILED_CANDIDATES = 64 * 256  # candidates examined by searches that found nothing
MAX_CANDIDATES_PER_SEARCH = 256
MAX_CONSOLIDATIONS = 32
MAX_MOVERS = 8
MAX_TARGET_NODES = 8  # nodes tried as the target of one consolidation

# Capacity-type failures are re-explained from the final state of the cycle.
_CAPACITY_CODES = (NO_FIT, INSUFFICIENT_CAPACITY)
# Failures that a victim search cannot cure.
_NO_SEARCH = (UNKNOWN_QUOTA, EXCEEDS_CLUSTER, QUEUE_BLOCKED, WAITING_FOR_EVICTION)

_WAITING: tuple[str, tuple[Any, ...]] = (WAITING_FOR_EVICTION, ())
_SHORT: tuple[str, tuple[Any, ...]] = (INSUFFICIENT_CAPACITY, ())

# Victim unit: (job index, replica placement or None for the whole job)
Unit = tuple[int, Placement | None]


def schedule(snapshot: Snapshot) -> CycleResult:
    """Run one cycle over the snapshot and return the decisions, in the order to apply them."""
    session = Session(snapshot)
    session.drain()
    session.allocate()
    session.consolidate()
    session.reclaim_and_preempt()
    session.grow()
    return session.result()


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
        self.end = _subtree_ends(tree)
        # The guarantee room of a waiting non-preemptible beneficiary is promised to it too: in
        # its chain, nobody else goes above the guarantee while its victims release.
        self.guard = [NO_LIMIT] * len(tree)
        for target in waiting_for:
            if not jobs[target].preemptible and leaf[target] >= 0:
                for node in tree.chain[leaf[target]]:
                    self.guard[node] = tree.admit_guaranteed[node]
        guard = self.guard
        self.limited = [any(tree.limit[c] != NO_LIMIT or guard[c] != NO_LIMIT for c in chain) for chain in tree.chain]
        self._messages: dict[tuple[Any, ...], str] = {}
        self.reserved: dict[int, list[Placement]] = {}
        for target in sorted(waiting_for):
            self._reserve(target, waiting_for[target])

    def _reserve(self, target: int, victims: list[int]) -> None:
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
        placed = self._place_gang(target, self.count[target])
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

    def _place_promised(self, i: int) -> list[Placement] | None:
        """A beneficiary of releasing victims may use what is kept for it, and any free GPUs."""
        journal = self.journal
        mark = journal.checkpoint()
        for pl in self.reserved.get(i, ()):
            self.cluster.adjust(pl, +1, 0.0, 0.0)
        placed = self._place_gang(i, self.count[i])
        if placed is None:
            journal.rollback(mark)
        return placed

    # -- action 0: drain -----------------------------------------------------------------
    def drain(self) -> None:
        """Evict every running job with a replica on a draining node.

        A drain is an admin's decision about the node, not a contest between jobs: priority,
        preemptibility and min_runtime_seconds do not protect a job from it (as `kubectl
        drain`), but the grace period does. The victim is treated as releasing for the rest of
        this cycle whatever its grace: its GPUs are on a node that takes no new placement, so
        freeing them in the simulation would give nobody anything, and the job itself goes back
        to the queue only once the runtime has let go of it (placed again by the next cycle).
        """
        cluster = self.cluster
        draining = {index for index, node in enumerate(self.snapshot.nodes) if node.draining}
        if not draining:
            return
        for i, job in enumerate(self.jobs):
            if self.state[i] != RUNNING:
                continue
            on = sorted({cluster.names[node] for node, _devices, _milli in self.placements[i] if node in draining})
            if not on:
                continue
            where = ", ".join(on)
            grace = f" after its grace period of {job.grace_seconds:g} s" if job.grace_seconds > 0 else ""
            reason = f"node {where} is draining: the job is evicted{grace} and goes back to the queue to run elsewhere"
            self._decide(Evict(job.id, DRAIN, None, reason))
            self.state[i] = RELEASING
            self.held[i] = self.placements[i]
            self.placements[i] = ()
            self.touched[i] = True

    # -- small helpers ------------------------------------------------------------------
    def min_count(self, i: int) -> int:
        return self.count[i]

    def need(self, i: int) -> int:
        return self.needs[i]

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

    def _add_alloc(self, lf: int, amount: int) -> None:
        alloc = self.alloc
        for node in self.tree.chain[lf]:
            alloc[node] += amount
        self.alloc_generation += 1
        self.journal.record(self._undo_alloc, lf, amount)

    def _undo_alloc(self, lf: int, amount: int) -> None:
        alloc = self.alloc
        for node in self.tree.chain[lf]:
            alloc[node] -= amount
        self.alloc_generation += 1

    def _set(self, array: list[Any], i: int, value: Any) -> None:
        self.journal.record(array.__setitem__, i, array[i])
        array[i] = value

    def _decide(self, decision: Any) -> None:
        self.decisions.append(decision)
        self.journal.record(self.decisions.pop)

    def _place_gang(self, i: int, count: int) -> list[Placement] | None:
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

    def _static_refusal(self, i: int) -> tuple[str, tuple[Any, ...]] | None:
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
                return _SHORT  # that room is promised to a beneficiary whose victims release
        return None

    def _admit(self, i: int, placed: list[Placement]) -> None:
        if not self.promised[i]:
            self._add_alloc(self.leaf[i], self.replica[i] * len(placed))
        else:
            self._set(self.promised, i, False)
            extra = self.replica[i] * len(placed) - self.needs[i]
            if extra:
                self._add_alloc(self.leaf[i], extra)
        self._set(self.state, i, RUNNING)
        self._set(self.placements, i, tuple(placed))
        self._set(self.admitted_now, i, True)
        self._set(self.touched, i, True)
        self._decide(("admit", i))

    def _leaf_key(self, lf: int) -> tuple[bool, float, int, int, int]:
        tree = self.tree
        return (
            # child_preemption: a parent's own jobs rank above everything in its subtree
            not (tree.is_self[lf] and tree.child_preemption[tree.parent[lf]]),
            saturation(self.alloc[lf], self.share[lf]),
            -tree.rank[lf],
            tree.created[lf],
            lf,
        )

    # -- action 1: allocate ---------------------------------------------------------------
    def allocate(self) -> None:
        queues: dict[int, list[tuple[tuple[int, float, int], int]]] = {}
        jobs = self.jobs
        leaf = self.leaf
        for i, job in enumerate(jobs):
            if self.state[i] != PENDING:
                continue
            if leaf[i] < 0:
                self.reasons[i] = (UNKNOWN_QUOTA, (job.quota,))
                continue
            queues.setdefault(leaf[i], []).append((queue_key(job, i), i))
        self.queues: dict[int, list[int]] = {}
        for lf, entries in queues.items():
            entries.sort()
            self.queues[lf] = [i for _, i in entries]
        self.tried: list[int] = []
        # Beneficiaries of releasing victims go first: what they wait for is theirs.
        promised = self.promised
        for i in sorted(self.waiting_for):
            if promised[i] and self.state[i] == PENDING and self._static_refusal(i) is None:
                placed = self._place_promised(i)
                if placed is not None:
                    self._admit(i, placed)
        # Then beneficiaries whose victims have released and are back in the queue.
        for i in self.owed:
            if self.state[i] == PENDING and not promised[i] and self._static_refusal(i) is None:
                placed = self._place_gang(i, self.count[i])
                if placed is not None:
                    self._admit(i, placed)
        for i, owed in self.evicted_for.items():
            if self.state[owed] == PENDING and self.state[i] == PENDING:
                self.reasons[i] = (QUEUE_BLOCKED, (self.jobs[owed].id, "evicted"))
        # Entitled jobs (within fair share or guarantee at every level with the job admitted)
        # come before borrowers, so that nothing is admitted that the next cycle reclaims.
        # Three passes: jobs within guarantee at every level (the guarantee rule would reclaim
        # for them), then jobs within fair share or guarantee, then borrowers.
        tree = self.tree
        within_share = [s if s > g else g for s, g in zip(self.share, tree.admit_guaranteed, strict=True)]
        self._smallest_failed = 1 << 60
        # Jobs whose static refusal is None whatever the allocations (promised jobs excluded).
        limited = self.limited
        biggest = self.cluster.max_gpus * MILLI
        self._easy = [
            lf >= 0 and job.preemptible and not limited[lf] and not p and r <= biggest and need <= self.capacity
            for job, lf, p, r, need in zip(self.jobs, self.leaf, self.promised, self.replica, self.needs, strict=True)
        ]
        self._serve(tree.admit_guaranteed)
        self._serve(within_share)
        self._serve(None)

    def _serve(self, bound: list[int] | None) -> None:
        """One pass over the quotas, lowest saturation first.

        With a `bound`, only jobs that keep their quota and every ancestor within it are admitted:
        another job is passed over (it waits for a later pass), and so is every preemptible job of
        its quota with a lower priority, which the job passed over would preempt.
        """
        entitled_only = bound is not None
        queues = self.queues
        state = self.state
        reasons = self.reasons
        jobs = self.jobs
        heap = [(self._leaf_key(lf), lf) for lf in queues]
        heapq.heapify(heap)
        cursor = dict.fromkeys(queues, 0)
        # priority of the first borrower passed over in each quota (0: none); a borrower stays one
        # for the rest of the pass (allocations only grow), so the cursor may move past it
        passed = dict.fromkeys(queues, 0)
        cluster = self.cluster
        fifo = self.tree.fifo
        replica_of = self.replica
        count_of = self.count
        tried = self.tried
        promised = self.promised
        borrower = self._borrower
        static_refusal = self._static_refusal
        easy = self._easy
        while heap:
            if entitled_only and cluster.free_total == 0:
                return  # nothing left to place: the last pass gives the reasons
            _, lf = heapq.heappop(heap)
            queue = queues[lf]
            position = cursor[lf]
            passed_over = passed[lf]
            while position < len(queue):
                i = queue[position]
                position += 1
                if state[i] != PENDING or i in reasons:
                    continue
                job_priority = jobs[i].priority
                if passed_over and job_priority < passed_over and jobs[i].preemptible:
                    continue  # the job passed over would preempt it (non-preemptible jobs are safe)
                if easy[i]:
                    refusal = None  # preemptible, no limit or promise in its chain, not too big
                else:
                    refusal = static_refusal(i)
                    if refusal is None and promised[i]:
                        refusal = _WAITING
                if refusal is None and bound is not None and borrower(i, bound):
                    if fifo[lf]:
                        break
                    if not passed_over:
                        passed_over = passed[lf] = job_priority
                    continue
                tried.append(i)
                placed = None
                if refusal is None and replica_of[i] < self._smallest_failed:
                    placed = self._place_gang(i, count_of[i])
                    if placed is None and count_of[i] == 1:
                        self._smallest_failed = replica_of[i]
                if placed is not None:
                    self._admit(i, placed)
                    cursor[lf] = position
                    if position < len(queue):
                        heapq.heappush(heap, (self._leaf_key(lf), lf))
                    break
                reasons[i] = refusal or _SHORT
                if fifo[lf]:
                    # fifo: the job that does not fit blocks every job behind it.
                    for behind in queue[position:]:
                        if state[behind] == PENDING and behind not in reasons:
                            reasons[behind] = (QUEUE_BLOCKED, (jobs[i].id,))
                            tried.append(behind)
                    break
                if cluster.free_total == 0 and not entitled_only:
                    # Nothing left to place: the rest of this quota only needs its reasons.
                    for behind in queue[position:]:
                        if state[behind] == PENDING and behind not in reasons:
                            tried.append(behind)
                            reasons[behind] = static_refusal(behind) or (_WAITING if promised[behind] else _SHORT)
                    break

    def _borrower(self, i: int, bound: list[int]) -> bool:
        """Admitting the job takes its quota or an ancestor above `bound`."""
        need = self.needs[i]
        alloc = self.alloc
        return any(alloc[node] + need > bound[node] for node in self.tree.chain[self.leaf[i]])

    # -- action 2: consolidate ------------------------------------------------------------
    def consolidate(self) -> None:
        cluster = self.cluster
        attempts = 0
        failed_sizes: list[tuple[int, int]] = []
        by_node: dict[int, list[int]] | None = None
        for i in self.tried:
            if attempts >= MAX_CONSOLIDATIONS or cluster.free_total == 0:
                break
            if self.state[i] != PENDING or self.reasons.get(i, ("",))[0] != INSUFFICIENT_CAPACITY:
                continue
            count = self.count[i]
            if cluster.free_total < self.replica[i] * count:
                continue
            if self._static_refusal(i) is not None:
                continue
            if any(r <= self.replica[i] and c <= count for r, c in failed_sizes):
                continue
            attempts += 1
            if by_node is None:
                by_node = self._movers_by_node()
            if self._consolidate_for(i, count, by_node):
                self.reasons.pop(i, None)
            else:
                failed_sizes.append((self.replica[i], count))

    def _movable(self, m: int) -> bool:
        job = self.jobs[m]
        return (
            self.state[m] == RUNNING
            and job.preemptible
            and not self.touched[m]
            and bool(self.placements[m])
            and not self.protected(m)
        )

    def _movers_by_node(self) -> dict[int, list[int]]:
        by_node: dict[int, list[int]] = {}
        for m, pls in enumerate(self.placements):
            if pls and self._movable(m):
                for pl in pls:
                    by_node.setdefault(pl[0], []).append(m)
        return by_node

    def _consolidate_for(self, i: int, count: int, by_node: dict[int, list[int]]) -> bool:
        if count == 1 and self.replica[i] >= MILLI and self._consolidate_on_node(i, by_node):
            return True
        return self._consolidate_anywhere(i, count, by_node)

    def _mover_key(self, m: int, own_leaf: int) -> tuple[int, int, tuple[int, float, float, int]]:
        return (
            self.replica[m] * len(self.placements[m]),
            0 if self.leaf[m] == own_leaf else 1,
            victim_key(self.jobs[m], m),
        )

    def _consolidate_on_node(self, i: int, by_node: dict[int, list[int]]) -> bool:
        """Free one node for a single whole-GPU replica: move its smallest jobs elsewhere.

        Nodes closest to holding the replica are tried first (at most MAX_TARGET_NODES); on each,
        the fewest small movable jobs that leave enough whole devices free are moved, and every
        one of them must be placed again at once.
        """
        cluster = self.cluster
        devices_needed = self.replica[i] // MILLI
        own_leaf = self.leaf[i]
        whole = cluster.whole
        # A node's cost: the GPUs of its smallest movable jobs that must leave for the replica to
        # fit. Each mover needs a free block elsewhere, so bigger jobs than the largest block stay.
        block = cluster.largest_block() * MILLI
        room = cluster.free_total - self.replica[i]
        replica = self.replica
        touched = self.touched
        state = self.state
        ranked: list[tuple[int, int, int]] = []
        for node, members in by_node.items():
            if not cluster.ready[node] or cluster.gpus[node] < devices_needed:
                continue
            deficit = devices_needed - whole[node]
            if deficit <= 0:
                ranked.append((0, -whole[node], node))
                continue
            sizes = sorted(
                replica[m] // MILLI
                for m in members
                if replica[m] >= MILLI and replica[m] <= block and not touched[m] and state[m] == RUNNING
            )
            cost = 0
            for size in sizes:
                if deficit <= 0 or cost + size * MILLI > room:
                    break
                cost += size * MILLI
                deficit -= size
            if deficit <= 0:
                ranked.append((cost, -whole[node], node))
        ranked.sort()
        targets = [node for _, _, node in ranked[:MAX_TARGET_NODES]]
        journal = self.journal
        tried = 0
        for node in targets:
            if tried >= MAX_TARGET_NODES:
                break
            candidates = sorted(
                (m for m in set(by_node[node]) if self._movable(m)), key=lambda m: self._mover_key(m, own_leaf)
            )
            if not candidates:
                continue
            tried += 1
            mark = journal.checkpoint()
            movers: list[int] = []
            for m in candidates:
                if whole[node] >= devices_needed or len(movers) >= MAX_MOVERS:
                    break
                movers.append(m)
                job = self.jobs[m]
                for pl in self.placements[m]:
                    cluster.adjust(pl, +1, job.cpu, job.memory_gib)
            if whole[node] < devices_needed or self._place_movers(i, 1, movers) is None:
                journal.rollback(mark)
                continue
            return True
        return False

    def _place_movers(self, i: int, count: int, movers: list[int]) -> list[Placement] | None:
        """Place the beneficiary, then every mover again, and commit; None (nothing kept) if not."""
        journal = self.journal
        inner = journal.checkpoint()
        placed = self._place_gang(i, count)
        if placed is None:
            return None
        moved: list[tuple[int, list[Placement]]] = []
        for mover in sorted(movers, key=lambda x: (-self.replica[x] * len(self.placements[x]), x)):
            new = self._place_gang(mover, len(self.placements[mover]))
            if new is None:
                journal.rollback(inner)
                return None
            if sorted(new) != sorted(self.placements[mover]):
                moved.append((mover, new))
        ordered = self._apply_order(moved)
        if ordered is None:
            journal.rollback(inner)
            return None
        beneficiary = self.jobs[i].id
        reason = (
            f"moved so that {beneficiary} can start: the {gpu_count(self.needs[i])} it needs are free "
            "but fragmented across nodes"
        )
        for mover, new in ordered:
            self._set(self.touched, mover, True)
            self._decide(Evict(self.jobs[mover].id, CONSOLIDATION, beneficiary, reason))
            self._set(self.placements, mover, tuple(new))
            self._decide(("move", mover))
        self._admit(i, placed)
        return placed

    def _apply_order(self, moved: list[tuple[int, list[Placement]]]) -> list[tuple[int, list[Placement]]] | None:
        """Moves in an order where each one's target devices are free when it is applied.

        A move that lands on devices another mover leaves comes after that mover (topological
        order, ties in the order given). A cycle of moves (a swap) gives None: the decision is
        dropped rather than listed in an order that cannot be applied.
        """
        if len(moved) < 2:
            return moved
        leaves: dict[tuple[int, int], list[int]] = {}
        for k, (mover, _) in enumerate(moved):
            for node, devices, _milli in self.placements[mover]:
                for d in devices:
                    leaves.setdefault((node, d), []).append(k)
        after: list[set[int]] = [set() for _ in moved]
        for k, (_, new) in enumerate(moved):
            for node, devices, _milli in new:
                for d in devices:
                    for j in leaves.get((node, d), ()):
                        if j != k:
                            after[k].add(j)
        ordered: list[tuple[int, list[Placement]]] = []
        done = [False] * len(moved)
        while len(ordered) < len(moved):
            progress = False
            for k, entry in enumerate(moved):
                if not done[k] and all(done[j] for j in after[k]):
                    done[k] = True
                    ordered.append(entry)
                    progress = True
            if not progress:
                return None
        return ordered

    def _consolidate_anywhere(self, i: int, count: int, by_node: dict[int, list[int]]) -> bool:
        cluster = self.cluster
        own_leaf = self.leaf[i]
        # Jobs on the nodes closest to holding a replica first; small jobs, the beneficiary's
        # own quota, low priority and recent starts move before others.
        candidates: list[tuple[tuple[int, int, int, tuple[int, float, float, int]], int]] = []
        seen: set[int] = set()
        nodes = sorted(by_node, key=lambda nd: (-cluster.whole[nd], nd))
        for node in nodes:
            if len(candidates) >= 4 * MAX_MOVERS:
                break
            for m in by_node[node]:
                if m in seen or not self._movable(m):
                    continue
                seen.add(m)
                key = (-cluster.whole[node], *self._mover_key(m, own_leaf))
                candidates.append((key, m))
        candidates.sort()
        journal = self.journal
        mark = journal.checkpoint()
        movers: list[int] = []
        for _, m in candidates[: 4 * MAX_MOVERS]:
            if len(movers) >= MAX_MOVERS:
                break
            movers.append(m)
            job = self.jobs[m]
            for pl in self.placements[m]:
                cluster.adjust(pl, +1, job.cpu, job.memory_gib)
            if self._place_movers(i, count, movers) is not None:
                return True
        journal.rollback(mark)
        return False

    # -- action 3: reclaim / preempt / child-level / same-level -------------------------
    def reclaim_and_preempt(self) -> None:
        tree = self.tree
        self.candidates_by_leaf: dict[int, list[int]] = {}
        # Jobs placed or moved earlier in this cycle (touched) and jobs within their min runtime
        # stay out for the whole cycle: leaving them in made every search walk past them.
        for m, job in enumerate(self.jobs):
            if (
                self.state[m] == RUNNING
                and job.preemptible
                and self.leaf[m] >= 0
                and not self.touched[m]
                and not self.protected(m)
            ):
                self.candidates_by_leaf.setdefault(self.leaf[m], []).append(m)
        for members in self.candidates_by_leaf.values():
            members.sort(key=lambda m: victim_key(self.jobs[m], m))
        self.candidate_leaves = sorted(self.candidates_by_leaf)
        self.elastic = [
            m
            for m, job in enumerate(self.jobs)
            if self.state[m] == RUNNING
            and job.preemptible
            and job.min_replicas is not None
            and len(self.placements[m]) > job.min_replicas
            and self.leaf[m] >= 0
        ]
        if not self.candidates_by_leaf:
            return
        self.ranked: dict[tuple[int, int], list[tuple[float, int, int]]] = {}
        self.ranked_generation = -1
        found = 0
        missed_candidates = 0
        failed: dict[int, list[tuple[int, int, int]]] = {}
        blocked_fifo: set[int] = set()
        for i in self.tried:
            if found >= MAX_VICTIM_SEARCHES or missed_candidates >= MAX_FAILED_CANDIDATES:
                break
            if self.state[i] != PENDING or self.promised[i]:
                continue
            code = self.reasons.get(i, ("",))[0]
            if code in _NO_SEARCH:
                continue
            lf = self.leaf[i]
            if tree.fifo[lf]:
                if lf in blocked_fifo:
                    continue
                blocked_fifo.add(lf)
            job = self.jobs[i]
            signature = (job.priority, self.replica[i], self.count[i])
            if any(p >= signature[0] and r <= signature[1] and c <= signature[2] for p, r, c in failed.get(lf, ())):
                continue
            if not self._may_search(i):
                continue
            success, examined = self._search(i)
            if success:
                found += 1
                if self.state[i] == RUNNING:
                    self.reasons.pop(i, None)
            else:
                missed_candidates += max(1, examined)
                failed.setdefault(lf, []).append(signature)

    def _may_search(self, i: int) -> bool:
        job = self.jobs[i]
        lf = self.leaf[i]
        tree = self.tree
        need = self.needs[i]
        if self.alloc[lf] + need <= max(self.share[lf], tree.admit_guaranteed[lf]):
            return True
        own = self.candidates_by_leaf.get(lf, ())
        if own and self.jobs[own[0]].priority < job.priority:
            return True
        quota = tree.index[job.quota]
        if tree.is_self[lf] and tree.child_preemption[quota]:
            return True
        return tree.same_level[quota]

    def _regions(self, i: int) -> tuple[tuple[int, int], int]:
        """Where reclaim may take from, as a slice of `candidate_leaves` (job i's own leaf is in
        it and skipped by `_stream`), and the highest chain index where Q is entitled."""
        tree = self.tree
        lf = self.leaf[i]
        chain = tree.chain[lf]
        need = self.needs[i]
        alloc = self.alloc
        top = -1
        for level, node in enumerate(chain):
            entitled = alloc[node] + need <= self.share[node]
            entitled = entitled or alloc[node] + need <= tree.admit_guaranteed[node]
            if not entitled:
                break
            top = level
        if top < 0:
            return (0, 0), top
        if top + 1 < len(chain):
            root = chain[top + 1]
            lo, hi = root, self.end[root]
        else:
            lo, hi = 0, len(tree)
        leaves = self.candidate_leaves
        return (bisect_left(leaves, lo), bisect_left(leaves, hi)), top

    def _ranked(self, region: tuple[int, int]) -> list[tuple[float, int, int]]:
        """The region's leaves as a heap, the one furthest above its fair share on top.

        Built once per region and allocation state, and copied for each search: searches that
        find nothing roll back to the same state, and a cycle may run hundreds of them over the
        same thousand leaves.
        """
        if self.ranked_generation != self.alloc_generation:
            self.ranked.clear()
            self.ranked_generation = self.alloc_generation
        heap = self.ranked.get(region)
        if heap is None:
            alloc, share, created = self.alloc, self.share, self.tree.created
            start, stop = region
            heap = [(-(alloc[v] - share[v]), created[v], v) for v in self.candidate_leaves[start:stop]]
            heapq.heapify(heap)
            self.ranked[region] = heap
        return heap.copy()

    def _branches(self, qleaf: int, vleaf: int) -> tuple[int, int]:
        """(position in Q's chain of Q's branch, V's branch) just below their LCA."""
        tree = self.tree
        qchain = tree.chain[qleaf]
        previous = vleaf
        for node in tree.chain[vleaf]:
            if node in qchain:
                return qchain.index(node) - 1, previous
            previous = node
        return len(qchain) - 1, previous

    def _rule_for(self, i: int, m: int, amount: int, only: str | None = None) -> tuple[str, int, str] | None:
        """Which rule lets job i take `amount` GPUs of job m now: (rule, Q branch level, variant).

        `only` restricts the answer to the rule whose stream offered the victim, so that the
        order of preference between rules holds.
        """
        tree = self.tree
        job = self.jobs[i]
        victim = self.jobs[m]
        qleaf = self.leaf[i]
        vleaf = self.leaf[m]
        alloc = self.alloc
        share = self.share
        need = self.needs[i]
        if vleaf == qleaf:
            if only in (None, PREEMPT) and victim.priority < job.priority:
                return (PREEMPT, -1, "")
            return None
        level, vbranch = self._branches(qleaf, vleaf)
        qchain = tree.chain[qleaf]
        if only not in (None, RECLAIM):
            return self._preemption_rule(i, m, amount, only)
        lca = tree.parent[vbranch]
        if lca >= 0 and tree.child_preemption[lca] and (tree.is_self[vbranch] or tree.is_self[qchain[level]]):
            # Under child_preemption the parent's own jobs rank above its children: only the
            # child-level rule moves GPUs between them, never fair share or guarantees.
            return self._preemption_rule(i, m, amount, only)
        within_share = all(alloc[c] + need <= share[c] for c in qchain[: level + 1])
        # With same_level_preemption on the victim's side, priority beats fair share between
        # siblings: a lower-priority job may not take back what a same-level eviction won.
        priority_shield = tree.same_level[vbranch] and victim.priority > job.priority
        if within_share and not priority_shield and alloc[vbranch] - amount >= share[vbranch]:
            return (RECLAIM, level, "fair_share")
        within_guarantee = all(alloc[c] + need <= tree.admit_guaranteed[c] for c in qchain[: level + 1])
        if within_guarantee and alloc[vbranch] > tree.admit_guaranteed[vbranch]:
            return (RECLAIM, level, "guarantee")
        if only is None:
            return self._preemption_rule(i, m, amount, None)
        return None

    def _preemption_rule(self, i: int, m: int, amount: int, only: str | None) -> tuple[str, int, str] | None:
        tree = self.tree
        job = self.jobs[i]
        victim = self.jobs[m]
        qleaf = self.leaf[i]
        vleaf = self.leaf[m]
        alloc = self.alloc
        quota = tree.index.get(job.quota, -1)
        if (
            only in (None, CHILD_PREEMPTION)
            and tree.is_self[qleaf]
            and tree.child_preemption[quota]
            and quota in tree.chain[vleaf]
        ):
            return (CHILD_PREEMPTION, -1, "")
        if only in (None, SAME_LEVEL) and tree.same_level[quota] and victim.priority < job.priority:
            parent = tree.parent[quota]
            for sibling_level in tree.chain[vleaf]:
                if tree.parent[sibling_level] == parent:
                    guaranteed = tree.admit_guaranteed[sibling_level]
                    if sibling_level != quota and alloc[sibling_level] - amount >= guaranteed:
                        return (SAME_LEVEL, -1, "")
                    break
        return None

    def _stream(self, i: int, region: tuple[int, int]) -> Iterator[tuple[Unit, str | None]]:
        """Victim units in order of preference: elastic replicas, then whole jobs by rule."""
        tree = self.tree
        job = self.jobs[i]
        qleaf = self.leaf[i]
        start, stop = region
        leaves = self.candidate_leaves
        lo, hi = (leaves[start], leaves[stop - 1]) if stop > start else (0, -1)

        def over(v: int) -> float:
            return self.alloc[v] - self.share[v] if lo <= v <= hi and v != qleaf else 0

        shrinkable: list[tuple[tuple[Any, ...], int]] = []
        for m in self.elastic:
            if self.touched[m] or self.protected(m):
                continue
            rule = self._rule_for(i, m, self.replica[m])
            if rule is None:
                continue
            vleaf = self.leaf[m]
            key = (RULE_ORDER[rule[0]], -over(vleaf), victim_key(self.jobs[m], m))
            shrinkable.append((key, m))
        shrinkable.sort()
        for _, m in shrinkable:
            minimum = self.jobs[m].min_replicas or 0
            while not self.touched[m] and len(self.placements[m]) > minimum:
                before = len(self.placements[m])
                yield (m, self.placements[m][-1]), None
                if len(self.placements[m]) == before:
                    break
        # Reclaim: the quota furthest above its fair share first, re-ranked after each victim.
        cursor: dict[int, int] = {}
        heap = self._ranked(region)
        while heap:
            _, created, v = heapq.heappop(heap)
            if v == qleaf:
                continue
            members = self.candidates_by_leaf[v]
            position = cursor.get(v, 0)
            while position < len(members):
                m = members[position]
                position += 1
                if self._eligible_victim(m):
                    cursor[v] = position
                    yield (m, None), RECLAIM
                    break
            cursor[v] = position
            if position < len(members):
                heapq.heappush(heap, (-(self.alloc[v] - self.share[v]), created, v))
        # Preempt: own quota, lower priority.
        for m in self.candidates_by_leaf.get(qleaf, ()):
            if self.jobs[m].priority >= job.priority:
                break
            if self._eligible_victim(m):
                yield (m, None), PREEMPT
        quota = tree.index[job.quota]
        if tree.is_self[qleaf] and tree.child_preemption[quota]:
            yield from self._merged(quota, qleaf, None, CHILD_PREEMPTION)
        if tree.same_level[quota]:
            parent = tree.parent[quota]
            siblings = tree.children[parent] if parent >= 0 else tree.roots
            for sibling in siblings:
                if sibling != quota and not tree.is_self[sibling]:
                    yield from self._merged(sibling, -1, job.priority, SAME_LEVEL)

    def _merged(self, top: int, exclude: int, below_priority: int | None, rule: str) -> Iterator[tuple[Unit, str]]:
        lo, hi = top, self.end[top]
        leaves = self.candidate_leaves
        members = [
            (victim_key(self.jobs[m], m), m)
            for v in leaves[bisect_left(leaves, lo) : bisect_left(leaves, hi)]
            if v != exclude
            for m in self.candidates_by_leaf[v]
        ]
        members.sort()
        for _, m in members:
            if below_priority is not None and self.jobs[m].priority >= below_priority:
                break
            if self._eligible_victim(m):
                yield (m, None), rule

    def _eligible_victim(self, m: int) -> bool:
        return self.state[m] == RUNNING and not self.touched[m] and not self.protected(m)

    def _take(self, unit: Unit) -> None:
        m, replica_placement = unit
        job = self.jobs[m]
        if replica_placement is None:
            for pl in self.placements[m]:
                self.cluster.adjust(pl, +1, job.cpu, job.memory_gib)
            self._add_alloc(self.leaf[m], -self.replica[m] * len(self.placements[m]))
            self._set(self.state, m, PENDING)
            self._set(self.touched, m, True)
        else:
            self.cluster.adjust(replica_placement, +1, job.cpu, job.memory_gib)
            self._add_alloc(self.leaf[m], -self.replica[m])
            self._set(self.placements, m, self.placements[m][:-1])

    def _give_back(self, unit: Unit, placements: tuple[Placement, ...]) -> None:
        m, replica_placement = unit
        job = self.jobs[m]
        if replica_placement is None:
            for pl in placements:
                self.cluster.adjust(pl, -1, job.cpu, job.memory_gib)
            self._add_alloc(self.leaf[m], self.replica[m] * len(placements))
            self._set(self.state, m, RUNNING)
            self._set(self.touched, m, False)
        else:
            self.cluster.adjust(replica_placement, -1, job.cpu, job.memory_gib)
            self._add_alloc(self.leaf[m], self.replica[m])
            self._set(self.placements, m, self.placements[m] + (replica_placement,))

    def _fits(self, i: int, taken: list[tuple[Unit, tuple[str, int, str]]]) -> list[Placement] | None:
        """Beneficiary-side conditions on the current state, then a gang placement."""
        tree = self.tree
        lf = self.leaf[i]
        need = self.needs[i]
        alloc = self.alloc
        chain = tree.chain[lf]
        guard = self.guard
        for node in chain:
            if alloc[node] + need > tree.limit[node] or alloc[node] + need > guard[node]:
                return None
        if not self.jobs[i].preemptible:
            for node in chain:
                if alloc[node] + need > tree.admit_guaranteed[node]:
                    return None
        for _, (rule, level, variant) in taken:
            if rule == RECLAIM:
                bound = self.share if variant == "fair_share" else tree.admit_guaranteed
                if any(alloc[c] + need > bound[c] for c in chain[: level + 1]):
                    return None
            elif rule == CHILD_PREEMPTION:
                parent = tree.parent[lf]
                if alloc[parent] + need > tree.guaranteed[parent]:
                    return None
        if self.cluster.free_total < need:
            return None
        return self._place_gang(i, self.count[i])

    def _search(self, i: int) -> tuple[bool, int]:
        """Whether victims were found (and committed) for job i, and how many candidates it examined."""
        journal = self.journal
        mark = journal.checkpoint()
        generation = self.alloc_generation
        region, _ = self._regions(i)
        taken: list[tuple[Unit, tuple[str, int, str]]] = []
        examined = 0
        placed: list[Placement] | None = None
        for unit, only in self._stream(i, region):
            examined += 1
            if examined > MAX_CANDIDATES_PER_SEARCH:
                break
            m, replica_placement = unit
            amount = self.replica[m] * (1 if replica_placement else len(self.placements[m]))
            rule = self._rule_for(i, m, amount, only)
            if rule is None:
                continue
            before = self.placements[m]
            self._take(unit)
            taken.append((unit, rule))
            del before
            inner = journal.checkpoint()
            placed = self._fits(i, taken)
            if placed is not None:
                journal.rollback(inner)
                break
        if placed is None:
            journal.rollback(mark)
            self.alloc_generation = generation  # the very state the search began from
            return False, examined
        # Fewest GPUs: give back every victim the job can do without, latest taken first.
        kept: list[tuple[Unit, tuple[str, int, str]]] = []
        for position in range(len(taken) - 1, -1, -1):
            unit, rule = taken[position]
            m, replica_placement = unit
            others = kept + taken[:position]
            restore = journal.checkpoint()
            original = self._original_placements(m, unit)
            self._give_back(unit, original)
            inner = journal.checkpoint()
            if self._fits(i, others) is not None:
                journal.rollback(inner)
                continue
            journal.rollback(restore)
            kept.append((unit, rule))
        kept.reverse()
        placed = self._fits(i, kept)
        if placed is None:  # cannot happen: the full set fitted; keep the snapshot safe
            journal.rollback(mark)
            return False, examined
        self._commit_victims(i, kept, placed)
        return True, examined

    def _original_placements(self, m: int, unit: Unit) -> tuple[Placement, ...]:
        if unit[1] is not None:
            return (unit[1],)
        return self.placements[m]

    def _commit_victims(self, i: int, kept: list[tuple[Unit, tuple[str, int, str]]], placed: list[Placement]) -> None:
        beneficiary = self.jobs[i]
        shrunk: dict[int, list[Placement]] = {}
        shrink_rule: dict[int, str] = {}
        releasing = False
        for (m, replica_placement), (rule, _, variant) in kept:
            if replica_placement is not None:
                shrunk.setdefault(m, []).append(replica_placement)
                shrink_rule.setdefault(m, rule)
                continue
            victim = self.jobs[m]
            reason = self._victim_reason(i, m, rule, variant)
            self._decide(Evict(victim.id, rule, beneficiary.id, reason))
            if victim.grace_seconds > 0:
                releasing = True
                self._set(self.state, m, RELEASING)
                self._set(self.held, m, self.placements[m])
        evicted_whole = {m for (m, rp), _ in kept if rp is None}
        for m in sorted(shrunk):
            if m in evicted_whole:
                continue  # the whole job goes; its shrunk replicas go with it
            self._set(self.touched, m, True)
            rule = shrink_rule[m]
            reason = f"elastic replicas above min_replicas go first ({rule}): " + self._victim_reason(i, m, rule, "")
            self._decide(("shrink", m, tuple(shrunk[m]), reason, beneficiary.id))
        if not releasing:
            self._admit(i, placed)
            return
        # Victims inside their grace period still hold the GPUs: the job waits for them, and
        # its placement stays reserved for the rest of this cycle.
        self._add_alloc(self.leaf[i], self.needs[i])
        self._set(self.promised, i, True)
        self._set(self.touched, i, True)
        count = sum(1 for (m, rp), _ in kept if rp is None and self.jobs[m].grace_seconds > 0)
        self.reasons[i] = (WAITING_FOR_EVICTION, (count, self.needs[i]))

    def _victim_reason(self, i: int, m: int, rule: str, variant: str) -> str:
        tree = self.tree
        job = self.jobs[i]
        victim = self.jobs[m]
        vq = victim.quota
        vleaf = self.leaf[m]
        if rule == RECLAIM:
            _level, vbranch = self._branches(self.leaf[i], vleaf)
            name = tree.names[vbranch]
            if variant == "fair_share":
                return (
                    f"reclaimed for {job.id} of {job.quota}: {name} holds more than its fair share "
                    f"of {gpu_count(self.share[vbranch])} and keeps at least that; {job.quota} stays "
                    "within its own fair share"
                )
            return (
                f"reclaimed by {job.quota} for {job.id}: {name} was above its guarantee of "
                f"{gpu_count(tree.admit_guaranteed[vbranch])}; {job.quota} is within its guarantee"
            )
        if rule == PREEMPT:
            return f"preempted in {vq} by {job.id} (priority {job.priority} > {victim.priority})"
        if rule == CHILD_PREEMPTION:
            return f"child-level preemption: {job.quota}'s own job {job.id} ranks above {vq}'s jobs"
        return (
            f"same-level preemption: {job.id} of {job.quota} (priority {job.priority}) over "
            f"{victim.id} of {vq} (priority {victim.priority})"
        )

    # -- action 4: elastic grow -----------------------------------------------------------
    def grow(self) -> None:
        cluster = self.cluster
        if cluster.free_total == 0:
            return
        tree = self.tree
        # No growth in a branch where a beneficiary waits for releasing victims: the quota room
        # (a guarantee, for a non-preemptible beneficiary) is promised to it as well.
        waiting_branch = {node for i, p in enumerate(self.promised) if p for node in tree.chain[self.leaf[i]]}
        heap: list[tuple[tuple[float, int, float, int], int]] = []
        for m, job in enumerate(self.jobs):
            if (
                self.state[m] == RUNNING
                and self.leaf[m] not in waiting_branch
                and job.min_replicas is not None
                and len(self.placements[m]) < job.replicas
                and self.leaf[m] >= 0
                and (not self.touched[m] or self.admitted_now[m])
            ):
                lf = self.leaf[m]
                heap.append(((saturation(self.alloc[lf], self.share[lf]), -job.priority, job.submitted_at, m), m))
        heapq.heapify(heap)
        while heap and cluster.free_total > 0:
            _, m = heapq.heappop(heap)
            job = self.jobs[m]
            lf = self.leaf[m]
            replica = self.replica[m]
            chain = tree.chain[lf]
            if any(self.alloc[c] + replica > tree.limit[c] for c in chain):
                continue
            if not job.preemptible and any(self.alloc[c] + replica > tree.admit_guaranteed[c] for c in chain):
                continue
            pl = cluster.place_replica(replica, job.cpu, job.memory_gib, self.spread)
            if pl is None:
                continue
            self._add_alloc(lf, replica)
            self.placements[m] = self.placements[m] + (pl,)
            self.grown.setdefault(m, []).append(pl)
            if len(self.placements[m]) < job.replicas:
                key = (saturation(self.alloc[lf], self.share[lf]), -job.priority, job.submitted_at, m)
                heapq.heappush(heap, (key, m))

    # -- result ---------------------------------------------------------------------------
    def _replica_placements(self, m: int, placements: Any) -> tuple[ReplicaPlacement, ...]:
        names = self.cluster.names
        out = []
        for node, devices, milli in placements:
            fraction = 1.0 if milli >= MILLI else milli / MILLI
            out.append(ReplicaPlacement(names[node], devices, fraction))
        return tuple(out)

    def result(self) -> CycleResult:
        decisions: list[Decision] = []
        jobs = self.jobs
        for entry in self.decisions:
            if isinstance(entry, Evict):
                decisions.append(entry)
                continue
            kind = entry[0]
            m = entry[1]
            if kind == "admit" or kind == "move":
                decisions.append(Admit(jobs[m].id, self._replica_placements(m, self.placements[m])))
            elif kind == "shrink":
                removed = self._replica_placements(m, entry[2])
                decisions.append(Shrink(jobs[m].id, removed, SHRINK, entry[4], entry[3]))
        for m in sorted(self.grown):
            if self.admitted_now[m]:
                continue
            decisions.append(Grow(jobs[m].id, self._replica_placements(m, self.grown[m])))
        return CycleResult(decisions=tuple(decisions), quotas=self._quota_status(), pending=self._pending())

    def _quota_status(self) -> dict[str, QuotaStatus]:
        tree = self.tree
        size = len(tree)
        held = [0] * size
        running = [0] * size
        pending = [0] * size
        replica = self.replica
        for m, lf in enumerate(self.leaf):
            if lf < 0:
                continue
            state = self.state[m]
            if state == RUNNING:
                held[lf] += replica[m] * len(self.placements[m])
                running[lf] += 1
            elif state == RELEASING:
                held[lf] += replica[m] * len(self.held[m])
                running[lf] += 1
            else:
                pending[lf] += 1
        own = list(held)
        held = subtree_requests(tree, held)
        running = subtree_requests(tree, running)
        pending = subtree_requests(tree, pending)
        statuses: dict[str, QuotaStatus] = {}
        share = self.share
        for name, node in tree.index.items():
            own_leaf = tree.leaf_of.get(name, node)
            statuses[name] = QuotaStatus(
                fair_share=share[node] / MILLI,
                allocated=held[node] / MILLI,
                allocated_self=own[own_leaf] / MILLI,
                saturation=saturation(held[node], share[node]),
                running=running[node],
                pending=pending[node],
                guaranteed=tree.guaranteed[node] / MILLI,
            )
        return statuses

    def _pending(self) -> dict[str, PendingReason]:
        jobs = self.jobs
        state = self.state
        # Allocation already sorted each quota's queue; only this cycle's victims join them.
        by_leaf: dict[int, list[int]] = {
            lf: [m for m in queue if state[m] == PENDING] for lf, queue in self.queues.items()
        }
        rejoined: set[int] = set()
        for m, (now_state, job, lf) in enumerate(zip(state, jobs, self.leaf, strict=True)):
            if now_state != PENDING:
                continue
            if job.state != PENDING:
                by_leaf.setdefault(lf, []).append(m)
                rejoined.add(lf)
            elif lf < 0:
                by_leaf.setdefault(lf, []).append(m)
        for lf in rejoined:
            by_leaf[lf].sort(key=lambda m: queue_key(jobs[m], m))
        out: dict[str, PendingReason] = {}
        free = self.cluster.free_total
        largest = self.cluster.largest_block()
        reasons = self.reasons
        needs = self.needs
        messages = self._messages
        leaf = self.leaf
        replica = self.replica
        for members in by_leaf.values():
            for position, m in enumerate(members, start=1):
                reason = reasons.get(m)
                if reason is not None and reason[0] in _CAPACITY_CODES:
                    # the common case, a full pool: one sentence per quota and job shape
                    code = NO_FIT if needs[m] <= free else INSUFFICIENT_CAPACITY
                    key = (code, (), leaf[m], needs[m], replica[m])
                    message = messages.get(key)
                    if message is None:
                        message = messages[key] = self._message(m, code, (), free, largest)
                    out[jobs[m].id] = PendingReason(code, message, position)
                    continue
                code, args = self._final_reason(m, free)
                out[jobs[m].id] = PendingReason(code, self._cached_message(m, code, args, free, largest), position)
        return out

    def _final_reason(self, m: int, free: int) -> tuple[str, tuple[Any, ...]]:
        reason = self.reasons.get(m)
        if reason is None:
            reason = self._static_refusal(m) or (
                (WAITING_FOR_EVICTION, ()) if self.promised[m] else (INSUFFICIENT_CAPACITY, ())
            )
        code = reason[0]
        if code in _CAPACITY_CODES:
            return ((NO_FIT if self.needs[m] <= free else INSUFFICIENT_CAPACITY), ())
        return reason

    def _cached_message(self, m: int, code: str, args: tuple[Any, ...], free: int, largest: int) -> str:
        """Jobs of one quota with the same shape and refusal share one sentence."""
        if code in (QUEUE_BLOCKED, WAITING_FOR_EVICTION, UNKNOWN_QUOTA):
            return self._message(m, code, args, free, largest)
        key = (code, args, self.leaf[m], self.needs[m], self.replica[m])
        message = self._messages.get(key)
        if message is None:
            message = self._messages[key] = self._message(m, code, args, free, largest)
        return message

    def _message(self, m: int, code: str, args: tuple[Any, ...], free: int, largest: int) -> str:
        job = self.jobs[m]
        replica = self.replica[m]
        need = self.needs[m]
        count = self.count[m]
        if code == UNKNOWN_QUOTA:
            return f"quota {job.quota} does not exist"
        if code == EXCEEDS_CLUSTER:
            scope, asked, has = args
            if scope == "node":
                return f"needs {gpu_count(asked)} on one node; the largest node has {gpus(has)}"
            return f"asks {gpu_count(asked)}, the pool has {gpus(has)}"
        if code == QUOTA_LIMIT:
            name, allocated, asked, limit = args
            return f"would exceed the limit of {name}: {gpus(allocated)} + {gpus(asked)} > {gpus(limit)}"
        if code == GUARANTEED_ONLY:
            name, allocated, asked, guaranteed = args
            return (
                f"non-preemptible jobs must fit in guaranteed quota of {name}: "
                f"{gpus(allocated)} + {gpus(asked)} > {gpus(guaranteed)}"
            )
        if code == QUEUE_BLOCKED and len(args) == 2:
            return f"waits while {args[0]}, which it was evicted for, starts"
        if code == QUEUE_BLOCKED:
            return f"{job.quota} is a fifo queue: waits behind {args[0]}, which does not fit yet"
        if code == WAITING_FOR_EVICTION:
            victims = [self.jobs[v].id for v in self.waiting_for.get(m, [])]
            if victims:
                return (
                    f"waiting for {len(victims)} evicted job(s) ({', '.join(sorted(victims))}) to "
                    f"release their GPUs; {gpu_count(need)} are promised to it"
                )
            if args:
                return (
                    f"waiting for {args[0]} evicted job(s) to release their GPUs; "
                    f"{gpu_count(args[1])} are promised to it"
                )
            return f"waiting for evicted jobs to release their GPUs; needs {gpu_count(need)}"
        lf = self.leaf[m]
        shape = (
            f"{count:,} replicas of {gpu_count(replica)}, each on one node"
            if count > 1
            else f"{gpu_count(replica)} on one node"
        )
        if replica < MILLI:
            best = self.cluster.largest_device_free()
            shape = f"{gpus(replica)} of one GPU" + (f" x {count:,} replicas" if count > 1 else "")
            if code == NO_FIT:
                return f"needs {shape}; the most free on one device is {gpus(best)}"
        elif code == NO_FIT:
            return f"needs {shape}; largest free block is {largest}"
        allocated = self.alloc[lf]
        share = self.share[lf]
        name = self.tree.names[lf]
        if allocated + need > share:
            context = (
                f"{name} would go above its fair share ({gpus(allocated)} + {gpus(need)} > "
                f"{gpus(share)}), so it waits for idle GPUs"
            )
        else:
            context = "no preemptible job can be reclaimed or preempted for it"
        return f"needs {gpu_count(need)}; {gpus(free)} are free in the pool; {context}"


def _subtree_ends(tree: QuotaTree) -> list[int]:
    """Index one past the last descendant; the tree's index order is a preorder walk."""
    size = len(tree)
    end = list(range(1, size + 1))
    for i in range(size - 1, -1, -1):
        p = tree.parent[i]
        if p >= 0 and end[i] > end[p]:
            end[p] = end[i]
    return end
