"""Allocate: SCHEDULING.md §2, "Admission and placement (allocate)".

Quotas are served lowest saturation (allocated ÷ fair share) first, then rank; inside a quota,
jobs by priority, then submission time. A job is admitted whole (gang) or not at all, within
every `limit` of its chain, and a non-preemptible job within every guarantee of its chain
("Non-preemptible jobs use guaranteed quota only"); those checks are `Session.static_refusal`.
A job that does not fit gets a reason here, and is tried again by consolidate and reclaim.
"""

from __future__ import annotations

import heapq
from operator import attrgetter

from scheduling.engine.actions import reserve
from scheduling.engine.fairshare import MILLI
from scheduling.engine.policies import saturation
from scheduling.engine.resource_rules import dominant_saturation, within
from scheduling.engine.resources import ENTITLED, GUARANTEE
from scheduling.engine.session import SHORT, WAITING, Session
from scheduling.engine.types import PENDING, QUEUE_BLOCKED, UNKNOWN_QUOTA

_PREEMPTIBLE = attrgetter("preemptible")
_SUBMITTED = attrgetter("submitted_at")
_PRIORITY = attrgetter("priority")


def quota_order(session: Session, leaf: int) -> tuple[bool, float, int, int, int]:
    tree = session.tree
    return (
        # child_preemption: a parent's own jobs rank above everything in its subtree
        not (tree.is_self[leaf] and tree.child_preemption[tree.parent[leaf]]),
        dominant_saturation(session, leaf)
        if session.resources
        else saturation(session.allocated[leaf], session.fair_share[leaf]),
        -tree.rank[leaf],
        tree.created[leaf],
        leaf,
    )


def allocate(session: Session) -> None:
    session.queues = queues_in_order(session)
    session.tried = []
    # Beneficiaries of releasing victims go first: what they wait for is theirs.
    promised = session.promised
    for job in sorted(session.waiting_for):
        if promised[job] and session.state[job] == PENDING and session.static_refusal(job) is None:
            placed = session.place_promised(job)
            if placed is not None:
                session.admit(job, placed)
    # Then beneficiaries whose victims have released and are back in the queue.
    for job in session.owed:
        if session.state[job] == PENDING and not promised[job] and session.static_refusal(job) is None:
            placed = session.place_gang(job, session.admit_count[job])
            if placed is not None:
                session.admit(job, placed)
    for job, owed in session.evicted_for.items():
        if session.state[owed] == PENDING and session.state[job] == PENDING:
            session.reasons[job] = (QUEUE_BLOCKED, (session.jobs[owed].id, "evicted"))
    # Entitled jobs (within fair share or guarantee at every level with the job admitted)
    # come before borrowers, so that nothing is admitted that the next cycle reclaims.
    # Three passes: jobs within guarantee at every level (the guarantee rule would reclaim
    # for them), then jobs within fair share or guarantee, then borrowers.
    tree = session.tree
    within_share = [s if s > g else g for s, g in zip(session.fair_share, tree.admit_guaranteed, strict=True)]
    session.smallest_failed = 1 << 60
    session.failed_shapes = []
    # Jobs whose static refusal is None whatever the allocations (promised jobs excluded).
    limited = session.limited
    biggest = session.cluster.max_gpus * MILLI
    capacity = session.capacity
    session.easy = [
        leaf >= 0 and preemptible and not limited[leaf] and not p and r <= biggest and need <= capacity
        for preemptible, leaf, p, r, need in zip(
            map(_PREEMPTIBLE, session.jobs),
            session.job_leaf,
            session.promised,
            session.replica_milli,
            session.needs,
            strict=True,
        )
    ]
    serve_pass(session, tree.admit_guaranteed, GUARANTEE)
    serve_pass(session, within_share, ENTITLED)
    serve_pass(session, None)


def queues_in_order(session: Session) -> dict[int, list[int]]:
    """Each leaf's pending jobs in queue order (`policies.queue_key`: priority high first, then
    oldest submission, then snapshot order), the leaves in the order of their first job.

    Grouped in snapshot order, then each queue sorted twice, stably: by submission, then by
    priority (high first). That is the order of `queue_key` without a key tuple per job (a cycle
    at S4 queues 100,000 jobs); a job of no known quota gets its reason here instead.
    """
    jobs = session.jobs
    job_leaf = session.job_leaf
    state = session.state
    queues: dict[int, list[int]] = {}
    found = queues.get
    for job in session.queued:
        if state[job] != PENDING:
            continue
        leaf = job_leaf[job]
        if leaf < 0:
            session.reasons[job] = (UNKNOWN_QUOTA, (jobs[job].quota,))
            continue
        queue = found(leaf)
        if queue is None:
            queues[leaf] = [job]
        else:
            queue.append(job)
    submitted = list(map(_SUBMITTED, jobs)).__getitem__
    priority = list(map(_PRIORITY, jobs)).__getitem__
    for queue in queues.values():
        if len(queue) > 1:
            queue.sort(key=submitted)
            queue.sort(key=priority, reverse=True)  # stable too: equal priorities keep their order
    return queues


