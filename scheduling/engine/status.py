"""Per-quota figures at the end of a cycle: guaranteed, fair share (SCHEDULING.md §1, "Fair
share"), allocated (subtree and own jobs), saturation, running and pending counts.
"""

from __future__ import annotations

from scheduling.engine.fairshare import MILLI, subtree_requests
from scheduling.engine.policies import saturation
from scheduling.engine.session import Session
from scheduling.engine.types import RELEASING, RUNNING, QuotaStatus


def quota_status(session: Session) -> dict[str, QuotaStatus]:
    tree = session.tree
    size = len(tree)
    held = [0] * size
    running = [0] * size
    pending = [0] * size
    replica = session.replica_milli
    for job, leaf in enumerate(session.job_leaf):
        if leaf < 0:
            continue
        state = session.state[job]
        if state == RUNNING:
            held[leaf] += replica[job] * len(session.placements[job])
            running[leaf] += 1
        elif state == RELEASING:
            held[leaf] += replica[job] * len(session.held[job])
            running[leaf] += 1
        else:
            pending[leaf] += 1
    own = list(held)
    held = subtree_requests(tree, held)
    running = subtree_requests(tree, running)
    pending = subtree_requests(tree, pending)
    statuses: dict[str, QuotaStatus] = {}
    share = session.fair_share
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
