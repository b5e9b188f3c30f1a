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

from scheduling.engine import bounds, resource_rules
from scheduling.engine.actions import reserve
from scheduling.engine.actions.excess import excess_heap, leaves_by_excess
from scheduling.engine.actions.preempt import (
    futile_beyond_guarantee,
    futile_own_search,
    in_quota_rule,
    preemption_candidates,
    preemption_reason,
    preemption_rule,
)
from scheduling.engine.cluster import Placement
from scheduling.engine.policies import RULE_ORDER, no_smaller_than_failed, victim_key, within_bounds
from scheduling.engine.resource_rules import excess, over_figure, victim_over, within
from scheduling.engine.resources import ENTITLED, FAIR_SHARE, GUARANTEE
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
    session.candidates_sorted = set()
    state = session.state
    jobs = session.jobs
    job_leaf = session.job_leaf
    touched = session.touched
    # Jobs placed or moved earlier in this cycle (touched) and jobs within their min runtime
    # stay out for the whole cycle: leaving them in made every search walk past them. Only a
    # job the snapshot holds placed can be running and untouched (one admitted now is touched).
    protecting = any(minimum > 0 for minimum in tree.min_runtime)
    by_leaf: dict[int, list[int]] = session.candidates_by_leaf
    for victim in session.placed:
        if state[victim] != RUNNING or touched[victim]:
            continue
        leaf = job_leaf[victim]
        if leaf < 0 or not jobs[victim].preemptible or (protecting and session.protected(victim)):
            continue
        members = by_leaf.get(leaf)
        if members is None:
            by_leaf[leaf] = [victim]
        else:
            members.append(victim)
    # Each leaf's candidates are put in victim order when a search first reads them
    # (`Session.victims_in`): a cycle's searches read a few hundred of thousands of leaves.
    session.candidate_leaves = sorted(by_leaf)
    session.elastic = [
        victim
        for victim in session.elastic_jobs
        if state[victim] == RUNNING
        and jobs[victim].preemptible
        and len(session.placements[victim]) > (jobs[victim].min_replicas or 0)
        and job_leaf[victim] >= 0
    ]
    if not session.candidates_by_leaf:
        return
    session.ranked = {}
    found = 0
    missed_candidates = 0
    failed: dict[int, list[tuple[int, int, int, float, float]]] = {}  # priority, GPUs, replicas, CPU, memory
    blocked_fifo: set[int] = set()
    share = session.snapshot.bound_share
    most_found = bounds.share_of(bounds.MAX_VICTIM_SEARCHES, share)
    most_missed = bounds.share_of(bounds.MAX_FAILED_CANDIDATES, share)
    # Locals and a signature built only when it is compared or kept: the loop walks every tried
    # job (7,000 a cycle when simulate's S3 fills up), and most of them never search.
    promised, reasons, fifo = session.promised, session.reasons, tree.fifo
    replica_milli, admit_count = session.replica_milli, session.admit_count
    for job in session.tried:
        if found >= most_found or missed_candidates >= most_missed:
            break
        if state[job] != PENDING or promised[job]:
            continue
        reason = reasons.get(job)
        if reason is not None and reason[0] in _NO_SEARCH:
            continue
        leaf = job_leaf[job]
        if fifo[leaf]:
            if leaf in blocked_fifo:
                continue
            blocked_fifo.add(leaf)
        spec = jobs[job]
        earlier = failed.get(leaf)
        # a failure no more urgent and no larger in any figure
        if earlier is not None and no_smaller_than_failed(
            earlier, spec.priority, replica_milli[job], admit_count[job], spec.cpu, spec.memory_gib
        ):
            continue
        if not may_search(session, job):
            continue
        success, examined = reserve.search_with_hold(session, job, search_victims)
        if success:
            found += 1
            if state[job] == RUNNING:
                reasons.pop(job, None)
        else:
            missed_candidates += max(1, examined)
            signature = (spec.priority, replica_milli[job], admit_count[job], spec.cpu, spec.memory_gib)
            failed.setdefault(leaf, []).append(signature)


