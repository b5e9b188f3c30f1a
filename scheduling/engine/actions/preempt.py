"""Preemption: SCHEDULING.md §3.3 "Preempt (inside one quota)", §3.4 "Child-level preemption"
and §3.5 "Same-level preemption".

The rules and the candidates in their order; the search that combines them with reclaim's
victims is `actions.reclaim`, which offers these candidates after its own.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from scheduling.engine import bounds
from scheduling.engine.policies import victim_key
from scheduling.engine.resource_rules import keeps_guarantee
from scheduling.engine.session import Session, Unit
from scheduling.engine.types import CHILD_PREEMPTION, PREEMPT, SAME_LEVEL


def in_quota_rule(session: Session, job: int, victim: int, only: str | None) -> tuple[str, int, str] | None:
    """Preempt: a job may evict strictly lower-priority preemptible jobs of its own quota."""
    if only in (None, PREEMPT) and session.jobs[victim].priority < session.jobs[job].priority:
        return (PREEMPT, -1, "")
    return None


def preemption_rule(
    session: Session, job: int, victim: int, amount: int, only: str | None
) -> tuple[str, int, str] | None:
    """Child-level or same-level preemption of job m for job i, between different leaves."""
    tree = session.tree
    spec = session.jobs[job]
    victim_spec = session.jobs[victim]
    qleaf = session.job_leaf[job]
    vleaf = session.job_leaf[victim]
    alloc = session.allocated
    quota = tree.index.get(spec.quota, -1)
    if (
        only in (None, CHILD_PREEMPTION)
        and tree.is_self[qleaf]
        and tree.child_preemption[quota]
        and quota in tree.chain[vleaf]
    ):
        return (CHILD_PREEMPTION, -1, "")
    if only in (None, SAME_LEVEL) and tree.same_level[quota] and victim_spec.priority < spec.priority:
        parent = tree.parent[quota]
        for sibling_level in tree.chain[vleaf]:
            if tree.parent[sibling_level] == parent:
                guaranteed = tree.admit_guaranteed[sibling_level]
                # the sibling keeps its guarantee, of GPUs and of each managed resource
                kept = alloc[sibling_level] - amount >= guaranteed
                if sibling_level != quota and kept and keeps_guarantee(session, victim, amount, sibling_level):
                    return (SAME_LEVEL, -1, "")
                break
    return None


def preemption_candidates(session: Session, job: int) -> Iterator[tuple[Unit, str]]:
    """Whole jobs that preemption may take for job i, after reclaim's: own quota (lower priority),
    then P's subtree (child-level), then sibling quotas (same-level, lower priority)."""
    tree = session.tree
    spec = session.jobs[job]
    qleaf = session.job_leaf[job]
    # Preempt: own quota, lower priority.
    for victim in session.victims_in(qleaf):
        if session.jobs[victim].priority >= spec.priority:
            break
        if session.eligible_victim(victim):
            yield (victim, None), PREEMPT
    quota = tree.index[spec.quota]
    if tree.is_self[qleaf] and tree.child_preemption[quota]:
        yield from candidates_in_subtree(session, quota, qleaf, None, CHILD_PREEMPTION)
    if tree.same_level[quota]:
        parent = tree.parent[quota]
        siblings = tree.children[parent] if parent >= 0 else tree.roots
        for sibling in siblings:
            if sibling != quota and not tree.is_self[sibling]:
                yield from candidates_in_subtree(session, sibling, -1, spec.priority, SAME_LEVEL)


def candidates_in_subtree(
    session: Session, top: int, exclude: int, below_priority: int | None, rule: str
) -> Iterator[tuple[Unit, str]]:
    """Victims anywhere under `top` (but leaf `exclude`), lowest priority then latest started first."""
    lo, hi = top, session.end[top]
    leaves = session.candidate_leaves
    members = [
        (victim_key(session.jobs[victim], victim), victim)
        for v in leaves[bisect_left(leaves, lo) : bisect_left(leaves, hi)]
        if v != exclude
        for victim in session.candidates_by_leaf[v]
    ]
    members.sort()
    for _, victim in members:
        if below_priority is not None and session.jobs[victim].priority >= below_priority:
            break
        if session.eligible_victim(victim):
            yield (victim, None), rule


