"""The Submit job estimate's snapshot: `build_snapshot` for a dry-run submit, with the cluster
read kept between estimates."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.conf import settings

from scheduling import engine
from scheduling.models import ACTIVE_STATES, HOLDING_STATES, Job, ReplicaPlacementRecord
from scheduling.pending_reasons import with_shown_reason
from scheduling.snapshot import SEEN_JOB_COLUMNS, JobSeen, SnapshotIndex, build_snapshot, job_key, job_seen
from scheduling.snapshot_rows import (
    ENGINE_JOB_COLUMNS,
    GPUS_AT,
    GRACE_SECONDS_AT,
    QUOTA_ID_AT,
    STATE_AT,
    Moment,
    engine_job,
    raw_rows,
    read_nodes_and_quotas,
)

# How long one full read of the cluster may serve the estimates after it. A person typing into
# Submit job asks for an estimate every few hundred milliseconds; reading 10,000 jobs for each
# costs more than the engine run itself (docs/benchmarks.md, issue 11). In between, the jobs
# that changed are read again (a job's `revision` goes up on every change of state or
# allocation); after audited changes of quotas and nodes only, the nodes and the quota tree are
# read again (a few thousand rows) and the jobs kept; any other audited change (a workspace's, a
# user's) reads everything again.
ESTIMATE_SNAPSHOT_SECONDS = 10.0

# Audited changes that touch only what `read_nodes_and_quotas` reads, so long as no node or quota
# a kept job names was renamed or deleted (`_with_nodes_and_quotas_read_again` checks).
_NODE_AND_QUOTA_CHANGES = frozenset({"node", "quota"})


@dataclass(slots=True)
class _EstimateBase:
    other_changes: Any  # the newest audit record that is not about a job: (id, at), or None
    built_at: float
    snapshot: engine.Snapshot
    index: SnapshotIndex
    revisions: dict[int, int]
    by_pk: dict[int, engine.Job]


_estimate_base: dict[str, _EstimateBase] = {}


def _other_changes() -> Any:
    """The newest audited change that is not a job's (quotas, nodes, pools, workspaces). Its time
    comes along so that a fresh database (a test's) never matches an old one's numbers."""
    from quotas.models import AuditRecord

    return AuditRecord.objects.exclude(object_type="job").order_by("-id").values_list("id", "at").first()


def _only_nodes_and_quotas_changed(since: Any, newest: Any) -> bool:
    """Whether every audited change after `since` (up to `newest`, both `_other_changes`) is a
    node's or a quota's, in the database `since` was read from: its record is still there, at
    the same time (a test's fresh database reuses the numbers)."""
    from quotas.models import AuditRecord

    if since is None or newest is None:
        return False
    since_id, since_at = since
    records = (
        AuditRecord.objects.exclude(object_type="job")
        .filter(id__gte=since_id, id__lte=newest[0])
        .values_list("id", "at", "object_type")
    )
    kinds: set[str] = set()
    still_there = False
    for record_id, at, kind in records:
        if record_id == since_id:
            still_there = at == since_at
        else:
            kinds.add(kind)
    return still_there and kinds <= _NODE_AND_QUOTA_CHANGES


def _with_nodes_and_quotas_read_again(base: _EstimateBase, *, other_changes: Any) -> _EstimateBase | None:
    """`base` with the fence, the pool, the nodes and the quota tree read again and its jobs kept;
    None when a node or quota the kept jobs may name was renamed or deleted (their engine jobs
    carry the names, so they are read again in full)."""
    frame = read_nodes_and_quotas()
    node_ids = {name: node_id for node_id, name in frame.node_names.items()}
    quota_ids = {name: quota_id for quota_id, name in frame.quota_names.items()}
    if not (base.index.node_ids.items() <= node_ids.items() and base.index.quota_ids.items() <= quota_ids.items()):
        return None
    index = SnapshotIndex(
        jobs=base.index.jobs,
        node_ids=node_ids,
        quota_ids=quota_ids,
        fence_token=frame.fence_token,
        fence_generation=frame.fence_generation,
    )
    snapshot = replace(
        base.snapshot,
        nodes=tuple(frame.nodes),
        quotas=tuple(frame.quotas),
        placement=frame.placement,
        pool_placements=frame.pool_placements,
    )
    return _EstimateBase(
        other_changes=other_changes,
        built_at=base.built_at,
        snapshot=snapshot,
        index=index,
        revisions=base.revisions,
        by_pk=base.by_pk,
    )


def _full_estimate_base(now: datetime, *, leaving_out: str, other_changes: Any) -> _EstimateBase:
    snapshot, index = build_snapshot(now)
    index.jobs.pop(leaving_out, None)
    jobs = tuple(job for job in snapshot.jobs if job.id != leaving_out)
    return _EstimateBase(
        other_changes=other_changes,
        built_at=time.monotonic(),
        snapshot=replace(snapshot, jobs=jobs),
        index=index,
        revisions={seen.pk: seen.revision for seen in index.jobs.values()},
        by_pk={int(job.id): job for job in jobs},
    )


def _refreshed_estimate_base(base: _EstimateBase, *, leaving_out: int) -> _EstimateBase:
    """`base` with the live jobs as they are now: those whose revision moved, and new ones, read
    again; ended ones dropped; the rest kept as they were read."""
    order = raw_rows(
        Job.objects.filter(state__in=ACTIVE_STATES)
        .exclude(pk=leaving_out)
        .order_by("submitted_at", "id")
        .values_list("id", "revision")
    )
    changed = [pk for pk, revision in order if base.revisions.get(pk) != revision]
    if not changed and len(order) == len(base.revisions):
        return base
    by_pk = dict(base.by_pk)
    seen_jobs = {key: seen for key, seen in base.index.jobs.items()}
    if changed:
        quota_names = {quota_id: name for name, quota_id in base.index.quota_ids.items()}
        node_names = {node_id: name for name, node_id in base.index.node_ids.items()}
        held: dict[int, list[tuple[str, Any, float]]] = defaultdict(list)
        for job_id, node_id, devices, fraction in raw_rows(
            ReplicaPlacementRecord.objects.filter(job_id__in=changed, job__state__in=HOLDING_STATES)
            .order_by("job_id", "id")
            .values_list("job_id", "node_id", "devices", "fraction")
        ):
            held[job_id].append(
                (node_names[node_id], devices if isinstance(devices, str) else tuple(devices), fraction)
            )
        for row in raw_rows(
            with_shown_reason(Job.objects.filter(pk__in=changed))
            .annotate(submitted=Moment("submitted_at"), started=Moment("started_at"), evicted=Moment("evicted_at"))
            .values_list(*ENGINE_JOB_COLUMNS, *SEEN_JOB_COLUMNS)
        ):
            pk = row[0]
            key = job_key(pk)
            by_pk[pk] = engine_job(key, row, quota_names[row[QUOTA_ID_AT]], tuple(held.get(pk, ())))
            seen_jobs[key] = job_seen(row)
    live = {pk for pk, _revision in order}
    jobs = tuple(by_pk[pk] for pk, _revision in order if pk in by_pk)
    index = SnapshotIndex(
        jobs={key: seen for key, seen in seen_jobs.items() if seen.pk in live},
        node_ids=base.index.node_ids,
        quota_ids=base.index.quota_ids,
        fence_token=base.index.fence_token,
        fence_generation=base.index.fence_generation,
    )
    return _EstimateBase(
        other_changes=base.other_changes,
        built_at=base.built_at,
        snapshot=replace(base.snapshot, jobs=jobs),
        index=index,
        revisions=dict(order),
        by_pk={pk: job for pk, job in by_pk.items() if pk in live},
    )


def estimate_snapshot(now: datetime, *, job_pk: int) -> tuple[engine.Snapshot, SnapshotIndex]:
    """`build_snapshot` for a dry-run submit of the (saved, to be rolled back) job `job_pk`.

    The cluster is read in full at most every SCHEDULER_ESTIMATE_SNAPSHOT_SECONDS (default
    ESTIMATE_SNAPSHOT_SECONDS) and whenever an audited change other than a node's or a quota's
    happened; after those, the nodes and quotas are read again. In between only the live jobs
    that changed are read again. The job itself is read every time and goes last, as the newest
    submission does in `build_snapshot`'s order. An estimate is a forecast, and the submission it
    precedes meets a fresh cycle.
    """
    key = job_key(job_pk)
    other_changes = _other_changes()
    base = _estimate_base.get("cluster")
    reuse_for = float(getattr(settings, "SCHEDULER_ESTIMATE_SNAPSHOT_SECONDS", ESTIMATE_SNAPSHOT_SECONDS))
    if base is not None and time.monotonic() - base.built_at > reuse_for:
        base = None
    if base is not None and base.other_changes != other_changes:
        if _only_nodes_and_quotas_changed(base.other_changes, other_changes):
            base = _with_nodes_and_quotas_read_again(base, other_changes=other_changes)
        else:
            base = None
    if base is None:
        base = _full_estimate_base(now, leaving_out=key, other_changes=other_changes)
    else:
        base = _refreshed_estimate_base(base, leaving_out=job_pk)
    _estimate_base["cluster"] = base
    row = raw_rows(
        Job.objects.filter(pk=job_pk)
        .annotate(submitted=Moment("submitted_at"), started=Moment("started_at"), evicted=Moment("evicted_at"))
        .values_list(*ENGINE_JOB_COLUMNS, "name", "quota__name")
    )[0]
    width = len(ENGINE_JOB_COLUMNS)
    name, quota_name = row[width:]
    index = SnapshotIndex(
        jobs={**base.index.jobs},
        node_ids=base.index.node_ids,
        quota_ids=base.index.quota_ids,
        fence_token=base.index.fence_token,
        fence_generation=base.index.fence_generation,
    )
    index.jobs[key] = JobSeen(
        pk=job_pk,
        name=name,
        state=row[STATE_AT],
        revision=0,
        quota_id=row[QUOTA_ID_AT],
        gpus=row[GPUS_AT],
        grace_seconds=row[GRACE_SECONDS_AT],
        requeue=True,
        reason_code="",
        reason_message="",
        position=None,
    )
    job = engine_job(key, row[:width], quota_name, ())
    snapshot = replace(base.snapshot, jobs=(*base.snapshot.jobs, job), now=now.timestamp())
    return snapshot, index