def may_search(session: Session, job: int) -> bool:
    spec = session.jobs[job]
    leaf = session.job_leaf[job]
    tree = session.tree
    need = session.needs[job]
    entitled = session.allocated[leaf] + need <= max(session.fair_share[leaf], tree.admit_guaranteed[leaf])
    if entitled and within(session, job, (leaf,), ENTITLED):
        return True
    own = session.victims_in(leaf)
    if own and session.jobs[own[0]].priority < spec.priority:
        return True
    quota = tree.index[spec.quota]
    if tree.is_self[leaf] and tree.child_preemption[quota]:
        return True
    return tree.same_level[quota]


def reclaim_region(session: Session, job: int) -> tuple[tuple[int, int], int]:
    """Where reclaim may take from, as a slice of `candidate_leaves` (job i's own leaf is in
    it and skipped by `victim_candidates`), and the highest chain index where Q is entitled."""
    tree = session.tree
    leaf = session.job_leaf[job]
    chain = tree.chain[leaf]
    need = session.needs[job]
    alloc = session.allocated
    top = -1
    for level, node in enumerate(chain):
        entitled = alloc[node] + need <= session.fair_share[node]
        entitled = entitled or alloc[node] + need <= tree.admit_guaranteed[node]
        if not entitled or (session.resources and not within(session, job, (node,), ENTITLED)):
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


def victim_rule(
    session: Session, job: int, victim: int, amount: int, only: str | None = None
) -> tuple[str, int, str] | None:
    """Which rule lets job i take `amount` GPUs of job m now: (rule, Q branch level, variant).

    `only` restricts the answer to the rule whose stream offered the victim, so that the
    order of preference between rules holds.
    """
    tree = session.tree
    spec = session.jobs[job]
    victim_spec = session.jobs[victim]
    qleaf = session.job_leaf[job]
    vleaf = session.job_leaf[victim]
    alloc = session.allocated
    share = session.fair_share
    need = session.needs[job]
    if vleaf == qleaf:
        return in_quota_rule(session, job, victim, only)
    level, vbranch = branches_below_lca(session, qleaf, vleaf)
    qchain = tree.chain[qleaf]
    if only not in (None, RECLAIM):
        return preemption_rule(session, job, victim, amount, only)
    lca = tree.parent[vbranch]
    if lca >= 0 and tree.child_preemption[lca] and (tree.is_self[vbranch] or tree.is_self[qchain[level]]):
        # Under child_preemption the parent's own jobs rank above its children: only the
        # child-level rule moves GPUs between them, never fair share or guarantees.
        return preemption_rule(session, job, victim, amount, only)
    # GPUs and managed resources (engine.resources): Q within the bound in all, the victim over in one.
    branch = qchain[: level + 1]
    within_share = within_bounds(alloc, need, share, branch) and within(session, job, branch, FAIR_SHARE)
    # With same_level_preemption on the victim's side, priority beats fair share between
    # siblings: a lower-priority job may not take back what a same-level eviction won.
    priority_shield = tree.same_level[vbranch] and victim_spec.priority > spec.priority
    if within_share and not priority_shield and victim_over(session, job, victim, amount, vbranch, FAIR_SHARE):
        return (RECLAIM, level, "fair_share")
    within_guarantee = within_bounds(alloc, need, tree.admit_guaranteed, branch)
    within_guarantee = within_guarantee and within(session, job, branch, GUARANTEE)
    if within_guarantee and victim_over(session, job, victim, amount, vbranch, GUARANTEE):
        return (RECLAIM, level, "guarantee")
    if only is None:
        return preemption_rule(session, job, victim, amount, None)
    return None


