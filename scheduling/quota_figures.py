"""Per-quota status figures: fair share, allocated, running and pending, from a snapshot or
from aggregates."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping

from django.db.models import Count, F, Sum

from quotas.hooks import QuotaStatus as QuotaStatusFigures
from quotas.models import Node, NodeExecutor, NodeState
from scheduling import engine
from scheduling.engine import fairshare
from scheduling.engine import types as engine_types
from scheduling.engine.pools import split_by_pool
from scheduling.models import ACTIVE_STATES, HOLDING_STATES, Job, JobState, ReplicaPlacementRecord
from scheduling.resource_figures import resource_figures, stored_fair_shares
from scheduling.snapshot_rows import GPUS_OUTSIDE_LABEL, engine_quotas, held_outside, raw_rows, stored_devices


def asked_gpus(*, quota_ids: Collection[int]) -> float:
    """What the live jobs of these quotas ask, replicas × GPUs: the demand that caps a fair share
    (engine.fairshare's request; above 1 GPU a replica asks whole GPUs, so no rounding is lost)."""
    asked = (
        Job.objects.filter(quota_id__in=quota_ids, state__in=ACTIVE_STATES)
        .aggregate(asked=Sum(F("gpus") * F("replicas")))
        .get("asked")
    )
    return float(asked or 0.0)


def quota_status_figures(snapshot: engine.Snapshot) -> dict[str, QuotaStatusFigures]:
    """Per quota name: fair share (from the engine) and what its subtree holds and waits for.

    Releasing jobs still hold their GPUs, so they count as allocated and as running.
    """
    fair_share = engine.fair_shares(snapshot)
    parent_of = {quota.name: quota.parent for quota in snapshot.quotas}
    figures: dict[str, QuotaStatusFigures] = {
        quota.name: QuotaStatusFigures(
            fair_share=float(fair_share.get(quota.name, 0.0)), allocated=0.0, allocated_self=0.0, running=0, pending=0
        )
        for quota in snapshot.quotas
    }
    held_resources: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for job in snapshot.jobs:
        held_resources[job.quota][engine_types.CPU] += job.cpu * len(job.placements)
        held_resources[job.quota][engine_types.MEMORY] += job.memory_gib * len(job.placements)
        held = sum(p.fraction if p.fraction < 1 else float(len(p.devices)) for p in job.placements)
        if job.quota in figures:
            figures[job.quota]["allocated_self"] += held
        name: str | None = job.quota
        while name is not None and name in figures:
            figures[name]["allocated"] += held
            if job.state == engine_types.PENDING:
                figures[name]["pending"] += 1
            else:
                figures[name]["running"] += 1
            name = parent_of.get(name)
    _add_resources(figures, list(snapshot.quotas), held_resources, stored_fair_shares())
    return figures


def _fair_share_capacity() -> dict[str, int]:
    """`engine.fairshare.cluster_capacity` from the database, per pool name: every GPU of a node
    that takes new placements but those Slurm jobs outside the console hold (the engine's
    Node.console_gpus), and of a cordoned or draining node the devices its jobs hold (milli-GPUs)."""
    MILLI = fairshare.MILLI
    capacity: dict[str, int] = defaultdict(int)
    placeable = (
        Node.objects.filter(state=NodeState.READY).values_list("pool__name").annotate(gpus=Sum("gpus")).order_by()
    )
    for pool, gpus in placeable:
        capacity[pool] += int(gpus or 0) * MILLI
    # Only Slurm nodes carry the label, and only while an outside job runs there: few rows.
    outside = Node.objects.filter(
        state=NodeState.READY, executor=NodeExecutor.SLURM, labels__has_key=GPUS_OUTSIDE_LABEL
    ).values_list("pool__name", "name", "gpus", "labels")
    for pool, name, gpus, labels in outside:
        node = engine_types.Node(name=name, gpus=gpus, held_outside=held_outside(labels))
        capacity[pool] -= (node.gpus - node.console_gpus) * MILLI
    held: dict[tuple[str, int, int], int] = {}
    rows = ReplicaPlacementRecord.objects.filter(
        job__state__in=HOLDING_STATES, node__state__in=(NodeState.CORDONED, NodeState.DRAINING)
    ).values_list("node__pool__name", "node_id", "devices", "fraction")
    for pool, node_id, devices, fraction in raw_rows(rows):
        milli = fairshare.to_milli(fraction) if fraction < 1 else MILLI
        for device in stored_devices(devices):
            held[(pool, node_id, device)] = min(MILLI, held.get((pool, node_id, device), 0) + milli)
    for (pool, _node_id, _device), milli in held.items():
        capacity[pool] += milli
    return capacity


def quota_status_summary() -> dict[str, QuotaStatusFigures]:
    """What `quota_status_figures` says over a full snapshot, from aggregates instead: the pages
    need per-quota sums, not ten thousand jobs and their placements (a snapshot of a busy
    cluster costs half a second; this, a few milliseconds).

    Jobs alike in quota, state, GPUs per replica and replicas are read as one group; the engine's
    fair share sums each job's request (GPUs per replica rounded as it rounds them, × replicas)
    and marks fractional ones, so one job of the group's shape with the group's replicas asks
    exactly what the group asks. Allocated is the jobs' `allocated_gpus`, which every commit
    keeps equal to their placements."""
    quota_names, quotas = engine_quotas()
    capacity = _fair_share_capacity()
    groups = (
        Job.objects.filter(state__in=ACTIVE_STATES)
        .values_list("quota_id", "state", "gpus", "replicas")
        .annotate(
            jobs=Count("id"),
            held=Sum("allocated_gpus"),
            cpu_held=Sum(F("cpu") * F("running_replicas")),
            memory_held=Sum(F("memory_gib") * F("running_replicas")),
        )
        .order_by()
    )
    jobs: list[engine.Job] = []
    held: dict[str, float] = defaultdict(float)
    running: dict[str, int] = defaultdict(int)
    pending: dict[str, int] = defaultdict(int)
    held_resources: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for quota_id, state, gpus, replicas, count, allocated, cpu_held, memory_held in groups:
        quota = quota_names[quota_id]
        held_resources[quota][engine_types.CPU] += float(cpu_held or 0.0)
        held_resources[quota][engine_types.MEMORY] += float(memory_held or 0.0)
        jobs.append(
            engine.Job(
                id=f"{quota_id}:{state}:{gpus}:{replicas}",
                quota=quota,
                gpus=gpus,
                replicas=replicas * count,
                state=state,
            )
        )
        held[quota] += float(allocated or 0.0)
        if state == JobState.PENDING:
            pending[quota] += count
        else:
            running[quota] += count
    # engine.fair_shares, with the capacity counted here: it would otherwise need the placements.
    # Each pool divides its own capacity among its own tree (engine.pools).
    fair_share: dict[str, float] = {}
    asked = engine.Snapshot(nodes=(), quotas=tuple(quotas), jobs=tuple(jobs), now=0.0)
    for pool, part in split_by_pool(asked) if quotas else []:
        asking = part.jobs
        tree = fairshare.QuotaTree(part.quotas, {job.quota for job in asking})
        request = fairshare.subtree_requests(tree, fairshare.requests_by_leaf(tree, asking))
        share = fairshare.divide(tree, request, capacity.get(pool, 0), fairshare.fractional_nodes(tree, asking))
        fair_share.update({tree.names[i]: share[i] / fairshare.MILLI for i in range(len(tree))})
    parent_of = {quota.name: quota.parent for quota in quotas}
    figures: dict[str, QuotaStatusFigures] = {
        quota.name: QuotaStatusFigures(
            fair_share=float(fair_share.get(quota.name, 0.0)),
            allocated=0.0,
            allocated_self=held.get(quota.name, 0.0),
            running=0,
            pending=0,
        )
        for quota in quotas
    }
    for own in quota_names.values():
        name: str | None = own
        while name is not None and name in figures:
            figures[name]["allocated"] += held.get(own, 0.0)
            figures[name]["running"] += running.get(own, 0)
            figures[name]["pending"] += pending.get(own, 0)
            name = parent_of.get(name)
    _add_resources(figures, quotas, held_resources, stored_fair_shares())
    return figures


def _add_resources(
    figures: dict[str, QuotaStatusFigures],
    quotas: list[engine.Quota],
    held_own: Mapping[str, Mapping[str, float]],
    fair_share: Mapping[str, Mapping[str, float]],
) -> None:
    """`status.cpu` / `status.memory_gib` of the quotas whose pool manages them."""
    for name, resources in resource_figures(quotas, held_own, fair_share).items():
        for resource, values in resources.items():
            figures[name][resource] = values  # type: ignore[literal-required]
