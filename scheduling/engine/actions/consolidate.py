"""Consolidation: SCHEDULING.md §3.1, "Consolidation".

When the free GPUs add up for a job but are fragmented, move preemptible running jobs
(restart elsewhere) so that they are not, provided every moved job is placed again at once.
Tried before any eviction (reclaim, preempt), for jobs whose only refusal is capacity.

As few jobs as possible move (§3.1; KAI-Scheduler tries the fewest victims first), since each
move restarts a job: one whole-GPU replica gets the node whose fewest movers free it
(`free_one_node`, sets tried fewest first); anything else (gangs, fractions, several replicas)
takes movers in order until it fits, then leaves in place each mover it can do without
(`without_needless_movers`). A mover may itself be a gang: all its replicas move at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from itertools import combinations

from scheduling.engine import bounds
from scheduling.engine.actions import reserve
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
    most_attempts = bounds.share_of(bounds.MAX_CONSOLIDATIONS, session.snapshot.bound_share)
    for job in session.tried:
        if attempts >= most_attempts or (cluster.free_total == 0 and not reserve.open_to(session, reserve.GUARANTEED)):
            break
        if session.state[job] != PENDING or session.reasons.get(job, ("",))[0] != INSUFFICIENT_CAPACITY:
            continue
        count = session.admit_count[job]
        if not reserve.room_for(session, job):
            continue
        if session.static_refusal(job) is not None:
            continue
        if any(r <= session.replica_milli[job] and c <= count for r, c in failed_sizes):
            continue
        attempts += 1
        if by_node is None:
            by_node = movers_by_node(session)
        if reserve.with_reservations(session, job, partial(consolidate_for, session, job, count, by_node)):
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
    """Free one node for a single whole-GPU replica, moving as few jobs as possible.

    Nodes are ranked by the fewest moves that could free enough whole devices there, then by
    the GPUs those moves take (at most MAX_TARGET_NODES are tried). On each, sets of movers are
    tried fewest jobs first (`sets_freeing`), and every mover of a set must be placed again at
    once. Moving fewest first is KAI-Scheduler's order too: a move restarts a job.
    """
    cluster = session.cluster
    devices_needed = session.replica_milli[job] // MILLI
    own_leaf = session.job_leaf[job]
    whole = cluster.whole
    # Each mover needs a free block elsewhere, so jobs bigger than the largest block stay; and
    # what the movers take must fit in what the replica leaves free.
    block = cluster.largest_block() * MILLI
    room = cluster.free_total - session.replica_milli[job]
    replica = session.replica_milli
    touched = session.touched
    state = session.state
    ranked: list[tuple[int, int, int, int]] = []
    for node, members in by_node.items():
        if not cluster.ready[node] or cluster.gpus[node] < devices_needed:
            continue
        deficit = devices_needed - whole[node]
        if deficit <= 0:
            ranked.append((0, 0, -whole[node], node))
            continue
        sizes = sorted(
            (
                replica[mover] // MILLI
                for mover in members
                if MILLI <= replica[mover] <= block and not touched[mover] and state[mover] == RUNNING
            ),
            reverse=True,
        )
        # The fewest moves: biggest jobs first, skipping any whose GPUs would not fit in `room`
        # (inline: this loop runs for every node on each attempt).
        moves = cost = 0
        for size in sizes:
            if cost + size * MILLI > room:
                continue
            moves += 1
            cost += size * MILLI
            deficit -= size
            if deficit <= 0:
                ranked.append((moves, cost, -whole[node], node))
                break
    ranked.sort()
    targets = [node for *_, node in ranked[: bounds.MAX_TARGET_NODES]]
    journal = session.journal
    tried = 0
    for node in targets:
        if tried >= bounds.MAX_TARGET_NODES:
            break
        candidates = sorted(
            (mover for mover in set(by_node[node]) if movable(session, mover) and replica[mover] <= block),
            key=lambda mover: mover_order(session, mover, own_leaf),
        )
        if not candidates:
            continue
        tried += 1
        for movers in sets_freeing(session, node, devices_needed, candidates):
            mark = journal.checkpoint()
            for mover in movers:
                release(session, mover)
            if whole[node] >= devices_needed and place_with_movers(session, job, 1, movers) is not None:
                return True
            journal.rollback(mark)
    return False


def sets_freeing(session: Session, node: int, devices_needed: int, candidates: list[int]) -> Iterator[list[int]]:
    """Sets of candidates whose leaving gives `node` the whole devices needed: fewest jobs
    first, then in the candidates' order; at most MAX_MOVE_SETS sets are looked at."""
    free = session.cluster.dev_free[node]
    have = session.cluster.whole[node]
    usage = [
        [(d, milli) for where, devices, milli in session.placements[mover] if where == node for d in devices]
        for mover in candidates
    ]
    # No set smaller than the fewest of the biggest holders can be enough: start there.
    holdings = sorted((len({d for d, _ in held}) for held in usage), reverse=True)
    smallest, covered = 0, have
    for held in holdings:
        if covered >= devices_needed:
            break
        smallest += 1
        covered += held
    if covered < devices_needed:
        return
    looked = 0
    for size in range(max(1, smallest), min(len(candidates), bounds.MAX_MOVERS) + 1):
        for chosen in combinations(range(len(candidates)), size):
            looked += 1
            if looked > bounds.MAX_MOVE_SETS:
                return
            released: dict[int, int] = {}
            for k in chosen:
                for d, milli in usage[k]:
                    released[d] = released.get(d, 0) + milli
            gained = sum(1 for d, milli in released.items() if free[d] < MILLI <= free[d] + milli)
            if have + gained >= devices_needed:
                yield [candidates[k] for k in chosen]


def release(session: Session, mover: int) -> None:
    """Give the mover's GPUs back to the cluster, as if it had left (journaled)."""
    spec = session.jobs[mover]
    for pl in session.placements[mover]:
        session.cluster.adjust(pl, +1, spec.cpu, spec.memory_gib)


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
    found = False
    for _, mover in candidates[: 4 * bounds.MAX_MOVERS]:
        if len(movers) >= bounds.MAX_MOVERS:
            break
        movers.append(mover)
        release(session, mover)
        trial = journal.checkpoint()
        found = place_with_movers(session, job, count, movers) is not None
        if found and len(movers) == 1:
            return True  # one move: none fewer
        journal.rollback(trial)
        if found:
            break
    journal.rollback(mark)
    if not found:
        return False
    movers = without_needless_movers(session, job, count, movers)
    for mover in movers:
        release(session, mover)
    if place_with_movers(session, job, count, movers) is None:  # the same state as the trial
        journal.rollback(mark)
        return False
    return True


def without_needless_movers(session: Session, job: int, count: int, movers: list[int]) -> list[int]:
    """The movers the job cannot do without, as few as a first-come set allows: each is left
    in place in turn, last added first, and stays if the job and the others still fit."""
    journal = session.journal
    kept = list(movers)
    for mover in reversed(movers):
        if len(kept) == 1:
            break
        others = [m for m in kept if m != mover]
        mark = journal.checkpoint()
        for other in others:
            release(session, other)
        fits = place_with_movers(session, job, count, others) is not None
        journal.rollback(mark)
        if fits:
            kept = others
    return kept
