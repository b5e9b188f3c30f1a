"""The charts' 1 h / 24 h / 7 d switch: the range in the URL, a bounded number of points per
series at every range whatever the number of samples, bucket means weighted by time, and the
"live" block a chart's script extends from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import AbstractUser

from quotas.models import Quota
from scheduling import allocation_history
from scheduling.clock import get_clock
from scheduling.models import AllocationSample
from scheduling.selectors import AllocationPoint
from tests.console.conftest import quota_id
from tests.console.test_quota_charts import figure
from tests.console.test_quota_pages import client_as

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def point(seconds: float, allocated: float, guaranteed: float = 8.0, fair_share: float = 8.0) -> AllocationPoint:
    return AllocationPoint(T0 + timedelta(seconds=seconds), allocated, guaranteed, fair_share)


def test_few_changes_are_drawn_as_exact_steps_ending_now() -> None:
    history = {1: [point(0, 0), point(60, 8), point(90, 2)]}
    series = allocation_history.allocation_series(history, since=T0, now=T0 + timedelta(seconds=120))
    assert series is not None and not series.bucketed
    assert [(moment - T0).total_seconds() for moment in series.moments] == [0, 60, 90, 120]
    assert [figures[0] for figures in series.figures[1]] == [0, 8, 2, 2]


def store(quota: Quota, samples: list[tuple[float, float]], *, guaranteed: float = 8.0) -> None:
    """Samples of `quota` at T0 + seconds, with the allocated figure given."""
    AllocationSample.objects.bulk_create(
        [
            AllocationSample(
                quota=quota,
                at=T0 + timedelta(seconds=seconds),
                allocated=allocated,
                guaranteed=guaranteed,
                fair_share=allocated,
            )
            for seconds, allocated in samples
        ],
        batch_size=2000,
    )


def reference_means(samples: list[tuple[float, float]], *, since: float, now: float, buckets: int) -> list[float]:
    """The time-weighted mean of a held figure over each bucket, the slow way: second by second
    (every sample here falls on a whole second, and the buckets are whole seconds wide)."""
    width = (now - since) / buckets
    held, index, ordered = 0.0, 0, sorted(samples)
    per_second = []
    for second in range(int(since), int(now)):
        while index < len(ordered) and ordered[index][0] <= second:
            held = ordered[index][1]
            index += 1
        per_second.append(held)
    return [round(sum(per_second[int(n * width) : int((n + 1) * width)]) / width, 3) for n in range(buckets)]


@pytest.mark.django_db
def test_many_samples_are_bucketed_by_the_database_to_the_bound(pai_world: dict[str, AbstractUser]) -> None:
    """A change every second for an hour, 8 GPUs on even seconds and 0 on odd ones: each 10 s
    bucket holds 8 half the time, a mean of 4, not whichever sample came last."""
    team = Quota.objects.get(name="Quota1.2")
    AllocationSample.objects.all().delete()
    store(team, [(second, 8.0 if second % 2 == 0 else 0.0) for second in range(3600)])
    now = T0 + timedelta(hours=1)
    series = allocation_history.quota_allocation_series(quota_ids=[team.pk], since=T0, now=now)
    assert series is not None and series.bucketed
    assert len(series.moments) == allocation_history.MAX_POINTS + 1
    assert series.moments[0] == T0 and series.moments[-1] == now
    assert [figures[0] for figures in series.figures[team.pk][:-1]] == [4.0] * allocation_history.MAX_POINTS
    assert series.figures[team.pk][-1] == (0.0, 8.0, 0.0)  # where it is now: the last sample's figures


@pytest.mark.django_db
def test_the_database_weights_each_figure_by_how_long_it_held(pai_world: dict[str, AbstractUser]) -> None:
    """Irregular samples, some buckets empty, one sample before the window: the database's bucket
    means are those computed second by second, and a quota with no sample in the window holds."""
    team, other = Quota.objects.get(name="Quota1.2"), Quota.objects.get(name="Quota1.1")
    AllocationSample.objects.all().delete()
    samples = [(-100.0, 3.0)] + [
        (float(second), float(second % 7)) for second in range(0, 3600, 7) if second % 300 > 40
    ]
    samples += [(3000.0 + second, 1.0 + second % 2) for second in range(0, 120, 3)]
    store(team, samples)
    store(other, [(-500.0, 5.0)], guaranteed=12.0)
    now = T0 + timedelta(hours=1)
    series = allocation_history.quota_allocation_series(quota_ids=[team.pk, other.pk], since=T0, now=now)
    assert series is not None and series.bucketed
    means = [figures[0] for figures in series.figures[team.pk][:-1]]
    buckets = allocation_history.MAX_POINTS
    assert means == pytest.approx(reference_means(samples, since=0, now=3600, buckets=buckets), abs=0.002)
    assert series.figures[other.pk] == [(5.0, 12.0, 5.0)] * (allocation_history.MAX_POINTS + 1)


def test_no_sample_no_series() -> None:
    assert allocation_history.allocation_series({1: []}, since=T0, now=T0 + timedelta(hours=1)) is None


@pytest.mark.parametrize(
    "key, words", [("1h", "the last hour"), ("24h", "the last 24 hours"), ("7d", "the last 7 days")]
)
def test_the_range_comes_from_the_url(key: str, words: str) -> None:
    assert allocation_history.chart_range(key).words == words


@pytest.mark.parametrize("key", [None, "", "2h", "1H", "7d " * 100])
def test_an_unknown_range_is_the_last_hour(key: str | None) -> None:
    assert allocation_history.chart_range(key) == allocation_history.DEFAULT_RANGE


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["1h", "24h", "7d"])
def test_every_range_returns_a_bounded_number_of_points(pai_world: dict[str, AbstractUser], key: str) -> None:
    """A sample every 20 s for 7 days (30,240 samples) of Quota1.2: at most MAX_POINTS + 1
    points per series at every range, on the Overview and on the Monitoring tab."""
    team = Quota.objects.get(name="Quota1.2")
    now = get_clock().now()
    span = allocation_history.chart_range(key).span
    AllocationSample.objects.bulk_create(
        [
            AllocationSample(
                quota=team,
                at=now - timedelta(days=7) + timedelta(seconds=20 * n),
                allocated=n % 3,
                guaranteed=20,
                fair_share=20,
            )
            for n in range(7 * 24 * 180)
        ],
        batch_size=2000,
    )
    client = client_as(pai_world, "platform-admin")
    page = client.get(f"/quotas/?view=overview&range={key}").content
    area = figure(page, "quota-allocation")
    for trace in area["data"]:
        assert 2 <= len(trace["x"]) <= allocation_history.MAX_POINTS + 1
        assert len(trace["y"]) == len(trace["x"])
    band = next(trace for trace in area["data"] if trace["name"] == "Quota1.2")
    if key == "1h":  # 180 changes in the hour: every one is drawn, as it was
        assert set(band["y"]) == {0, 1, 2} and len(band["y"]) >= 180
    else:  # 0, 1, 2 in turn, 20 s each: a mean of 1 in every bucket
        assert band["y"][:-1] == pytest.approx([1.0] * allocation_history.MAX_POINTS, abs=0.07)
    first = datetime.fromisoformat(area["data"][0]["x"][0]).replace(tzinfo=UTC)
    assert abs((now - span) - first) < timedelta(seconds=10)  # the page reads the clock a moment later
    assert area["live"]["range_seconds"] == span.total_seconds()
    assert f'aria-current="page" data-range="{key}"'.encode() in page
    monitoring = client.get(f"/quotas/{team.pk}/?tab=monitoring&range={key}", headers={"HX-Request": "true"}).content
    lines = figure(monitoring, "quota-monitoring")["data"]
    assert all(len(line["x"]) <= allocation_history.MAX_POINTS + 1 for line in lines)
    assert f"over {allocation_history.chart_range(key).words}".encode() in monitoring


@pytest.mark.django_db
def test_the_live_block_says_what_the_script_extends(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    page = client.get("/quotas/?view=overview&range=not-a-range").content
    assert b"Allocation over the last hour" in page
    live = figure(page, "quota-allocation")["live"]
    assert live["kind"] == "stacked" and live["max_points"] == allocation_history.LIVE_MAX_POINTS
    root, first, second = quota_id("Quota1"), quota_id("Quota1.1"), quota_id("Quota1.2")
    assert live["bands"] == [[[second, 1]], [[first, 1]], [[root, 1], [first, -1], [second, -1]]]
    assert live["quotas"] == {str(root): [24, 32], str(first): [24, 12], str(second): [0, 20]}
    # The table under the chart: Quota1.1 borrows 12 beyond its 12.
    assert b'data-band="1" data-band-field="over">12<' in page
    monitoring = client.get(f"/quotas/{first}/?tab=monitoring").content
    assert figure(monitoring, "quota-monitoring")["live"]["figures"] == [24, 12, 24]
    assert f'data-live="quota:{first}:allocated">24<'.encode() in monitoring


@pytest.mark.django_db
def test_the_monitoring_tab_draws_the_utilisation_of_its_jobs(pai_world: dict[str, AbstractUser]) -> None:
    """train-b (Quota1.1) on two GPUs at 90 % and 30 % for the last 10 minutes, at the raw level;
    a job of another quota at 5 % is not counted. The Quota1 tab counts its subtree's jobs."""
    from quotas.models import Node
    from scheduling import services as job_services
    from scheduling.models import Job
    from telemetry.models import GpuSample, Resolution
    from workspaces.models import Workspace

    now = get_clock().now()
    node = Node.objects.get(name="gpu-1")
    train = Job.objects.get(name="train-b")
    other_quota = Quota.objects.get(name="Quota1.2")
    other = job_services.submit_job(
        actor=pai_world["developer"],
        workspace=Workspace.objects.get(name="workspace-b"),
        quota=Quota.objects.get(name="Quota1.1"),
        name="elsewhere",
        kind="training",
        gpus=1,
    )
    Job.objects.filter(pk=other.pk).update(quota=other_quota)
    rows = []
    for minute in range(10):
        at = now - timedelta(minutes=10 - minute)
        for gpu, (job, busy) in enumerate(((train, 90.0), (train, 30.0), (other, 5.0))):
            rows.append(
                GpuSample(
                    node=node,
                    gpu=gpu,
                    job=job,
                    resolution=Resolution.RAW,
                    at=at,
                    utilisation=busy,
                    memory_used_mib=1,
                    memory_total_mib=80_000,
                )
            )
    GpuSample.objects.bulk_create(rows)
    client = client_as(pai_world, "platform-admin")
    tab = client.get(f"/quotas/{quota_id('Quota1.1')}/?tab=monitoring", headers={"HX-Request": "true"}).content
    line = figure(tab, "quota-utilisation")["data"][0]
    assert len(line["y"]) == 10 and set(line["y"]) == {60.0}  # (90 + 30) / 2 each minute
    assert set(line["customdata"]) == {2}
    subtree = client.get(f"/quotas/{quota_id('Quota1')}/?tab=monitoring", headers={"HX-Request": "true"}).content
    assert set(figure(subtree, "quota-utilisation")["data"][0]["y"]) == {round((90 + 30 + 5) / 3, 1)}
    # The week's view reads minute averages: none were written here.
    week = client.get(f"/quotas/{quota_id('Quota1.1')}/?tab=monitoring&range=7d", headers={"HX-Request": "true"})
    assert b"No GPU samples of its jobs over the last 7 days." in week.content