def serve_pass(session: Session, bound: list[int] | None, resource_bound: int = ENTITLED) -> None:
    """One pass over the quotas, lowest saturation first.

    With a `bound`, only jobs that keep their quota and every ancestor within it are admitted:
    another job is passed over (it waits for a later pass), and so is every preemptible job of
    its quota with a lower priority, which the job passed over would preempt.
    """
    entitled_only = bound is not None
    cluster = session.cluster
    if entitled_only and cluster.free_total == 0 and not reserve.open_to(session, reserve.GUARANTEED):
        return  # nothing left to place: the last pass gives the reasons
    queues = session.queues
    state = session.state
    reasons = session.reasons
    jobs = session.jobs
    # the order's last figure is the leaf: one flat tuple per quota (heap steps compare one level)
    heap = [quota_order(session, leaf) for leaf in queues]
    heapq.heapify(heap)
    cursor = dict.fromkeys(queues, 0)
    # priority of the first borrower passed over in each quota (0: none); a borrower stays one
    # for the rest of the pass (allocations only grow), so the cursor may move past it
    passed = dict.fromkeys(queues, 0)
    tree = session.tree
    fifo = tree.fifo
    chain_of = tree.chain
    alloc = session.allocated
    replica_of = session.replica_milli
    count_of = session.admit_count
    needs = session.needs
    tried = session.tried
    promised = session.promised
    static_refusal = session.static_refusal
    easy = session.easy
    managed = bool(session.resources)
    room = 0
    while heap:
        if entitled_only and cluster.free_total == 0 and not reserve.open_to(session, reserve.GUARANTEED):
            return  # nothing left to place: the last pass gives the reasons
        leaf = heapq.heappop(heap)[-1]
        queue = queues[leaf]
        position = cursor[leaf]
        passed_over = passed[leaf]
        if bound is not None:
            # The GPUs a job of this quota may take within `bound` in its whole chain (`borrows_beyond`):
            # the allocations change only when a job is admitted, which ends this visit.
            # (a loop: a comprehension's set-up cost more than the one to three nodes it reads)
            chain = chain_of[leaf]
            room = bound[chain[0]] - alloc[chain[0]]
            for node in chain:
                if bound[node] - alloc[node] < room:
                    room = bound[node] - alloc[node]
        while position < len(queue):
            job = queue[position]
            position += 1
            if state[job] != PENDING or job in reasons:
                continue
            spec = jobs[job]
            job_priority = spec.priority
            if passed_over and job_priority < passed_over and spec.preemptible:
                continue  # the job passed over would preempt it (non-preemptible jobs are safe)
            if easy[job]:
                refusal = None  # preemptible, no limit or promise in its chain, not too big
            else:
                refusal = static_refusal(job)
                if refusal is None and promised[job]:
                    refusal = WAITING
            if (
                refusal is None
                and bound is not None
                and (needs[job] > room or (managed and not within(session, job, chain_of[leaf], resource_bound)))
            ):
                if not passed_over:
                    # the head waits for the borrowers' pass: keep its GPUs from those behind it
                    reserve.hold_head(session, job)
                if fifo[leaf]:
                    break
                if not passed_over:
                    passed_over = passed[leaf] = job_priority
                continue
            tried.append(job)
            placed = None
            own_hold = refusal is None and reserve.holds_own(session, job)
            if own_hold:
                # its own reservation first, so that it starts on the GPUs kept for it
                placed = reserve.backfill(session, job)
            elif refusal is None and replica_of[job] < session.smallest_failed and not shape_failed(session, job):
                placed = session.place_gang(job, count_of[job])
                if placed is None and count_of[job] == 1:
                    failed_to_place(session, job)
            if placed is None and refusal is None and not own_hold:
                placed = reserve.backfill(session, job)  # reserved GPUs it cannot delay
            if placed is not None:
                session.admit(job, placed)
                cursor[leaf] = position
                if position < len(queue):
                    heapq.heappush(heap, quota_order(session, leaf))
                break
            reasons[job] = refusal or SHORT
            if refusal is None:
                reserve.hold(session, job)  # the head gang keeps where it fits soonest
            if fifo[leaf]:
                # fifo: the job that does not fit blocks every job behind it.
                for behind in queue[position:]:
                    if state[behind] == PENDING and behind not in reasons:
                        reasons[behind] = (QUEUE_BLOCKED, (spec.id,))
                        tried.append(behind)
                break
            if cluster.free_total == 0 and not entitled_only and not reserve.open_to(session, reserve.BORROWER):
                # Nothing left to place: the rest of this quota only needs its reasons (a job
                # that no static refusal can stop is short of capacity, without asking).
                for behind in queue[position:]:
                    if state[behind] == PENDING and behind not in reasons:
                        tried.append(behind)
                        if easy[behind]:
                            reasons[behind] = SHORT
                        else:
                            reasons[behind] = static_refusal(behind) or (WAITING if promised[behind] else SHORT)
                break


def failed_to_place(session: Session, job: int) -> None:
    """Remember a single replica that found no room, so that no job at least as large tries again
    in this pass: by its GPUs alone when it asks no CPU or memory of a node, otherwise by its
    whole shape (a job asking fewer cores may fit where this one did not)."""
    spec = session.jobs[job]
    if spec.cpu <= 0 and spec.memory_gib <= 0:
        session.smallest_failed = session.replica_milli[job]
    elif len(session.failed_shapes) < 8:
        session.failed_shapes.append((session.replica_milli[job], spec.cpu, spec.memory_gib))


def shape_failed(session: Session, job: int) -> bool:
    """The job is no smaller, in GPUs, CPU and memory, than a replica that found no room."""
    if not session.failed_shapes:
        return False
    spec = session.jobs[job]
    replica = session.replica_milli[job]
    return any(
        replica >= gpus and spec.cpu >= cpu and spec.memory_gib >= memory for gpus, cpu, memory in session.failed_shapes
    )
