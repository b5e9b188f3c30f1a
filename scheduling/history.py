"""Allocation history: the cycle's writes of AllocationSample, and their retention.

These are the cycle's own writes, made inside its commit (scheduling.cycle), so they live
beside it rather than in `services.py`, which imports the cycle. A cycle writes one row per
quota whose allocated, guaranteed or fair-share figure moved since that quota's last sample,
all in one statement; a quiet cluster writes nothing. Reads are in `scheduling.selectors`.

Retention: samples older than SCHEDULER_ALLOCATION_HISTORY_HOURS go, and so do the oldest
beyond SCHEDULER_ALLOCATION_HISTORY_MAX_ROWS, except each quota's latest sample, which still
says what its figures are now (a chart's first step, and what the next cycle compares with).
The cycle prunes at most once per SCHEDULER_ALLOCATION_HISTORY_PRUNE_SECONDS per process.

Each quota's latest figures stay in this process between its cycles (`_Latest`), so a cycle
compares with memory instead of reading 1,000 latest samples back: valid while the fence says
no other cycle committed since this process's last (only a cycle writes samples) and the
highest sample id is still the one this process saw (a sample written by hand, or a cleared
table, reads everything again). Pruning keeps each quota's latest sample, so it never stales it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import cache
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection
from django.db.models import OuterRef, QuerySet, Subquery

from quotas.models import Quota
from scheduling import bulk
from scheduling.models import AllocationSample

DEFAULT_HOURS = 168.0  # the charts' longest range (7 d); the row cap bounds the storage
DEFAULT_MAX_ROWS = 500_000
DEFAULT_PRUNE_SECONDS = 60.0
# Figures are GPUs in thousandths (the engine's unit): float noise below that is no change.
_DIGITS = 3

_COLUMNS = ("quota_id", "at", "allocated", "guaranteed", "fair_share")


class AllocationFigures(NamedTuple):
    allocated: float
    guaranteed: float
    fair_share: float


def retention_hours() -> float:
    return float(getattr(settings, "SCHEDULER_ALLOCATION_HISTORY_HOURS", DEFAULT_HOURS))


def _rounded(figures: AllocationFigures) -> AllocationFigures:
    allocated, guaranteed, fair_share = figures
    return AllocationFigures(
        round(float(allocated), _DIGITS), round(float(guaranteed), _DIGITS), round(float(fair_share), _DIGITS)
    )


def _latest_ids() -> QuerySet[Any, Any]:
    """Per quota, the id of its latest sample: one index seek per quota on (quota, at)."""
    latest = AllocationSample.objects.filter(quota_id=OuterRef("pk")).order_by("-at", "-id").values("pk")[:1]
    return Quota.objects.annotate(last_sample=Subquery(latest)).filter(last_sample__isnull=False).values("last_sample")


def latest_figures() -> dict[int, AllocationFigures]:
    """Each quota's figures as its latest sample has them, in one query."""
    rows = AllocationSample.objects.filter(pk__in=_latest_ids()).values_list(
        "quota_id", "allocated", "guaranteed", "fair_share"
    )
    return {
        quota_id: AllocationFigures(allocated, guaranteed, fair_share)
        for quota_id, allocated, guaranteed, fair_share in rows
    }


class _Latest:
    """This process's copy of each quota's latest figures, and what it was valid for: the fence
    generation its cycle committed and the highest sample id then. `staged` is the copy of the
    commit in progress, taken up by `committed` once that commit is through."""

    def __init__(self) -> None:
        self.generation: int | None = None
        self.max_id: int | None = None
        self.figures: dict[int, AllocationFigures] = {}
        self.staged: tuple[dict[int, AllocationFigures], int | None] | None = None


_latest = _Latest()


def _highest_id() -> int | None:
    # A plain statement: the ORM's compiling of this one-row read cost more than the read, twice a cycle.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MAX({connection.ops.quote_name('id')}) FROM {_table()}")
        row = cursor.fetchone()
    return None if row is None else row[0]


@cache
def _table() -> str:
    return connection.ops.quote_name(AllocationSample._meta.db_table)


def record_changes(
    *, figures: Mapping[int, AllocationFigures], at: datetime, seen_generation: int | None = None
) -> int:
    """Write a sample for each quota whose figures differ from its latest sample; returns how many.

    Runs inside the caller's transaction (the cycle's commit), so the samples commit with the
    decisions that moved them, or not at all. `seen_generation` is the fence generation the
    cycle's snapshot read: where this process's last commit left the fence there, its copy of
    the latest figures answers (see `_Latest`); the copy taken here waits for `committed`."""
    cached = _latest.generation is not None and _latest.generation == seen_generation
    _latest.generation, _latest.staged = None, None  # nothing stays valid if this commit fails
    highest = _highest_id() if cached else None
    last = _latest.figures if cached and highest == _latest.max_id else latest_figures()
    rows = []
    # `_rounded`, inline, and compared as a plain tuple (a named tuple equals one): every quota,
    # every cycle (S3: 1,110 quotas), and most of them unmoved.
    for quota_id, (allocated, guaranteed, fair_share) in figures.items():
        rounded = (
            round(float(allocated), _DIGITS),
            round(float(guaranteed), _DIGITS),
            round(float(fair_share), _DIGITS),
        )
        if last.get(quota_id) != rounded:
            rows.append((quota_id, at, *rounded))
            last[quota_id] = AllocationFigures._make(rounded)
    bulk.insert(AllocationSample, _COLUMNS, rows)
    if seen_generation is not None:
        # Nothing written here: the highest id is the one just read, in the same transaction.
        _latest.staged = (last, highest if cached and not rows else _highest_id())
    return len(rows)


def committed(generation: int) -> None:
    """The cycle's commit that called `record_changes` is through and moved the fence to
    `generation`: its figures are each quota's latest while the fence stays there."""
    if _latest.staged is None:
        return
    _latest.figures, _latest.max_id = _latest.staged
    _latest.generation, _latest.staged = generation, None


def prune(*, now: datetime) -> int:
    """Drop samples past the retention and the oldest beyond the row cap; returns how many went."""
    keep_latest = _latest_ids()
    cutoff = now - timedelta(hours=retention_hours())
    deleted, _ = AllocationSample.objects.filter(at__lt=cutoff).exclude(pk__in=keep_latest).delete()
    max_rows = int(getattr(settings, "SCHEDULER_ALLOCATION_HISTORY_MAX_ROWS", DEFAULT_MAX_ROWS))
    excess = AllocationSample.objects.count() - max_rows
    if excess > 0:
        # Ids follow time (samples are written as cycles commit), so the oldest have the lowest.
        boundary = AllocationSample.objects.order_by("id").values_list("id", flat=True)[excess - 1 : excess].first()
        if boundary is not None:
            more, _ = AllocationSample.objects.filter(id__lte=boundary).exclude(pk__in=keep_latest).delete()
            deleted += more
    return deleted


_last_pruned = 0.0


def prune_now_and_then(*, now: datetime) -> int:
    """`prune`, at most once per SCHEDULER_ALLOCATION_HISTORY_PRUNE_SECONDS in this process: a
    cycle runs every few seconds, and old samples need not go the moment they age out."""
    global _last_pruned
    interval = float(getattr(settings, "SCHEDULER_ALLOCATION_HISTORY_PRUNE_SECONDS", DEFAULT_PRUNE_SECONDS))
    started = time.monotonic()
    if _last_pruned and started - _last_pruned < interval:
        return 0
    _last_pruned = started
    return prune(now=now)
