"""The rules of SCHEDULING.md §1–§3 asked of each managed resource (engine.resources): within a
bound at a chain of quotas, the victim's side of reclaim and same-level preemption, the order of
victims and of quotas, and the status figures. GPU-only pools (no ledger) answer at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduling.engine.fairshare import MILLI, NO_LIMIT, subtree_requests
from scheduling.engine.policies import gpu_count, gpus, saturation
from scheduling.engine.resources import CEILING, FAIR_SHARE, GUARANTEE, NOUN, OWN_GUARANTEE, UNIT
from scheduling.engine.session import Session
from scheduling.engine.types import CHILD_PREEMPTION, RECLAIM, RELEASING, RUNNING, ResourceStatus


def within(session: Session, job: int, nodes: Sequence[int], kind: int) -> bool:
    """With the job admitted, every managed resource it asks for stays within `kind` at `nodes`."""
    for ledger in session.resources:
        need = ledger.needs[job]
        if not need:
            continue
        alloc = ledger.allocated
        bound = ledger.bounds[kind]
        for node in nodes:
            if alloc[node] + need > bound[node]:
                return False
    return True


def victim_over(session: Session, job: int, victim: int, amount: int, branch: int, kind: int) -> bool:
    """The victim's branch is over its bound in GPUs, or in a managed resource the job asks for
    and the victim holds: above its guarantee (GUARANTEE), or at or above its fair share once
    the victim's `amount` milli-GPUs (and the CPU and memory of those replicas) are gone
    (FAIR_SHARE). KAI-Scheduler's reclaim strategies: the reclaimee need be over in one
    resource only."""
    if kind == FAIR_SHARE and session.allocated[branch] - amount >= session.fair_share[branch]:
        return True
    if kind == GUARANTEE and session.allocated[branch] > session.tree.admit_guaranteed[branch]:
        return True
    if not session.resources:
        return False
    count = amount // session.replica_milli[victim]
    for ledger in session.resources:
        amount = ledger.per_replica[victim] * count
        if not amount or not ledger.needs[job]:
            continue
        alloc = ledger.allocated[branch]
        if kind == FAIR_SHARE and alloc - amount >= ledger.fair_share[branch]:
            return True
        if kind == GUARANTEE and alloc > ledger.tree.admit_guaranteed[branch]:
            return True
    return False


def keeps_guarantee(session: Session, victim: int, amount: int, quota: int) -> bool:
    """Same-level preemption: the victim's quota keeps its guarantee of every managed resource
    once the victim's `amount` milli-GPUs (those replicas' CPU and memory) are gone."""
    count = amount // session.replica_milli[victim]
    for ledger in session.resources:
        amount = ledger.per_replica[victim] * count
        if amount and ledger.allocated[quota] - amount < ledger.tree.admit_guaranteed[quota]:
            return False
    return True


def excess(session: Session, leaf: int) -> float:
    """How far a leaf is over its fair share in the resource where it is furthest over, each
    resource as a part of the pool's capacity (victims come from the furthest first)."""
    figures = session.resources
    if not figures:
        return session.allocated[leaf] - session.fair_share[leaf]  # GPUs only: milli-GPUs will do
    figures.refresh(session)
    return figures.excess[leaf]


def beneficiary_within(
    session: Session, job: int, chain: Sequence[int], taken: Sequence[tuple[Any, tuple[str, int, str]]]
) -> bool:
    """The beneficiary's side of every rule, per managed resource (actions.reclaim checks the
    GPUs): its limits, its guarantees if it is non-preemptible, and the bound of each rule
    that chose one of its victims."""
    if not within(session, job, chain, CEILING):
        return False
    if not session.jobs[job].preemptible and not within(session, job, chain, GUARANTEE):
        return False
    for _unit, (rule, level, variant) in taken:
        if rule == RECLAIM:
            kind = FAIR_SHARE if variant == "fair_share" else GUARANTEE
            if not within(session, job, chain[: level + 1], kind):
                return False
        elif rule == CHILD_PREEMPTION and not within(session, job, (session.tree.parent[chain[0]],), OWN_GUARANTEE):
            return False
    return True


def over_figure(session: Session, victim: int, branch: int, variant: str) -> str:
    """The figure a reclaim's sentence quotes: the victim branch's fair share (or guarantee) in
    the first resource, GPUs first, where it held more than that and the victim held some."""
    fair = variant == "fair_share"
    share = session.fair_share[branch] if fair else session.tree.admit_guaranteed[branch]
    held_gpus = session.replica_milli[victim] * len(session.placements[victim])
    if session.allocated[branch] + held_gpus > share or not session.resources:
        return gpu_count(share)
    for ledger in session.resources:
        bound = ledger.fair_share[branch] if fair else ledger.tree.admit_guaranteed[branch]
        held = ledger.per_replica[victim] * len(session.placements[victim])
        if held and ledger.allocated[branch] + held > bound:
            return f"{gpus(bound)} {UNIT[ledger.name]} of {NOUN[ledger.name]}"
    return gpu_count(share)


def excess_entries(session: Session, leaves: Sequence[int]) -> list[tuple[float, int, int]]:
    """(−excess, created, leaf) of each leaf: the victim order's heap entries. Inline for GPUs
    only, since a cycle ranks thousands of leaves many times; cached per leaf otherwise."""
    created = session.tree.created
    figures = session.resources
    if not figures:
        alloc, share = session.allocated, session.fair_share
        return [(-(alloc[v] - share[v]), created[v], v) for v in leaves]
    figures.refresh(session)
    entry = figures.entry
    return [(entry[v], created[v], v) for v in leaves]


def dominant_saturation(session: Session, leaf: int) -> float:
    """allocated ÷ fair share in the resource where it is highest (KAI orders queues by their
    dominant resource): a quota that used up its CPU share is served after one that has not."""
    figures = session.resources
    if not figures:
        return saturation(session.allocated[leaf], session.fair_share[leaf])
    figures.refresh(session)
    return figures.saturation[leaf]


def statuses(session: Session) -> list[dict[str, ResourceStatus]]:
    """Per tree node, each managed resource's figures; what releasing jobs hold counts as allocated."""
    size = len(session.tree)
    out: list[dict[str, ResourceStatus]] = [{} for _ in range(size)]
    # (leaf, job, replicas held) of each job holding some, the same in every resource
    state, placements, held = session.state, session.placements, session.held
    holding = [
        (leaf, job, len(placements[job]) if state[job] == RUNNING else len(held[job]))
        for job, leaf in enumerate(session.job_leaf)
        if leaf >= 0 and (placements[job] or held[job]) and (state[job] == RUNNING or state[job] == RELEASING)
    ]
    for ledger in session.resources:
        held_by_leaf = [0] * size
        per_replica = ledger.per_replica
        for leaf, job, count in holding:
            held_by_leaf[leaf] += per_replica[job] * count
        own = held_by_leaf
        subtree = subtree_requests(ledger.tree, own)
        tree = ledger.tree
        name = ledger.name
        fair_share, guaranteed, limit = ledger.fair_share, tree.guaranteed, tree.limit
        leaf_of, names = tree.leaf_of, tree.names
        for node in range(size):
            out[node][name] = ResourceStatus(
                fair_share=fair_share[node] / MILLI,
                allocated=subtree[node] / MILLI,
                guaranteed=guaranteed[node] / MILLI,
                limit=None if limit[node] == NO_LIMIT else limit[node] / MILLI,
                allocated_self=own[leaf_of.get(names[node], node)] / MILLI,
            )
    return out
