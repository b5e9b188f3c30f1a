"""Reclaim: SCHEDULING.md §3.2, "Reclaim (between quotas)", its "fair-share rule" and its
"guarantee rule"; and the victim search that every rule of §3 shares.

For a pending job that is entitled but does not fit, victims are looked for in simulation on
the session (nothing is evicted unless the job then fits), in this order: elastic replicas
above `min_replicas` (§2, "Elastic jobs": shrunk before whole jobs are evicted), reclaim from
the quota furthest above its fair share, then the preemption rules (`actions.preempt`). One
decision may combine victims of several kinds, each meeting the rule of its kind; then the
victims the job can do without are given back ("Take the fewest GPUs that make the job fit").
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from scheduling.engine import bounds
from scheduling.engine.actions.preempt import in_quota_rule, preemption_candidates, preemption_reason, preemption_rule
from scheduling.engine.cluster import Placement
from scheduling.engine.policies import RULE_ORDER, gpu_count, victim_key
from scheduling.engine.session import Session, Unit
from scheduling.engine.types import (
    CHILD_PREEMPTION,
    EXCEEDS_CLUSTER,
    PENDING,
    QUEUE_BLOCKED,
    RECLAIM,
    RELEASING,
    RUNNING,
    UNKNOWN_QUOTA,
    WAITING_FOR_EVICTION,
    Evict,
)

# Failures that a victim search cannot cure.
_NO_SEARCH = (UNKNOWN_QUOTA, EXCEEDS_CLUSTER, QUEUE_BLOCKED, WAITING_FOR_EVICTION)


def reclaim_and_preempt(session: Session) -> None:
    tree = session.tree
    session.candidates_by_leaf = {}
    # Jobs placed or moved earlier in this cycle (touched) and jobs within their min runtime
    # stay out for the whole cycle: leaving them in made every search walk past them.
    for m, job in enumerate(session.jobs):
        if (
            session.state[m] == RUNNING
            and job.preemptible
            and session.leaf[m] >= 0
            and not session.touched[m]
            and not session.protected(m)
        ):
            session.candidates_by_leaf.setdefault(session.leaf[m], []).append(m)
    for members in session.candidates_by_leaf.values():
        members.sort(key=lambda m: victim_key(session.jobs[m], m))
    session.candidate_leaves = sorted(session.candidates_by_leaf)
    session.elastic = [
        m
        for m, job in enumerate(session.jobs)
        if session.state[m] == RUNNING
        and job.preemptible
        and job.min_replicas is not None
        and len(session.placements[m]) > job.min_replicas
        and session.leaf[m] >= 0
    ]
    if not session.candidates_by_leaf:
        return
    session.ranked = {}
    session.ranked_generation = -1
    found = 0
    missed_candidates = 0
    failed: dict[int, list[tuple[int, int, int]]] = {}
    blocked_fifo: set[int] = set()
    for i in session.tried:
        if found >= bounds.MAX_VICTIM_SEARCHES or missed_candidates >= bounds.MAX_FAILED_CANDIDATES:
            break
        if session.state[i] != PENDING or session.promised[i]:
            continue
        code = session.reasons.get(i, ("",))[0]
        if code in _NO_SEARCH:
            continue
        lf = session.leaf[i]
        if tree.fifo[lf]:
            if lf in blocked_fifo:
                continue
            blocked_fifo.add(lf)
        job = session.jobs[i]
        signature = (job.priority, session.replica[i], session.count[i])
        if any(p >= signature[0] and r <= signature[1] and c <= signature[2] for p, r, c in failed.get(lf, ())):
            continue
        if not may_search(session, i):
            continue
        success, examined = search_victims(session, i)
        if success:
            found += 1
            if session.state[i] == RUNNING:
                session.reasons.pop(i, None)
        else:
            missed_candidates += max(1, examined)
            failed.setdefault(lf, []).append(signature)


def may_search(session: Session, i: int) -> bool:
    job = session.jobs[i]
    lf = session.leaf[i]
    tree = session.tree
    need = session.needs[i]
    if session.alloc[lf] + need <= max(session.share[lf], tree.admit_guaranteed[lf]):
        return True
    own = session.candidates_by_leaf.get(lf, ())
    if own and session.jobs[own[0]].priority < job.priority:
        return True
    quota = tree.index[job.quota]
    if tree.is_self[lf] and tree.child_preemption[quota]:
        return True
    return tree.same_level[quota]


def reclaim_region(session: Session, i: int) -> tuple[tuple[int, int], int]:
    """Where reclaim may take from, as a slice of `candidate_leaves` (job i's own leaf is in
    it and skipped by `_stream`), and the highest chain index where Q is entitled."""
    tree = session.tree
    lf = session.leaf[i]
    chain = tree.chain[lf]
    need = session.needs[i]
    alloc = session.alloc
    top = -1
    for level, node in enumerate(chain):
        entitled = alloc[node] + need <= session.share[node]
        entitled = entitled or alloc[node] + need <= tree.admit_guaranteed[node]
        if not entitled:
            break
        top = level
    if top < 0:
        return (0, 0), top
    if top + 1 < len(chain):
        root = chain[top + 1]
        lo, hi = root, session.end[root]
    else:
        lo, hi = 0, len(tree)
    leaves = session.candidate_leaves
    return (bisect_left(leaves, lo), bisect_left(leaves, hi)), top


def leaves_by_excess(session: Session, region: tuple[int, int]) -> list[tuple[float, int, int]]:
    """The region's leaves as a heap, the one furthest above its fair share on top.

    Built once per region and allocation state, and copied for each search: searches that
    find nothing roll back to the same state, and a cycle may run hundreds of them over the
    same thousand leaves.
    """
    if session.ranked_generation != session.alloc_generation:
        session.ranked.clear()
        session.ranked_generation = session.alloc_generation
    heap = session.ranked.get(region)
    if heap is None:
        alloc, share, created = session.alloc, session.share, session.tree.created
        start, stop = region
        heap = [(-(alloc[v] - share[v]), created[v], v) for v in session.candidate_leaves[start:stop]]
        heapq.heapify(heap)
        session.ranked[region] = heap
    return heap.copy()


def branches_below_lca(session: Session, qleaf: int, vleaf: int) -> tuple[int, int]:
    """(position in Q's chain of Q's branch, V's branch) just below their LCA."""
    tree = session.tree
    qchain = tree.chain[qleaf]
    previous = vleaf
    for node in tree.chain[vleaf]:
        if node in qchain:
            return qchain.index(node) - 1, previous
        previous = node
    return len(qchain) - 1, previous


def victim_rule(session: Session, i: int, m: int, amount: int, only: str | None = None) -> tuple[str, int, str] | None:
    """Which rule lets job i take `amount` GPUs of job m now: (rule, Q branch level, variant).

    `only` restricts the answer to the rule whose stream offered the victim, so that the
    order of preference between rules holds.
    """
    tree = session.tree
    job = session.jobs[i]
    victim = session.jobs[m]
    qleaf = session.leaf[i]
    vleaf = session.leaf[m]
    alloc = session.alloc
    share = session.share
    need = session.needs[i]
    if vleaf == qleaf:
        return in_quota_rule(session, i, m, only)
    level, vbranch = branches_below_lca(session, qleaf, vleaf)
    qchain = tree.chain[qleaf]
    if only not in (None, RECLAIM):
        return preemption_rule(session, i, m, amount, only)
    lca = tree.parent[vbranch]
    if lca >= 0 and tree.child_preemption[lca] and (tree.is_self[vbranch] or tree.is_self[qchain[level]]):
        # Under child_preemption the parent's own jobs rank above its children: only the
        # child-level rule moves GPUs between them, never fair share or guarantees.
        return preemption_rule(session, i, m, amount, only)
    within_share = all(alloc[c] + need <= share[c] for c in qchain[: level + 1])
    # With same_level_preemption on the victim's side, priority beats fair share between
    # siblings: a lower-priority job may not take back what a same-level eviction won.
    priority_shield = tree.same_level[vbranch] and victim.priority > job.priority
    if within_share and not priority_shield and alloc[vbranch] - amount >= share[vbranch]:
        return (RECLAIM, level, "fair_share")
    within_guarantee = all(alloc[c] + need <= tree.admit_guaranteed[c] for c in qchain[: level + 1])
    if within_guarantee and alloc[vbranch] > tree.admit_guaranteed[vbranch]:
        return (RECLAIM, level, "guarantee")
    if only is None:
        return preemption_rule(session, i, m, amount, None)
    return None


def victim_candidates(session: Session, i: int, region: tuple[int, int]) -> Iterator[tuple[Unit, str | None]]:
    """Victim units in order of preference: elastic replicas, then whole jobs by rule."""
    qleaf = session.leaf[i]
    start, stop = region
    leaves = session.candidate_leaves
    lo, hi = (leaves[start], leaves[stop - 1]) if stop > start else (0, -1)

    def over(v: int) -> float:
        return session.alloc[v] - session.share[v] if lo <= v <= hi and v != qleaf else 0

    shrinkable: list[tuple[tuple[Any, ...], int]] = []
    for m in session.elastic:
        if session.touched[m] or session.protected(m):
            continue
        rule = victim_rule(session, i, m, session.replica[m])
        if rule is None:
            continue
        vleaf = session.leaf[m]
        key = (RULE_ORDER[rule[0]], -over(vleaf), victim_key(session.jobs[m], m))
        shrinkable.append((key, m))
    shrinkable.sort()
    for _, m in shrinkable:
        minimum = session.jobs[m].min_replicas or 0
        while not session.touched[m] and len(session.placements[m]) > minimum:
            before = len(session.placements[m])
            yield (m, session.placements[m][-1]), None
            if len(session.placements[m]) == before:
                break
    # Reclaim: the quota furthest above its fair share first, re-ranked after each victim.
    cursor: dict[int, int] = {}
    heap = leaves_by_excess(session, region)
    while heap:
        _, created, v = heapq.heappop(heap)
        if v == qleaf:
            continue
        members = session.candidates_by_leaf[v]
        position = cursor.get(v, 0)
        while position < len(members):
            m = members[position]
            position += 1
            if session.eligible_victim(m):
                cursor[v] = position
                yield (m, None), RECLAIM
                break
        cursor[v] = position
        if position < len(members):
            heapq.heappush(heap, (-(session.alloc[v] - session.share[v]), created, v))
    yield from preemption_candidates(session, i)


def fits_with_victims(
    session: Session, i: int, taken: list[tuple[Unit, tuple[str, int, str]]]
) -> list[Placement] | None:
    """Beneficiary-side conditions on the current state, then a gang placement."""
    tree = session.tree
    lf = session.leaf[i]
    need = session.needs[i]
    alloc = session.alloc
    chain = tree.chain[lf]
    guard = session.guard
    for node in chain:
        if alloc[node] + need > tree.limit[node] or alloc[node] + need > guard[node]:
            return None
    if not session.jobs[i].preemptible:
        for node in chain:
            if alloc[node] + need > tree.admit_guaranteed[node]:
                return None
    for _, (rule, level, variant) in taken:
        if rule == RECLAIM:
            bound = session.share if variant == "fair_share" else tree.admit_guaranteed
            if any(alloc[c] + need > bound[c] for c in chain[: level + 1]):
                return None
        elif rule == CHILD_PREEMPTION:
            parent = tree.parent[lf]
            if alloc[parent] + need > tree.guaranteed[parent]:
                return None
    if session.cluster.free_total < need:
        return None
    return session.place_gang(i, session.count[i])


def search_victims(session: Session, i: int) -> tuple[bool, int]:
    """Whether victims were found (and committed) for job i, and how many candidates it examined."""
    journal = session.journal
    mark = journal.checkpoint()
    generation = session.alloc_generation
    region, _ = reclaim_region(session, i)
    taken: list[tuple[Unit, tuple[str, int, str]]] = []
    examined = 0
    placed: list[Placement] | None = None
    for unit, only in victim_candidates(session, i, region):
        examined += 1
        if examined > bounds.MAX_CANDIDATES_PER_SEARCH:
            break
        m, replica_placement = unit
        amount = session.replica[m] * (1 if replica_placement else len(session.placements[m]))
        rule = victim_rule(session, i, m, amount, only)
        if rule is None:
            continue
        before = session.placements[m]
        session.take_victim(unit)
        taken.append((unit, rule))
        del before
        inner = journal.checkpoint()
        placed = fits_with_victims(session, i, taken)
        if placed is not None:
            journal.rollback(inner)
            break
    if placed is None:
        journal.rollback(mark)
        session.alloc_generation = generation  # the very state the search began from
        return False, examined
    # Fewest GPUs: give back every victim the job can do without, latest taken first.
    kept: list[tuple[Unit, tuple[str, int, str]]] = []
    for position in range(len(taken) - 1, -1, -1):
        unit, rule = taken[position]
        m, replica_placement = unit
        others = kept + taken[:position]
        restore = journal.checkpoint()
        original = held_by_unit(session, m, unit)
        session.give_back_victim(unit, original)
        inner = journal.checkpoint()
        if fits_with_victims(session, i, others) is not None:
            journal.rollback(inner)
            continue
        journal.rollback(restore)
        kept.append((unit, rule))
    kept.reverse()
    placed = fits_with_victims(session, i, kept)
    if placed is None:  # cannot happen: the full set fitted; keep the snapshot safe
        journal.rollback(mark)
        return False, examined
    commit_victims(session, i, kept, placed)
    return True, examined


def held_by_unit(session: Session, m: int, unit: Unit) -> tuple[Placement, ...]:
    if unit[1] is not None:
        return (unit[1],)
    return session.placements[m]


def commit_victims(
    session: Session, i: int, kept: list[tuple[Unit, tuple[str, int, str]]], placed: list[Placement]
) -> None:
    beneficiary = session.jobs[i]
    shrunk: dict[int, list[Placement]] = {}
    shrink_rule: dict[int, str] = {}
    releasing = False
    for (m, replica_placement), (rule, _, variant) in kept:
        if replica_placement is not None:
            shrunk.setdefault(m, []).append(replica_placement)
            shrink_rule.setdefault(m, rule)
            continue
        victim = session.jobs[m]
        reason = victim_reason(session, i, m, rule, variant)
        session.decide(Evict(victim.id, rule, beneficiary.id, reason))
        if victim.grace_seconds > 0:
            releasing = True
            session.set_journaled(session.state, m, RELEASING)
            session.set_journaled(session.held, m, session.placements[m])
    evicted_whole = {m for (m, rp), _ in kept if rp is None}
    for m in sorted(shrunk):
        if m in evicted_whole:
            continue  # the whole job goes; its shrunk replicas go with it
        session.set_journaled(session.touched, m, True)
        rule = shrink_rule[m]
        reason = f"elastic replicas above min_replicas go first ({rule}): " + victim_reason(session, i, m, rule, "")
        session.decide(("shrink", m, tuple(shrunk[m]), reason, beneficiary.id))
    if not releasing:
        session.admit(i, placed)
        return
    # Victims inside their grace period still hold the GPUs: the job waits for them, and
    # its placement stays reserved for the rest of this cycle.
    session.add_allocated(session.leaf[i], session.needs[i])
    session.set_journaled(session.promised, i, True)
    session.set_journaled(session.touched, i, True)
    count = sum(1 for (m, rp), _ in kept if rp is None and session.jobs[m].grace_seconds > 0)
    session.reasons[i] = (WAITING_FOR_EVICTION, (count, session.needs[i]))


def victim_reason(session: Session, i: int, m: int, rule: str, variant: str) -> str:
    tree = session.tree
    job = session.jobs[i]
    vleaf = session.leaf[m]
    if rule == RECLAIM:
        _level, vbranch = branches_below_lca(session, session.leaf[i], vleaf)
        name = tree.names[vbranch]
        if variant == "fair_share":
            return (
                f"reclaimed for {job.id} of {job.quota}: {name} holds more than its fair share "
                f"of {gpu_count(session.share[vbranch])} and keeps at least that; {job.quota} stays "
                "within its own fair share"
            )
        return (
            f"reclaimed by {job.quota} for {job.id}: {name} was above its guarantee of "
            f"{gpu_count(tree.admit_guaranteed[vbranch])}; {job.quota} is within its guarantee"
        )
    return preemption_reason(session, i, m, rule)
