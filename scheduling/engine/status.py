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
    replica = session.replica
    for m, lf in enumerate(session.leaf):
        if lf < 0:
            continue
        state = session.state[m]
        if state == RUNNING:
            held[lf] += replica[m] * len(session.placements[m])
            running[lf] += 1
        elif state == RELEASING:
            held[lf] += replica[m] * len(session.held[m])
            running[lf] += 1
        else:
            pending[lf] += 1
    own = list(held)
    held = subtree_requests(tree, held)
    running = subtree_requests(tree, running)
    pending = subtree_requests(tree, pending)
    statuses: dict[str, QuotaStatus] = {}
    share = session.share
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
