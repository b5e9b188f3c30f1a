"""What /metrics and the allocation charts read: grouped counts, histograms in the database,
allocation samples."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, NamedTuple, TypedDict

from django.db.models import Count, DurationField, ExpressionWrapper, F, OuterRef, Q, QuerySet, Subquery, Sum

from quotas.hooks import QuotaStatus as QuotaStatusFigures
from quotas.models import Quota
from scheduling.models import HOLDING_STATES, AllocationSample, CycleRecord, Job, JobEvent, JobEventKind
from scheduling.quota_figures import quota_status_figures
from scheduling.snapshot import build_snapshot

# Histogram buckets (upper bounds, seconds) of /metrics: a cycle takes milliseconds to a few
# seconds (S3-sized); an admission wait seconds to days.
CYCLE_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WAIT_BUCKETS: tuple[float, ...] = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0)


class HistogramFigures(TypedDict):
    buckets: list[tuple[float, int]]  # (upper bound in seconds, count at or below it), cumulative
    count: int
    sum: float


class MetricsFigures(TypedDict):
    jobs_by_quota_state: list[tuple[str, str, int]]
    quotas: list[tuple[str, float, QuotaStatusFigures]]
    preemptions: list[tuple[str, str, int]]
    cycle_duration: HistogramFigures
    admission_wait: HistogramFigures


def metrics_figures(*, now: datetime) -> MetricsFigures:
    """Everything /metrics shows, in a number of queries that does not grow with jobs, quotas or
    cycles: counts are grouped and histograms are conditional counts in the database."""
    jobs = [
        (quota, state, count)
        for quota, state, count in Job.objects.values_list("quota__name", "state")
        .order_by("quota__name", "state")
        .annotate(count=Count("id"))
    ]
    snapshot, _index = build_snapshot(now)
    figures = quota_status_figures(snapshot)
    quotas = [
        (quota.name, float(quota.gpus), figures[quota.name])
        for quota in Quota.objects.order_by("name").only("name", "gpus")
        if quota.name in figures
    ]
    preemptions = list(
        JobEvent.objects.filter(kind=JobEventKind.EVICTED)
        .values_list("job__quota__name", "rule")
        .order_by("job__quota__name", "rule")
        .annotate(count=Count("id"))
    )
    cycle = _histogram(CycleRecord.objects.all(), F("duration_ms") / 1000.0, CYCLE_BUCKETS, seconds=False)
    wait = ExpressionWrapper(F("at") - F("job__submitted_at"), output_field=DurationField())
    admission = _histogram(JobEvent.objects.filter(kind=JobEventKind.ADMITTED), wait, WAIT_BUCKETS, seconds=True)
    return MetricsFigures(
        jobs_by_quota_state=jobs,
        quotas=quotas,
        preemptions=[(quota, rule or "unknown", count) for quota, rule, count in preemptions],
        cycle_duration=cycle,
        admission_wait=admission,
    )


def _histogram(queryset: QuerySet[Any], value: Any, bounds: Iterable[float], *, seconds: bool) -> HistogramFigures:
    """Cumulative bucket counts and the sum of `value` over `queryset`, in one query. `seconds`:
    `value` is a duration (compared with timedeltas, summed in microseconds by the database)."""

    def limit(bound: float) -> Any:
        return timedelta(seconds=bound) if seconds else bound

    bounds = list(bounds)
    annotated = queryset.annotate(observed=value)
    figures = annotated.aggregate(
        count=Count("pk"),
        total=Sum("observed"),
        **{f"le_{index}": Count("pk", filter=Q(observed__lte=limit(bound))) for index, bound in enumerate(bounds)},
    )
    total = figures["total"]
    if isinstance(total, timedelta):
        total = total.total_seconds()
    return HistogramFigures(
        buckets=[(bound, int(figures[f"le_{index}"])) for index, bound in enumerate(bounds)],
        count=int(figures["count"]),
        sum=float(total or 0.0),
    )


def allocated_gpus_total() -> float:
    return float(Job.objects.filter(state__in=HOLDING_STATES).aggregate(total=Sum("allocated_gpus"))["total"] or 0.0)


class AllocationPoint(NamedTuple):
    at: datetime
    allocated: float
    guaranteed: float
    fair_share: float


def allocation_history(*, quota_ids: Iterable[int], since: datetime) -> dict[int, list[AllocationPoint]]:
    """Per quota, its samples since `since`, led by the last one before it (moved to `since`):
    the figures hold from a sample to the next, so that one says where the window starts.

    Two queries whatever the number of quotas; a quota with no sample at all is left out."""
    ids = list(quota_ids)
    history: dict[int, list[AllocationPoint]] = {quota_id: [] for quota_id in ids}
    # One index seek on (quota, at) per quota, not a scan of the older samples.
    before = (
        AllocationSample.objects.filter(quota_id=OuterRef("pk"), at__lt=since).order_by("-at", "-id").values("pk")[:1]
    )
    leading = AllocationSample.objects.filter(
        pk__in=Quota.objects.filter(pk__in=ids).annotate(last=Subquery(before)).values("last")
    ).values_list("quota_id", "allocated", "guaranteed", "fair_share")
    for quota_id, allocated, guaranteed, fair_share in leading:
        history[quota_id].append(AllocationPoint(since, allocated, guaranteed, fair_share))
    within = (
        AllocationSample.objects.filter(quota_id__in=ids, at__gte=since)
        .order_by("at", "id")
        .values_list("quota_id", "at", "allocated", "guaranteed", "fair_share")
    )
    for quota_id, at, allocated, guaranteed, fair_share in within:
        history[quota_id].append(AllocationPoint(at, allocated, guaranteed, fair_share))
    return {quota_id: points for quota_id, points in history.items() if points}
