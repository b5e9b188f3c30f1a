"""Consolidation: SCHEDULING.md §3.1, "Consolidation".

When the free GPUs add up for a job but are fragmented, move preemptible running jobs
(restart elsewhere) so that they are not, provided every moved job is placed again at once.
Tried before any eviction (reclaim, preempt), for jobs whose only refusal is capacity.
"""

from __future__ import annotations

from scheduling.engine import bounds
from scheduling.engine.cluster import Placement
from scheduling.engine.fairshare import MILLI
from scheduling.engine.policies import gpu_count, victim_key
from scheduling.engine.session import Session
from scheduling.engine.types import CONSOLIDATION, INSUFFICIENT_CAPACITY, PENDING, RUNNING, Evict


def consolidate(session: Session) -> None:
    cluster = session.cluster
    attempts = 0
    failed_sizes: list[tuple[int, int]] = []
    by_node: dict[int, list[int]] | None = None
    for job in session.tried:
        if attempts >= bounds.MAX_CONSOLIDATIONS or cluster.free_total == 0:
            break
        if session.state[job] != PENDING or session.reasons.get(job, ("",))[0] != INSUFFICIENT_CAPACITY:
            continue
        count = session.admit_count[job]
        if cluster.free_total < session.replica_milli[job] * count:
            continue
        if session.static_refusal(job) is not None:
            continue
        if any(r <= session.replica_milli[job] and c <= count for r, c in failed_sizes):
            continue
        attempts += 1
        if by_node is None:
            by_node = movers_by_node(session)
        if consolidate_for(session, job, count, by_node):
            session.reasons.pop(job, None)
        else:
            failed_sizes.append((session.replica_milli[job], count))


def movable(session: Session, mover: int) -> bool:
    spec = session.jobs[mover]
    return (
        session.state[mover] == RUNNING
        and spec.preemptible
        and not session.touched[mover]
        and bool(session.placements[mover])
        and not session.protected(mover)
    )


def movers_by_node(session: Session) -> dict[int, list[int]]:
    by_node: dict[int, list[int]] = {}
    for mover, pls in enumerate(session.placements):
        if pls and movable(session, mover):
            for pl in pls:
                by_node.setdefault(pl[0], []).append(mover)
    return by_node


def consolidate_for(session: Session, job: int, count: int, by_node: dict[int, list[int]]) -> bool:
    if count == 1 and session.replica_milli[job] >= MILLI and free_one_node(session, job, by_node):
        return True
    return move_anywhere(session, job, count, by_node)


def mover_order(session: Session, mover: int, own_leaf: int) -> tuple[int, int, tuple[int, float, float, int]]:
    return (
        session.replica_milli[mover] * len(session.placements[mover]),
        0 if session.job_leaf[mover] == own_leaf else 1,
        victim_key(session.jobs[mover], mover),
    )