def victim_candidates(session: Session, job: int, region: tuple[int, int]) -> Iterator[tuple[Unit, str | None]]:
    """Victim units in order of preference: elastic replicas, then whole jobs by rule."""
    qleaf = session.job_leaf[job]
    seen_generation = session.allocated_generation  # the state `region` was measured on
    start, stop = region
    leaves = session.candidate_leaves
    lo, hi = (leaves[start], leaves[stop - 1]) if stop > start else (0, -1)

    def over(v: int) -> float:
        return excess(session, v) if lo <= v <= hi and v != qleaf else 0

    shrinkable: list[tuple[tuple[Any, ...], int]] = []
    for victim in session.elastic:
        if session.touched[victim] or session.protected(victim):
            continue
        rule = victim_rule(session, job, victim, session.replica_milli[victim])
        if rule is None:
            continue
        vleaf = session.job_leaf[victim]
        key = (RULE_ORDER[rule[0]], -over(vleaf), victim_key(session.jobs[victim], victim))
        shrinkable.append((key, victim))
    shrinkable.sort()
    for _, victim in shrinkable:
        minimum = session.jobs[victim].min_replicas or 0
        while not session.touched[victim] and len(session.placements[victim]) > minimum:
            before = len(session.placements[victim])
            yield (victim, session.placements[victim][-1]), None
            if len(session.placements[victim]) == before:
                break
    # Reclaim: the quota furthest above its fair share first, re-ranked after each victim.
    # The region is measured again after each victim (SCHEDULING.md §3: every rule on the
    # snapshot with the victims already chosen removed): a branch over its share only because
    # of a borrower inside it that is now gone widens to the level above.
    cursor: dict[int, int] = {}
    heap = leaves_by_excess(session, region)
    while True:
        if session.allocated_generation != seen_generation:
            seen_generation = session.allocated_generation
            wider, _ = reclaim_region(session, job)
            if wider[1] - wider[0] > region[1] - region[0]:
                region = wider
                heap = excess_heap(session, region)
        if not heap:
            break
        _, created, v = heapq.heappop(heap)
        if v == qleaf:
            continue
        members = session.victims_in(v)
        position = cursor.get(v, 0)
        while position < len(members):
            victim = members[position]
            position += 1
            if session.eligible_victim(victim):
                cursor[v] = position
                yield (victim, None), RECLAIM
                break
        cursor[v] = position
        if position < len(members):
            heapq.heappush(heap, (-over(v), created, v))
    yield from preemption_candidates(session, job)


def fits_with_victims(
    session: Session, job: int, taken: list[tuple[Unit, tuple[str, int, str]]]
) -> list[Placement] | None:
    """Beneficiary-side conditions on the current state, then a gang placement."""
    need = session.needs[job]
    # Read first: the common failure (the victims taken so far free too little), and every check
    # below only reads, so their order does not change the answer.
    if session.cluster.free_total < need:
        return None
    tree = session.tree
    leaf = session.job_leaf[job]
    alloc = session.allocated
    chain = tree.chain[leaf]
    guard = session.guard
    for node in chain:
        if alloc[node] + need > tree.limit[node] or alloc[node] + need > guard[node]:
            return None
    if not session.jobs[job].preemptible:
        for node in chain:
            if alloc[node] + need > tree.admit_guaranteed[node]:
                return None
    for _, (rule, level, variant) in taken:
        if rule == RECLAIM:
            bound = session.fair_share if variant == "fair_share" else tree.admit_guaranteed
            if not within_bounds(alloc, need, bound, chain[: level + 1]):
                return None
        elif rule == CHILD_PREEMPTION:
            parent = tree.parent[leaf]
            if alloc[parent] + need > tree.guaranteed[parent]:
                return None
    if session.resources and not resource_rules.beneficiary_within(session, job, chain, taken):
        return None
    return session.place_gang(job, session.admit_count[job])


