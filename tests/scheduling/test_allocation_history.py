"""Allocation history: a sample per quota on every cycle that moves its figures, none on a
quiet cycle, written in one statement, and pruned past the retention and the row cap."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas import services as quota_services
from scheduling import history, services
from scheduling.clock import get_clock
from scheduling.models import AllocationSample
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db


def figures(quota: str) -> list[tuple[float, float, float]]:
    return list(
        AllocationSample.objects.filter(quota__name=quota)
        .order_by("at", "id")
        .values_list("allocated", "guaranteed", "fair_share")
    )


def test_a_cycle_that_moves_a_quota_records_its_figures(cluster: Cluster) -> None:
    services.converge()
    assert figures("team-a") == [(0.0, 8.0, 0.0)]  # the first cycle records where every quota starts
    cluster.submit("train", gpus=4)
    services.converge()
    # team-a now holds 4 (its fair share follows its request); its parent's subtree does too.
    assert figures("team-a")[-1] == (4.0, 8.0, 4.0)
    assert figures("Quota1")[-1][0] == 4.0
    # team-b did not move: still its first sample only.
    assert len(figures("team-b")) == 1


def test_a_cycle_that_changes_nothing_records_nothing(cluster: Cluster) -> None:
    cluster.submit("train", gpus=4)
    services.converge()
    before = AllocationSample.objects.count()
    services.run_cycle_now(trigger="test")
    services.run_cycle_now(trigger="test")
    assert AllocationSample.objects.count() == before


def test_the_next_cycle_compares_with_the_figures_kept_in_the_process(cluster: Cluster) -> None:
    cluster.submit("train", gpus=4)
    services.converge()
    services.run_cycle_now(trigger="test")  # this process committed last: its copy answers
    moved = {cluster.quotas["team-a"].pk: history.AllocationFigures(4.0, 8.0, 4.0)}
    with CaptureQueriesContext(connection) as captured:
        history.record_changes(figures=moved, at=get_clock().now(), seen_generation=history._latest.generation)
    assert not any("last_sample" in query["sql"] for query in captured.captured_queries)


def test_a_sample_written_by_anyone_else_makes_the_cycle_read_the_latest_again(cluster: Cluster) -> None:
    cluster.submit("train", gpus=4)
    services.converge()
    # Not through a cycle, so the fence does not move: the highest sample id says it changed.
    AllocationSample.objects.create(
        quota=cluster.quotas["team-a"], at=get_clock().now(), allocated=0.0, guaranteed=8.0, fair_share=0.0
    )
    services.run_cycle_now(trigger="test")
    assert figures("team-a")[-1] == (4.0, 8.0, 4.0)


def test_a_cleared_history_is_written_again_by_the_next_cycle(cluster: Cluster) -> None:
    services.converge()
    AllocationSample.objects.all().delete()
    services.run_cycle_now(trigger="test")
    assert figures("team-a") == [(0.0, 8.0, 0.0)]


def test_a_new_guarantee_is_recorded(cluster: Cluster) -> None:
    services.converge()
    quota_services.scale_quota(actor=None, quota=cluster.quotas["team-a"], gpus=6)
    services.converge()
    assert [guaranteed for _allocated, guaranteed, _share in figures("team-a")] == [8.0, 6.0]


def test_samples_are_written_in_one_statement_for_any_number_of_quotas(cluster: Cluster) -> None:
    services.converge()
    moved = {quota.pk: history.AllocationFigures(1.0, quota.gpus, 1.0) for quota in cluster.quotas.values()}
    with CaptureQueriesContext(connection) as captured:
        written = history.record_changes(figures=moved, at=get_clock().now())
    assert written == len(moved)
    assert len(captured) == 2  # the latest samples, one INSERT


def test_samples_past_the_retention_are_pruned_but_each_quota_keeps_its_latest(cluster: Cluster, settings: Any) -> None:
    settings.SCHEDULER_ALLOCATION_HISTORY_HOURS = 1
    now = get_clock().now()
    team_a, team_b = cluster.quotas["team-a"], cluster.quotas["team-b"]
    old = now - timedelta(hours=3)
    AllocationSample.objects.bulk_create(
        [
            AllocationSample(quota=team_a, at=old, allocated=1, guaranteed=8, fair_share=1),
            AllocationSample(quota=team_a, at=old + timedelta(minutes=1), allocated=2, guaranteed=8, fair_share=2),
            AllocationSample(quota=team_a, at=now - timedelta(minutes=5), allocated=3, guaranteed=8, fair_share=3),
            AllocationSample(quota=team_b, at=old, allocated=5, guaranteed=8, fair_share=5),
        ]
    )
    assert history.prune(now=now) == 2
    # team-a keeps its recent sample; team-b's only sample is old but still says where it stands.
    assert figures("team-a") == [(3.0, 8.0, 3.0)]
    assert figures("team-b") == [(5.0, 8.0, 5.0)]


def test_the_row_cap_drops_the_oldest_samples(cluster: Cluster, settings: Any) -> None:
    settings.SCHEDULER_ALLOCATION_HISTORY_MAX_ROWS = 3
    now = get_clock().now()
    team_a = cluster.quotas["team-a"]
    AllocationSample.objects.bulk_create(
        AllocationSample(quota=team_a, at=now - timedelta(minutes=10 - n), allocated=n, guaranteed=8, fair_share=n)
        for n in range(6)
    )
    assert history.prune(now=now) == 3
    assert [allocated for allocated, _g, _f in figures("team-a")] == [3.0, 4.0, 5.0]


def test_the_cycle_prunes_at_most_once_per_interval(cluster: Cluster, settings: Any) -> None:
    settings.SCHEDULER_ALLOCATION_HISTORY_HOURS = 1
    settings.SCHEDULER_ALLOCATION_HISTORY_PRUNE_SECONDS = 3600
    history._last_pruned = 0.0
    services.converge()
    team_b = cluster.quotas["team-b"]
    long_ago = get_clock().now() - timedelta(hours=5)
    AllocationSample.objects.create(
        quota=team_b, at=long_ago - timedelta(minutes=1), allocated=0, guaranteed=8, fair_share=0
    )
    cluster.submit("train", gpus=4)
    services.converge()
    assert AllocationSample.objects.filter(at__lt=long_ago).count() == 1  # pruned a moment ago: not yet
    history._last_pruned = 0.0
    cluster.submit("more", "team-b", gpus=1)
    services.converge()
    assert AllocationSample.objects.filter(at__lt=long_ago).count() == 0
