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
    waiting_branch = {node for i, p in enumerate(session.promised) if p for node in tree.chain[session.leaf[i]]}
    heap: list[tuple[tuple[float, int, float, int], int]] = []
    for m, job in enumerate(session.jobs):
        if (
            session.state[m] == RUNNING
            and session.leaf[m] not in waiting_branch
            and job.min_replicas is not None
            and len(session.placements[m]) < job.replicas
            and session.leaf[m] >= 0
            and (not session.touched[m] or session.admitted_now[m])
        ):
            lf = session.leaf[m]
            heap.append(((saturation(session.alloc[lf], session.share[lf]), -job.priority, job.submitted_at, m), m))
    heapq.heapify(heap)
    while heap and cluster.free_total > 0:
        _, m = heapq.heappop(heap)
        job = session.jobs[m]
        lf = session.leaf[m]
        replica = session.replica[m]
        chain = tree.chain[lf]
        if any(session.alloc[c] + replica > tree.limit[c] for c in chain):
            continue
        if not job.preemptible and any(session.alloc[c] + replica > tree.admit_guaranteed[c] for c in chain):
            continue
        pl = cluster.place_replica(replica, job.cpu, job.memory_gib, session.spread)
        if pl is None:
            continue
        session.add_allocated(lf, replica)
        session.placements[m] = session.placements[m] + (pl,)
        session.grown.setdefault(m, []).append(pl)
        if len(session.placements[m]) < job.replicas:
            key = (saturation(session.alloc[lf], session.share[lf]), -job.priority, job.submitted_at, m)
            heapq.heappush(heap, (key, m))