def preemption_reason(session: Session, job: int, victim: int, rule: str) -> str:
    """The sentence an evicted job carries for the three preemption rules."""
    spec = session.jobs[job]
    victim_spec = session.jobs[victim]
    vq = victim_spec.quota
    if rule == PREEMPT:
        return f"preempted in {vq} by {spec.id} (priority {spec.priority} > {victim_spec.priority})"
    if rule == CHILD_PREEMPTION:
        return f"child-level preemption: {spec.quota}'s own job {spec.id} ranks above {vq}'s jobs"
    return (
        f"same-level preemption: {spec.id} of {spec.quota} (priority {spec.priority}) over "
        f"{victim_spec.id} of {vq} (priority {victim_spec.priority})"
    )


def futile_own_search(session: Session, job: int) -> int | None:
    """How many candidates a victim search for job i examines, where it is certain to fail for
    want of GPUs having offered only its own quota's lower-priority jobs; None where it is not.

    `actions.reclaim.search_victims` asks it when its reclaim region is empty: with no elastic
    replica to offer either, the own-quota stream (`preemption_candidates`) is the whole stream,
    and its length does not depend on what the search takes (a victim taken was already offered).
    If the free GPUs and every GPU those candidates hold fall short of the job's need, every
    `fits_with_victims` of the search stops at its first test and the search rolls back having
    examined each candidate: the same answer, and the same count for the cycle's limit
    (`bounds.MAX_FAILED_CANDIDATES`), without taking and giving back each victim (S3: most of
    the 3,800 failed searches of its late cycles). The search itself runs otherwise."""
    if session.resources:
        return None  # CPU and memory figures: left to the search
    touched = session.touched
    if any(not touched[victim] and not session.protected(victim) for victim in session.elastic):
        return None
    tree = session.tree
    spec = session.jobs[job]
    qleaf = session.job_leaf[job]
    quota = tree.index[spec.quota]
    if (tree.is_self[qleaf] and tree.child_preemption[quota]) or tree.same_level[quota]:
        return None  # further streams after the own quota's
    room = session.cluster.free_total
    need = session.needs[job]
    priority = spec.priority
    jobs, placements = session.jobs, session.placements
    count = 0
    for victim in session.victims_in(qleaf):
        if jobs[victim].priority >= priority:
            break
        if session.eligible_victim(victim):
            count += 1
            # at most what taking the victim frees (`Cluster._apply`): its devices' share
            room += sum(len(devices) * milli for _, devices, milli in placements[victim])
            if room >= need:
                return None
    if count > bounds.MAX_CANDIDATES_PER_SEARCH:
        return None  # the search stops at the limit instead; left to it
    return count


def futile_beyond_guarantee(session: Session, job: int, region: tuple[int, int]) -> int | None:
    """The candidates a victim search for non-preemptible job i examines where it is certain to
    fail at the search's limit; None where that is not certain (the search runs).

    `actions.reclaim.search_victims` asks it when the reclaim region is not empty. A
    non-preemptible job fits only within its own quota's guarantee (`fits_with_victims`), and
    that quota's allocation falls only as its own jobs go, which only preemption takes: its
    lower-priority jobs (reclaim and the child-level and same-level rules take from other
    quotas; no elastic replica is on offer here). If the quota stays above its guarantee with
    all of those gone, every `fits_with_victims` of the search refuses, whatever it takes. The
    reclaim stream offers each candidate of the region's other leaves that is eligible now (a
    victim stops being eligible only once offered and taken); with more of those than
    `bounds.MAX_CANDIDATES_PER_SEARCH`, the search stops at the limit having found nothing: the
    same answer and count, without taking and giving back 256 victims (simulate's S3: most of
    the searches that reach the limit)."""
    spec = session.jobs[job]
    if spec.preemptible or session.resources:
        return None
    touched, eligible = session.touched, session.eligible_victim
    if any(not touched[victim] and not session.protected(victim) for victim in session.elastic):
        return None
    leaf = session.job_leaf[job]
    jobs, by_leaf, priority = session.jobs, session.candidates_by_leaf, spec.priority
    freed = sum(
        session.replica_milli[victim] * len(session.placements[victim])
        for victim in by_leaf.get(leaf, ())
        if jobs[victim].priority < priority and eligible(victim)
    )
    if session.allocated[leaf] - freed + session.needs[job] <= session.tree.admit_guaranteed[leaf]:
        return None
    limit = bounds.MAX_CANDIDATES_PER_SEARCH
    offered = 0
    for other in session.candidate_leaves[region[0] : region[1]]:
        if other == leaf:
            continue
        for victim in by_leaf[other]:
            if eligible(victim):
                offered += 1
                if offered > limit:
                    return offered
    return None
