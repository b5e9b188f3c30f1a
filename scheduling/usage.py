"""Reads of a workspace's jobs for its pages: GPU-hours used (Usage tab) and the jobs a member
removal or a quota unbinding leaves running (their previews).

They live in scheduling because they read jobs and events, and imports point one way
(console → scheduling → workspaces); the workspace tabs that show them are scheduling/workspace_views.py.

How GPU-hours are worked out (docs/workspaces.md, "How usage is computed"):

- A job holds GPUs from its `admitted` event until `requeued`, `finished`, `failed` or
  `cancelled`; an evicted job keeps holding through its grace period (until `requeued` or
  `failed`). The amount is the one the `admitted` event names ("…, 4 GPUs on dgx-1"), moved by
  `grown` and `shrunk` events that name one; when an event names none, the job's own request
  (GPUs per replica × replicas) stands in.
- Within guarantee versus borrowed: at every instant, a quota's jobs (of every workspace) hold
  U GPUs against its guarantee G (today's `Quota.gpus`: past scales are not replayed). The
  share min(1, G / U) of each job's GPUs is within guarantee and the rest is borrowed, so every
  job on a quota that is over its guarantee borrows in proportion to what it holds.
- Lost to eviction: for every `evicted` event in the window, the job's GPUs times the time from
  the start of that run (its last `started` or `moved` since admission, else the admission) to
  the eviction: the work done since the run began, assuming no checkpoint.

Bounded: three queries (the quotas, the jobs, their events) whatever the number of jobs.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from django.db.models import Count, Q, QuerySet

from quotas.models import Quota
from scheduling.models import HOLDING_STATES, Job, JobEvent, JobEventKind, JobState
from workspaces.models import Workspace

WINDOWS: Final[tuple[tuple[str, timedelta], ...]] = (
    ("Last 24 hours", timedelta(hours=24)),
    ("Last 7 days", timedelta(days=7)),
    ("Last 30 days", timedelta(days=30)),
)
_GPUS_IN_MESSAGE: Final = re.compile(r"(\d+(?:\.\d+)?) GPUs")
_HOLD_ENDS: Final = frozenset(
    {JobEventKind.REQUEUED, JobEventKind.FINISHED, JobEventKind.FAILED, JobEventKind.CANCELLED}
)
_EVENT_KINDS: Final = (
    JobEventKind.ADMITTED,
    JobEventKind.STARTED,
    JobEventKind.MOVED,
    JobEventKind.GROWN,
    JobEventKind.SHRUNK,
    JobEventKind.EVICTED,
    *_HOLD_ENDS,
)
_HOUR: Final = 3600.0


@dataclass
class UsageFigures:
    """GPU-hours of one quota or one user over one window."""

    name: str
    within: float = 0.0
    borrowed: float = 0.0
    lost: float = 0.0

    @property
    def total(self) -> float:
        return self.within + self.borrowed


@dataclass
class WindowUsage:
    label: str
    start: datetime
    quotas: list[UsageFigures] = field(default_factory=list)
    users: list[UsageFigures] = field(default_factory=list)
    total: UsageFigures = field(default_factory=lambda: UsageFigures(name="All"))


@dataclass(frozen=True)
class _Segment:
    """A job held `gpus` GPUs of its quota from `start` to `end` (seconds since the epoch)."""

    job_id: int
    start: float
    end: float
    gpus: float


@dataclass(frozen=True)
class _Eviction:
    job_id: int
    at: float
    gpu_seconds: float


def workspace_usage(
    *, workspace: Workspace, now: datetime, windows: Sequence[tuple[str, timedelta]] = WINDOWS
) -> list[WindowUsage]:
    """The workspace's GPU-hours over each window, per quota and per user (the module's rules)."""
    earliest = now - max(length for _label, length in windows)
    quota_ids = set(workspace.bindings.values_list("quota_id", flat=True))
    # Jobs that may have held GPUs in the window: submitted before now, not finished before it starts.
    may_overlap = Q(submitted_at__lte=now) & (Q(finished_at__isnull=True) | Q(finished_at__gte=earliest))
    own_quotas = Job.objects.filter(may_overlap, workspace=workspace).values_list("quota_id", flat=True).distinct()
    quota_ids |= set(own_quotas)
    quotas = {row[0]: row for row in Quota.objects.filter(pk__in=quota_ids).values_list("pk", "name", "gpus")}
    jobs = {
        row["pk"]: row
        for row in Job.objects.filter(may_overlap, quota_id__in=quotas).values(
            "pk", "workspace_id", "quota_id", "gpus", "replicas", "owner__username"
        )
    }
    events = JobEvent.objects.filter(
        Q(job__submitted_at__lte=now) & (Q(job__finished_at__isnull=True) | Q(job__finished_at__gte=earliest)),
        job__quota_id__in=quotas,
        kind__in=_EVENT_KINDS,
        at__lte=now,
    ).values_list("job_id", "kind", "at", "message")
    segments, evictions = _holdings(events, jobs, now.timestamp())

    by_quota: dict[int, list[_Segment]] = defaultdict(list)
    for segment in segments:
        by_quota[jobs[segment.job_id]["quota_id"]].append(segment)
    within_curve = {quota_id: _within_share_curve(parts, quotas[quota_id][2]) for quota_id, parts in by_quota.items()}

    end = now.timestamp()
    return [
        _window(
            label,
            now - length,
            end,
            workspace_id=workspace.pk,
            jobs=jobs,
            quotas=quotas,
            segments=segments,
            evictions=evictions,
            within_curve=within_curve,
        )
        for label, length in windows
    ]


def _window(
    label: str,
    since: datetime,
    end: float,
    *,
    workspace_id: int,
    jobs: Mapping[int, Mapping[str, Any]],
    quotas: dict[int, tuple[int, str, float]],
    segments: list[_Segment],
    evictions: list[_Eviction],
    within_curve: dict[int, _WithinCurve],
) -> WindowUsage:
    start = since.timestamp()
    per_quota: dict[int, UsageFigures] = {}
    per_user: dict[str, UsageFigures] = {}
    total = UsageFigures(name="All")

    def figures_of(job_id: int) -> tuple[UsageFigures, UsageFigures, UsageFigures]:
        job = jobs[job_id]
        quota_id = job["quota_id"]
        user = job["owner__username"] or "(deleted user)"
        return (
            per_quota.setdefault(quota_id, UsageFigures(name=quotas[quota_id][1])),
            per_user.setdefault(user, UsageFigures(name=user)),
            total,
        )

    for segment in segments:
        if jobs[segment.job_id]["workspace_id"] != workspace_id:
            continue  # other workspaces' jobs count towards the quota's load only
        low, high = max(segment.start, start), min(segment.end, end)
        if high <= low:
            continue
        curve = within_curve[jobs[segment.job_id]["quota_id"]]
        within = segment.gpus * (curve.at(high) - curve.at(low)) / _HOUR
        borrowed = max(0.0, segment.gpus * (high - low) / _HOUR - within)
        for figures in figures_of(segment.job_id):
            figures.within += within
            figures.borrowed += borrowed
    for eviction in evictions:
        if jobs[eviction.job_id]["workspace_id"] != workspace_id or not start <= eviction.at <= end:
            continue
        for figures in figures_of(eviction.job_id):
            figures.lost += eviction.gpu_seconds / _HOUR
    return WindowUsage(
        label=label,
        start=since,
        quotas=sorted(per_quota.values(), key=lambda figures: figures.name),
        users=sorted(per_user.values(), key=lambda figures: (-figures.total, figures.name)),
        total=total,
    )


def _gpus_named(message: str) -> float | None:
    match = _GPUS_IN_MESSAGE.search(message)
    return float(match[1]) if match else None


def _holdings(
    events: Iterable[tuple[int, str, datetime, str]], jobs: Mapping[int, Mapping[str, Any]], now: float
) -> tuple[list[_Segment], list[_Eviction]]:
    """Replays each job's events (ordered by time) into constant-GPU segments and evictions."""
    segments: list[_Segment] = []
    evictions: list[_Eviction] = []
    holding: dict[int, tuple[float, float]] = {}  # job → (since, gpus)
    run_start: dict[int, float] = {}
    for job_id, kind, at_time, message in sorted(events, key=lambda event: (event[2], event[0])):
        at = at_time.timestamp()
        job = jobs[job_id]
        held = holding.get(job_id)
        if kind == JobEventKind.ADMITTED:
            if held is not None:  # an admission without an end before it: close the old run
                segments.append(_Segment(job_id, held[0], at, held[1]))
            requested = float(job["gpus"]) * int(job["replicas"])
            holding[job_id] = (at, _gpus_named(message) or requested)
            run_start[job_id] = at
        elif held is None:
            continue  # the job held nothing (events before the window's jobs' admission)
        elif kind in (JobEventKind.STARTED, JobEventKind.MOVED):
            run_start[job_id] = at
        elif kind in (JobEventKind.GROWN, JobEventKind.SHRUNK):
            change = _gpus_named(message)
            if change is None:
                continue
            segments.append(_Segment(job_id, held[0], at, held[1]))
            sign = 1 if kind == JobEventKind.GROWN else -1
            holding[job_id] = (at, max(0.0, held[1] + sign * change))
        elif kind == JobEventKind.EVICTED:
            evictions.append(_Eviction(job_id, at, held[1] * max(0.0, at - run_start.get(job_id, held[0]))))
        elif kind in _HOLD_ENDS:
            segments.append(_Segment(job_id, held[0], at, held[1]))
            del holding[job_id]
    segments.extend(_Segment(job_id, since, now, gpus) for job_id, (since, gpus) in holding.items())
    return [segment for segment in segments if segment.end > segment.start and segment.gpus > 0], evictions


