"""One scheduling cycle: a session over a frozen snapshot, actions in KAI-Scheduler's order.

drain -> allocate -> consolidate -> reclaim/preempt (victims of every kind combined) -> elastic grow.
Each action is a function over the session (`scheduling.engine.actions`); the session keeps
the working state and a journal, so that a victim search can try evictions and roll them back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scheduling.engine.actions.allocate import allocate
from scheduling.engine.actions.consolidate import consolidate
from scheduling.engine.actions.drain import drain
from scheduling.engine.actions.grow import grow
from scheduling.engine.actions.reclaim import reclaim_and_preempt
from scheduling.engine.explain import pending_reasons
from scheduling.engine.fairshare import MILLI
from scheduling.engine.pools import merge, single_pool, split_by_pool
from scheduling.engine.session import Session
from scheduling.engine.status import quota_status
from scheduling.engine.types import (
    SHRINK,
    Admit,
    CycleResult,
    Decision,
    Evict,
    Grow,
    ReplicaPlacement,
    Shrink,
    Snapshot,
)

ACTIONS: tuple[Callable[[Session], None], ...] = (drain, allocate, consolidate, reclaim_and_preempt, grow)


def schedule(snapshot: Snapshot) -> CycleResult:
    """Run one cycle over the snapshot and return the decisions, in the order to apply them.

    Each resource pool is scheduled on its own over its part of the snapshot (engine.pools).
    """
    if single_pool(snapshot):
        return schedule_pool(snapshot)
    return merge([schedule_pool(part) for _pool, part in split_by_pool(snapshot)])


def schedule_pool(snapshot: Snapshot) -> CycleResult:
    """One cycle over a snapshot of one pool."""
    session = Session(snapshot)
    for action in ACTIONS:
        action(session)
    decided = result(session)
    # The journal's undo entries point back at the session: dropped, the session's arrays (150,000
    # entries each at S4) go when it does instead of waiting for the collector to find the cycle.
    session.journal.entries.clear()
    return decided


def replica_placements(session: Session, job: int, placements: Any) -> tuple[ReplicaPlacement, ...]:
    names = session.cluster.names
    out = []
    for node, devices, milli in placements:
        fraction = 1.0 if milli >= MILLI else milli / MILLI
        out.append(ReplicaPlacement(names[node], devices, fraction))
    return tuple(out)


def result(session: Session) -> CycleResult:
    decisions: list[Decision] = []
    jobs = session.jobs
    for entry in session.decisions:
        if isinstance(entry, Evict):
            decisions.append(entry)
            continue
        kind = entry[0]
        job = entry[1]
        if kind == "admit" or kind == "move":
            decisions.append(Admit(jobs[job].id, replica_placements(session, job, session.placements[job])))
        elif kind == "shrink":
            removed = replica_placements(session, job, entry[2])
            decisions.append(Shrink(jobs[job].id, removed, SHRINK, entry[4], entry[3]))
    for job in sorted(session.grown):
        if session.admitted_now[job]:
            continue
        decisions.append(Grow(jobs[job].id, replica_placements(session, job, session.grown[job])))
    return CycleResult(decisions=tuple(decisions), quotas=quota_status(session), pending=pending_reasons(session))
