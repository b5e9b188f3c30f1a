"""Elastic grow: SCHEDULING.md §2, "Elastic jobs": admitted with at least `min_replicas`, they
grow towards `replicas` on idle capacity, lowest saturation first, within every `limit` (and
every guarantee, for a non-preemptible job). Runs last, on what the other actions left free.

The other half of the rule, "replicas above `min_replicas` are shrunk before whole jobs are
evicted", is the head of the victim order in `actions.reclaim`.
"""

from __future__ import annotations

import heapq

from scheduling.engine.policies import saturation
from scheduling.engine.session import Session
from scheduling.engine.types import RUNNING


def grow(session: Session) -> None:
    cluster = session.cluster
    if cluster.free_total == 0:
        return
    tree = session.tree
    # No growth in a branch where a beneficiary waits for releasing victims: the quota room
    # (a guarantee, for a non-preemptible beneficiary) is promised to it as well.
    waiting_branch = {node for job, p in enumerate(session.promised) if p for node in tree.chain[session.job_leaf[job]]}
    heap: list[tuple[tuple[float, int, float, int], int]] = []
    for job, spec in enumerate(session.jobs):
        if (
            session.state[job] == RUNNING
            and session.job_leaf[job] not in waiting_branch
            and spec.min_replicas is not None
            and len(session.placements[job]) < spec.replicas
            and session.job_leaf[job] >= 0
            and (not session.touched[job] or session.admitted_now[job])
        ):
            leaf = session.job_leaf[job]
            heap.append(
                (
                    (
                        saturation(session.allocated[leaf], session.fair_share[leaf]),
                        -spec.priority,
                        spec.submitted_at,
                        job,
                    ),
                    job,
                )
            )
    heapq.heapify(heap)
    while heap and cluster.free_total > 0:
        _, job = heapq.heappop(heap)
        spec = session.jobs[job]
        leaf = session.job_leaf[job]
        replica = session.replica_milli[job]
        chain = tree.chain[leaf]
        if any(session.allocated[c] + replica > tree.limit[c] for c in chain):
            continue
        if not spec.preemptible and any(session.allocated[c] + replica > tree.admit_guaranteed[c] for c in chain):
            continue
        if session.resources and not grows_within(session, job, chain):
            continue
        pl = cluster.place_replica(replica, spec.cpu, spec.memory_gib, session.spread)
        if pl is None:
            continue
        session.add_replicas(job, 1)
        session.placements[job] = session.placements[job] + (pl,)
        session.grown.setdefault(job, []).append(pl)
        if len(session.placements[job]) < spec.replicas:
            key = (
                saturation(session.allocated[leaf], session.fair_share[leaf]),
                -spec.priority,
                spec.submitted_at,
                job,
            )
            heapq.heappush(heap, (key, job))


def grows_within(session: Session, job: int, chain: tuple[int, ...]) -> bool:
    """One more replica keeps every managed resource within its limits (and, for a
    non-preemptible job, its guarantees) in the chain."""
    for ledger in session.resources:
        amount = ledger.per_replica[job]
        bounds = (ledger.ceiling,) if session.jobs[job].preemptible else (ledger.ceiling, ledger.tree.admit_guaranteed)
        if amount and any(ledger.allocated[c] + amount > bound[c] for bound in bounds for c in chain):
            return False
    return True