@dataclass(frozen=True)
class _WithinCurve:
    """W(t) = ∫ min(1, G / U(s)) ds: the seconds of within-guarantee share up to t."""

    times: list[float]
    cumulative: list[float]
    shares: list[float]  # the share on [times[i], times[i + 1])

    def at(self, moment: float) -> float:
        index = bisect_right(self.times, moment) - 1
        if index < 0:
            return 0.0
        return self.cumulative[index] + self.shares[index] * (moment - self.times[index])


def _within_share_curve(segments: Sequence[_Segment], guaranteed: float) -> _WithinCurve:
    changes: dict[float, float] = defaultdict(float)
    for segment in segments:
        changes[segment.start] += segment.gpus
        changes[segment.end] -= segment.gpus
    times = sorted(changes)
    cumulative: list[float] = []
    shares: list[float] = []
    held = 0.0
    total = 0.0
    for index, moment in enumerate(times):
        if index:
            total += shares[-1] * (moment - times[index - 1])
        held += changes[moment]
        cumulative.append(total)
        shares.append(1.0 if held <= guaranteed + 1e-9 else guaranteed / held)
    return _WithinCurve(times=times, cumulative=cumulative, shares=shares)


# --- previews of member removal and quota unbinding --------------------------------------------


@dataclass
class LiveJobs:
    """Running (holding GPUs, releasing included) and pending jobs: counts, and the first names."""

    running: int
    pending: int
    running_names: list[str]
    pending_names: list[str]