def free_one_node(session: Session, job: int, by_node: dict[int, list[int]]) -> bool:
    """Free one node for a single whole-GPU replica: move its smallest jobs elsewhere.

    Nodes closest to holding the replica are tried first (at most MAX_TARGET_NODES); on each,
    the fewest small movable jobs that leave enough whole devices free are moved, and every
    one of them must be placed again at once.
    """
    cluster = session.cluster
    devices_needed = session.replica_milli[job] // MILLI
    own_leaf = session.job_leaf[job]
    whole = cluster.whole
    # A node's cost: the GPUs of its smallest movable jobs that must leave for the replica to
    # fit. Each mover needs a free block elsewhere, so bigger jobs than the largest block stay.
    block = cluster.largest_block() * MILLI
    room = cluster.free_total - session.replica_milli[job]
    replica = session.replica_milli
    touched = session.touched
    state = session.state
    ranked: list[tuple[int, int, int]] = []
    for node, members in by_node.items():
        if not cluster.ready[node] or cluster.gpus[node] < devices_needed:
            continue
        deficit = devices_needed - whole[node]
        if deficit <= 0:
            ranked.append((0, -whole[node], node))
            continue
        sizes = sorted(
            replica[mover] // MILLI
            for mover in members
            if replica[mover] >= MILLI and replica[mover] <= block and not touched[mover] and state[mover] == RUNNING
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
    targets = [node for _, _, node in ranked[: bounds.MAX_TARGET_NODES]]
    journal = session.journal
    tried = 0
    for node in targets:
        if tried >= bounds.MAX_TARGET_NODES:
            break
        candidates = sorted(
            (mover for mover in set(by_node[node]) if movable(session, mover)),
            key=lambda mover: mover_order(session, mover, own_leaf),
        )
        if not candidates:
            continue
        tried += 1
        mark = journal.checkpoint()
        movers: list[int] = []
        for mover in candidates:
            if whole[node] >= devices_needed or len(movers) >= bounds.MAX_MOVERS:
                break
            movers.append(mover)
            spec = session.jobs[mover]
            for pl in session.placements[mover]:
                cluster.adjust(pl, +1, spec.cpu, spec.memory_gib)
        if whole[node] < devices_needed or place_with_movers(session, job, 1, movers) is None:
            journal.rollback(mark)
            continue
        return True
    return False


def place_with_movers(session: Session, job: int, count: int, movers: list[int]) -> list[Placement] | None:
    """Place the beneficiary, then every mover again, and commit; None (nothing kept) if not."""
    journal = session.journal
    inner = journal.checkpoint()
    placed = session.place_gang(job, count)
    if placed is None:
        return None
    moved: list[tuple[int, list[Placement]]] = []
    for mover in sorted(movers, key=lambda x: (-session.replica_milli[x] * len(session.placements[x]), x)):
        new = session.place_gang(mover, len(session.placements[mover]))
        if new is None:
            journal.rollback(inner)
            return None
        if sorted(new) != sorted(session.placements[mover]):
            moved.append((mover, new))
    ordered = ordered_moves(session, moved)
    if ordered is None:
        journal.rollback(inner)
        return None
    beneficiary = session.jobs[job].id
    reason = (
        f"moved so that {beneficiary} can start: the {gpu_count(session.needs[job])} it needs are free "
        "but fragmented across nodes"
    )
    for mover, new in ordered:
        session.set_journaled(session.touched, mover, True)
        session.decide(Evict(session.jobs[mover].id, CONSOLIDATION, beneficiary, reason))
        session.set_journaled(session.placements, mover, tuple(new))
        session.decide(("move", mover))
    session.admit(job, placed)
    return placed


def ordered_moves(
    session: Session, moved: list[tuple[int, list[Placement]]]
) -> list[tuple[int, list[Placement]]] | None:
    """Moves in an order where each one's target devices are free when it is applied.

    A move that lands on devices another mover leaves comes after that mover (topological
    order, ties in the order given). A cycle of moves (a swap) gives None: the decision is
    dropped rather than listed in an order that cannot be applied.
    """
    if len(moved) < 2:
        return moved
    leaves: dict[tuple[int, int], list[int]] = {}
    for k, (mover, _) in enumerate(moved):
        for node, devices, _milli in session.placements[mover]:
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


def move_anywhere(session: Session, job: int, count: int, by_node: dict[int, list[int]]) -> bool:
    cluster = session.cluster
    own_leaf = session.job_leaf[job]
    # Jobs on the nodes closest to holding a replica first; small jobs, the beneficiary's
    # own quota, low priority and recent starts move before others.
    candidates: list[tuple[tuple[int, int, int, tuple[int, float, float, int]], int]] = []
    seen: set[int] = set()
    nodes = sorted(by_node, key=lambda nd: (-cluster.whole[nd], nd))
    for node in nodes:
        if len(candidates) >= 4 * bounds.MAX_MOVERS:
            break
        for mover in by_node[node]:
            if mover in seen or not movable(session, mover):
                continue
            seen.add(mover)
            key = (-cluster.whole[node], *mover_order(session, mover, own_leaf))
            candidates.append((key, mover))
    candidates.sort()
    journal = session.journal
    mark = journal.checkpoint()
    movers: list[int] = []
    for _, mover in candidates[: 4 * bounds.MAX_MOVERS]:
        if len(movers) >= bounds.MAX_MOVERS:
            break
        movers.append(mover)
        spec = session.jobs[mover]
        for pl in session.placements[mover]:
            cluster.adjust(pl, +1, spec.cpu, spec.memory_gib)
        if place_with_movers(session, job, count, movers) is not None:
            return True
    journal.rollback(mark)
    return False
