"""The figures the quotas app shows but only the scheduler can compute (quotas.hooks).

Status: fair share from the engine over a fresh snapshot, what each subtree holds and waits
for; a constant number of queries whatever the page size. Preview: the engine run over the
snapshot that the caller's (dry-run, rolled back) transaction sees.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F

from quotas.hooks import Preview, QuotaStatus
from quotas.models import Node, Quota
from scheduling import engine
from scheduling.clock import get_clock
from scheduling.models import ACTIVE_STATES, HOLDING_STATES, Job, ReplicaPlacementRecord, SchedulerFence
from scheduling.selectors import build_snapshot, quota_status_summary


def quota_status(quotas: list[Quota]) -> dict[int, QuotaStatus]:
    if not quotas:
        return {}
    figures = quota_status_summary()
    empty = QuotaStatus(fair_share=0.0, allocated=0.0, allocated_self=0.0, running=0, pending=0)
    return {quota.pk: figures.get(quota.name, empty) for quota in quotas}


def preview() -> Preview:
    snapshot, index = build_snapshot(get_clock().now())
    result = engine.schedule(snapshot)
    quota_of = {job.id: job.quota for job in snapshot.jobs}
    names = {key: seen.name for key, seen in index.jobs.items()}
    admit: list[dict[str, Any]] = []
    evict: list[dict[str, Any]] = []
    for decision in result.decisions:
        job = {
            "job": names.get(decision.job_id, decision.job_id),
            "id": int(decision.job_id),
            "quota": quota_of.get(decision.job_id),
        }
        if isinstance(decision, engine.Admit):
            gpus = sum(p.fraction if p.fraction < 1 else len(p.devices) for p in decision.placements)
            admit.append({**job, "kind": "admit", "replicas": len(decision.placements), "gpus": gpus})
        elif isinstance(decision, engine.Grow):
            gpus = sum(p.fraction if p.fraction < 1 else len(p.devices) for p in decision.add)
            admit.append({**job, "kind": "grow", "replicas": len(decision.add), "gpus": gpus})
        elif isinstance(decision, engine.Evict | engine.Shrink):
            beneficiary = names.get(decision.beneficiary) if decision.beneficiary else None
            entry = {
                **job,
                "kind": "evict" if isinstance(decision, engine.Evict) else "shrink",
                "rule": decision.rule,
                "beneficiary": beneficiary,
                # Who may read the name is the reader's question (scheduling.mentions.preview_as_seen).
                "beneficiary_id": int(decision.beneficiary) if decision.beneficiary else None,
                "reason": decision.reason,
            }
            if isinstance(decision, engine.Shrink):
                entry["replicas"] = len(decision.remove)
            evict.append(entry)
    return Preview(admit=admit, evict=evict)


def quota_delete_guard(quota: Quota) -> str | None:
    live = Job.objects.filter(quota=quota, state__in=ACTIVE_STATES).count()
    if live:
        return f"{live} live job(s) use {quota.name}; cancel or finish them first"
    return None


def node_shrink_guard(node: Node, gpus: int) -> str | None:
    """SCHEDULING.md: never more GPUs on a node than it has. A job holding a device that an edit
    would remove keeps the node at its size; the admin drains it, or waits, first. The edit took
    its turn with the cycles' commits first (`commit_turn`), so no commit places meanwhile."""
    placements = ReplicaPlacementRecord.objects.filter(node=node, job__state__in=HOLDING_STATES)
    held: dict[int, set[str]] = {}
    for devices, job in placements.values_list("devices", "job__name"):
        for index in devices:
            if int(index) >= gpus:
                held.setdefault(int(index), set()).add(str(job))
    if not held:
        return None
    taken = "; ".join(f"GPU {index} by {', '.join(sorted(held[index]))}" for index in sorted(held))
    return (
        f"{node.name} cannot go down to {gpus} GPUs while jobs hold the GPUs it would lose ({taken}); "
        "drain the node, or let them end, first"
    )


def commit_turn() -> None:
    """Wait for a cycle's commit in flight, and hold the next one back until this transaction
    ends. A commit's first write locks the fence row (scheduling.cycle), so locking it here
    first, before the inventory's own rows, keeps one order of locks and no deadlock; the commit
    that comes after reads the edited node when it checks its placements.

    The lock is taken by moving the fence's generation on, so that a cycle whose snapshot was
    read before this change commits nothing (stale_snapshot) and the next cycle, which the
    change's inventory signal asks for, decides on the node as it is now. A node moved to another
    pool needs it: the commit checks a placement's devices, not its node's pool, and would place
    a job of the old pool there (tests/scheduling/test_pool_move_concurrency.py)."""
    SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID).update(generation=F("generation") + 1)


def node_delete_guard(node: Node) -> str | None:
    holding = ReplicaPlacementRecord.objects.filter(node=node, job__state__in=HOLDING_STATES).values("job").distinct()
    count = holding.count()
    if count:
        return f"{count} job(s) run on {node.name}; mark it down and let them move first"
    return None


def node_move_guard(node: Node) -> str | None:
    """A node moves to another pool only when nothing is placed on it: a job runs only on its
    quota's pool's nodes (SCHEDULING.md "Pool"), so the jobs there are named to be moved first."""
    names = list(
        Job.objects.filter(placements__node=node, state__in=HOLDING_STATES)
        .distinct()
        .order_by("id")
        .values_list("name", flat=True)[:6]
    )
    if not names:
        return None
    shown = ", ".join(names[:5]) + (" and more" if len(names) > 5 else "")
    return f"{node.name} cannot change pools while jobs run there ({shown}); cordon or drain it and let them end first."