_NAMES_SHOWN: Final = 20


def _live_jobs(jobs: QuerySet[Job]) -> LiveJobs:
    live = jobs.filter(state__in=(*HOLDING_STATES, JobState.PENDING))
    counts = live.aggregate(
        running=Count("pk", filter=Q(state__in=HOLDING_STATES)), pending=Count("pk", filter=Q(state=JobState.PENDING))
    )
    ordered = live.order_by("submitted_at", "id")
    return LiveJobs(
        running=counts["running"],
        pending=counts["pending"],
        running_names=list(ordered.filter(state__in=HOLDING_STATES).values_list("name", flat=True)[:_NAMES_SHOWN]),
        pending_names=list(ordered.filter(state=JobState.PENDING).values_list("name", flat=True)[:_NAMES_SHOWN]),
    )


def member_live_jobs(*, workspace: Workspace, user_id: int) -> LiveJobs:
    """The member's running and pending jobs in the workspace (three queries)."""
    return _live_jobs(Job.objects.filter(workspace=workspace, owner_id=user_id))


def binding_live_jobs(*, workspace: Workspace, quota: Quota) -> LiveJobs:
    """The workspace's running and pending jobs on the quota (three queries)."""
    return _live_jobs(Job.objects.filter(workspace=workspace, quota=quota))
