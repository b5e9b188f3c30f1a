"""Per-quota figures at the end of a cycle: guaranteed, fair share (SCHEDULING.md §1, "Fair
share"), allocated (subtree and own jobs), saturation, running and pending counts; the same
figures of CPU and memory where the pool manages them (`QuotaStatus.resources`).
"""

from __future__ import annotations

from scheduling.engine.fairshare import MILLI, subtree_requests
from scheduling.engine.policies import saturation
from scheduling.engine.pools import single_pool, split_by_pool
from scheduling.engine.resource_rules import statuses as resource_statuses
from scheduling.engine.session import Session
from scheduling.engine.types import RELEASING, RUNNING, QuotaStatus, Snapshot, new_quota_status


def snapshot_statuses(snapshot: Snapshot) -> dict[str, QuotaStatus]:
    """Every quota's figures on a snapshot as it stands, without a cycle's decisions (each
    pool on its own): what `simulate` and the pages show between cycles."""
    if single_pool(snapshot):
        return quota_status(Session(snapshot))
    statuses: dict[str, QuotaStatus] = {}
    for _pool, part in split_by_pool(snapshot):
        statuses.update(quota_status(Session(part)))
    return statuses


def quota_status(session: Session) -> dict[str, QuotaStatus]:
    tree = session.tree
    size = len(tree)
    held = [0] * size
    running = [0] * size
    pending = [0] * size
    for leaf, now, milli, placed, kept in zip(
        session.job_leaf, session.state, session.replica_milli, session.placements, session.held, strict=True
    ):
        if leaf < 0:
            continue
        if now == RUNNING:
            held[leaf] += milli * len(placed)
            running[leaf] += 1
        elif now == RELEASING:
            held[leaf] += milli * len(kept)
            running[leaf] += 1
        else:
            pending[leaf] += 1
    own = list(held)
    held = subtree_requests(tree, held)
    running = subtree_requests(tree, running)
    pending = subtree_requests(tree, pending)
    statuses: dict[str, QuotaStatus] = {}
    share = session.fair_share
    guaranteed = tree.guaranteed
    leaf_of = tree.leaf_of
    # CPU and memory where the pool manages them (engine.resources); none: GPUs only
    resources = resource_statuses(session) if session.resources else None
    for name, node in tree.index.items():
        statuses[name] = new_quota_status(
            share[node] / MILLI,
            held[node] / MILLI,
            own[leaf_of.get(name, node)] / MILLI,
            saturation(held[node], share[node]),
            running[node],
            pending[node],
            guaranteed[node] / MILLI,
            resources[node] if resources is not None else {},
        )
    return statuses
