"""What must hold after any load or fault, checked against the database."""

from __future__ import annotations

from collections import defaultdict

from django.db import connection, transaction
from django.db.models import Count

from quotas.models import Quota
from scheduling.models import HOLDING_STATES, Job, JobEvent, JobEventKind, JobState, ReplicaPlacementRecord


def invariant_violations() -> list[str]:
    """What must hold after any load or fault, as sentences (empty when all hold).

    No device holds more than one whole GPU's worth of replicas; no quota's subtree holds more
    than its limit; every job is in a state of the model, with one `submitted` event, placements
    matching what it says it holds, and the event its final state needs.
    """
    # One snapshot for every query: read one by one, a cycle committing in between would show
    # a job running without the placements it committed with.
    if connection.in_atomic_block:
        return _invariant_violations()
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return _invariant_violations()


def _invariant_violations() -> list[str]:
    violations: list[str] = []
    device_use: dict[tuple[int, int], float] = defaultdict(float)
    held_by_job: dict[int, float] = defaultdict(float)
    replicas_by_job: dict[int, int] = defaultdict(int)
    holding = ReplicaPlacementRecord.objects.filter(job__state__in=HOLDING_STATES)
    for job_id, node_id, devices, fraction in holding.values_list("job_id", "node_id", "devices", "fraction"):
        for device in devices:
            device_use[(node_id, device)] += fraction if fraction < 1 else 1.0
        held_by_job[job_id] += fraction if fraction < 1 else float(len(devices))
        replicas_by_job[job_id] += 1
    violations += [
        f"node {node} GPU {device} is held {use:g} times over"
        for (node, device), use in sorted(device_use.items())
        if use > 1 + 1e-9
    ]
    jobs = Job.objects.values_list("id", "name", "state", "quota_id", "running_replicas", "allocated_gpus")
    states = set(JobState.values)
    quota_held: dict[int, float] = defaultdict(float)
    for job_id, name, state, quota_id, running, allocated in jobs:
        if state not in states:
            violations.append(f"job {name} ({job_id}) is in no known state: {state!r}")
        if state in HOLDING_STATES:
            quota_held[quota_id] += allocated
            if replicas_by_job[job_id] != running or abs(held_by_job[job_id] - allocated) > 1e-6:
                violations.append(
                    f"job {name} ({job_id}) says {running} replicas and {allocated:g} GPUs, "
                    f"its placements hold {replicas_by_job[job_id]} and {held_by_job[job_id]:g}"
                )
        elif replicas_by_job[job_id] or allocated:
            violations.append(f"job {name} ({job_id}) is {state} but holds {allocated:g} GPUs")
    submitted = defaultdict(int, _event_counts(JobEventKind.SUBMITTED))
    for job_id, name, *_ in jobs:
        if submitted[job_id] != 1:
            violations.append(f"job {name} ({job_id}) has {submitted[job_id]} submitted events")
    for state, kind in ((JobState.CANCELLED, JobEventKind.CANCELLED), (JobState.SUCCEEDED, JobEventKind.FINISHED)):
        with_event = dict(_event_counts(kind))
        violations += [
            f"job {name} ({job_id}) is {state} without a {kind} event"
            for job_id, name in Job.objects.filter(state=state).values_list("id", "name")
            if not with_event.get(job_id)
        ]
    parents = dict(Quota.objects.values_list("id", "parent_id"))
    subtree_held: dict[int, float] = defaultdict(float)
    for quota_id, held in quota_held.items():
        ancestor: int | None = quota_id
        while ancestor is not None:
            subtree_held[ancestor] += held
            ancestor = parents.get(ancestor)
    for quota_id, name, limit in Quota.objects.exclude(limit=None).values_list("id", "name", "limit"):
        if limit is not None and subtree_held[quota_id] > limit + 1e-6:
            violations.append(f"quota {name} holds {subtree_held[quota_id]:g} GPUs, above its limit of {limit:g}")
    return violations


def _event_counts(kind: str) -> list[tuple[int, int]]:
    return list(
        JobEvent.objects.filter(kind=kind).values("job_id").annotate(count=Count("id")).values_list("job_id", "count")
    )