def search_victims(session: Session, job: int) -> tuple[bool, int]:
    """Whether victims were found (and committed) for job i, and how many candidates it examined."""
    region, _ = reclaim_region(session, job)
    if region[0] == region[1] and (futile := futile_own_search(session, job)) is not None:
        return False, futile  # certain to fail, and how many it examines (`futile_own_search`)
    if region[0] != region[1] and (futile := futile_beyond_guarantee(session, job, region)) is not None:
        return False, futile  # certain to fail at the limit (`futile_beyond_guarantee`)
    journal = session.journal
    mark = journal.checkpoint()
    generation = session.allocated_generation
    taken: list[tuple[Unit, tuple[str, int, str]]] = []
    examined = 0
    placed: list[Placement] | None = None
    for unit, only in victim_candidates(session, job, region):
        examined += 1
        if examined > bounds.MAX_CANDIDATES_PER_SEARCH:
            break
        victim, replica_placement = unit
        amount = session.replica_milli[victim] * (1 if replica_placement else len(session.placements[victim]))
        rule = victim_rule(session, job, victim, amount, only)
        if rule is None:
            continue
        session.take_victim(unit)
        taken.append((unit, rule))
        inner = journal.checkpoint()
        placed = fits_with_victims(session, job, taken)
        if placed is not None:
            journal.rollback(inner)
            break
    if placed is None:
        journal.rollback(mark)
        session.allocated_generation = generation  # the very state the search began from
        return False, examined
    # Fewest GPUs: give back every victim the job can do without, latest taken first.
    kept: list[tuple[Unit, tuple[str, int, str]]] = []
    for position in range(len(taken) - 1, -1, -1):
        unit, rule = taken[position]
        victim, replica_placement = unit
        others = kept + taken[:position]
        restore = journal.checkpoint()
        original = (replica_placement,) if replica_placement is not None else session.placements[victim]
        session.give_back_victim(unit, original)
        inner = journal.checkpoint()
        if fits_with_victims(session, job, others) is not None:
            journal.rollback(inner)
            continue
        journal.rollback(restore)
        kept.append((unit, rule))
    kept.reverse()
    placed = fits_with_victims(session, job, kept)
    if placed is None:  # cannot happen: the full set fitted; keep the snapshot safe
        journal.rollback(mark)
        return False, examined
    commit_victims(session, job, kept, placed)
    return True, examined


def commit_victims(
    session: Session, job: int, kept: list[tuple[Unit, tuple[str, int, str]]], placed: list[Placement]
) -> None:
    beneficiary = session.jobs[job]
    shrunk: dict[int, list[Placement]] = {}
    shrink_rule: dict[int, str] = {}
    releasing = False
    for (victim, replica_placement), (rule, _, variant) in kept:
        if replica_placement is not None:
            shrunk.setdefault(victim, []).append(replica_placement)
            shrink_rule.setdefault(victim, rule)
            continue
        victim_spec = session.jobs[victim]
        reason = victim_reason(session, job, victim, rule, variant)
        session.decide(Evict(victim_spec.id, rule, beneficiary.id, reason))
        if victim_spec.grace_seconds > 0:
            releasing = True
            session.set_journaled(session.state, victim, RELEASING)
            session.set_journaled(session.held, victim, session.placements[victim])
    evicted_whole = {victim for (victim, rp), _ in kept if rp is None}
    for victim in sorted(shrunk):
        if victim in evicted_whole:
            continue  # the whole job goes; its shrunk replicas go with it
        session.set_journaled(session.touched, victim, True)
        rule = shrink_rule[victim]
        reason = f"elastic replicas above min_replicas go first ({rule}): " + victim_reason(
            session, job, victim, rule, ""
        )
        session.decide(("shrink", victim, tuple(shrunk[victim]), reason, beneficiary.id))
    if not releasing:
        session.admit(job, placed)
        return
    # Victims inside their grace period still hold the GPUs: the job waits for them, and
    # its placement stays reserved for the rest of this cycle.
    session.add_replicas(job, session.admit_count[job])
    session.set_journaled(session.promised, job, True)
    session.set_journaled(session.touched, job, True)
    count = sum(1 for (victim, rp), _ in kept if rp is None and session.jobs[victim].grace_seconds > 0)
    session.reasons[job] = (WAITING_FOR_EVICTION, (count, session.needs[job]))


def victim_reason(session: Session, job: int, victim: int, rule: str, variant: str) -> str:
    tree = session.tree
    spec = session.jobs[job]
    vleaf = session.job_leaf[victim]
    if rule == RECLAIM:
        _level, vbranch = branches_below_lca(session, session.job_leaf[job], vleaf)
        name = tree.names[vbranch]
        if variant == "fair_share":
            return (
                f"reclaimed for {spec.id} of {spec.quota}: {name} holds more than its fair share "
                f"of {over_figure(session, victim, vbranch, variant)} and keeps at least that; {spec.quota} stays "
                "within its own fair share"
            )
        return (
            f"reclaimed by {spec.quota} for {spec.id}: {name} was above its guarantee of "
            f"{over_figure(session, victim, vbranch, variant)}; {spec.quota} is within its guarantee"
        )
    return preemption_reason(session, job, victim, rule)
