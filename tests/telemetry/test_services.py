"""Recording samples (bounds, one bulk statement), the synthetic curves, and the retention:
downsampling and pruning with the clock moved (time-machine)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from telemetry import retention, selectors, services, synthetic, tasks
from telemetry.models import GpuSample, Resolution
from telemetry.services import GpuReading
from tests.scheduling.test_agent_live import unlocked

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)


def reading(gpu: int, **more: Any) -> GpuReading:
    figures: dict[str, Any] = {"utilisation": 50.0, "memory_used_mib": 1000, "memory_total_mib": 81920, **more}
    return GpuReading(gpu=gpu, **figures)


def test_a_report_is_written_in_one_statement(cluster: dict[str, Any]) -> None:
    node, train = cluster["nodes"][0], cluster["train"]
    with CaptureQueriesContext(connection) as queries:
        written = services.record_gpu_samples(node, [reading(gpu, job_id=train.pk) for gpu in range(8)])
    assert written == 8
    inserts = [query for query in queries.captured_queries if "INSERT" in query["sql"].upper()]
    assert len(inserts) == 1, queries.captured_queries
    assert GpuSample.objects.filter(resolution=Resolution.RAW, node=node, job=train).count() == 8


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [
        ({"gpu": 8}, "gpu", "dgx-1 has GPUs 0 to 7"),
        ({"utilisation": 100.5}, "utilisation", "100.5 is not between 0 and 100"),
        ({"utilisation": float("nan")}, "utilisation", "not between 0 and 100"),
        ({"memory_used_mib": 90000}, "memory_used_mib", "90000 MiB used of 81920 MiB total"),
        ({"memory_total_mib": 0, "memory_used_mib": 0}, "memory_total_mib", "0 MiB is not between 1"),
        ({"job_id": -3}, "job_id", "-3 is not a job id"),
    ],
)
def test_out_of_bounds_refuses_the_whole_report(
    cluster: dict[str, Any], bad: dict[str, Any], field: str, words: str
) -> None:
    node = cluster["nodes"][0]
    figures = {"gpu": 1, **bad}
    with pytest.raises(ValidationError) as refused:
        services.record_gpu_samples(node, [reading(0), reading(**figures)])
    assert field in refused.value.message_dict
    assert words in " ".join(refused.value.message_dict[field])
    assert GpuSample.objects.count() == 0


def test_twice_the_same_gpu_too_many_and_a_clock_far_off_are_refused(cluster: dict[str, Any], settings: Any) -> None:
    node = cluster["nodes"][0]
    with pytest.raises(ValidationError, match="GPU 2 twice"):
        services.record_gpu_samples(node, [reading(2), reading(2)])
    with pytest.raises(ValidationError, match="ahead of the server"):
        services.record_gpu_samples(node, [reading(0)], at=datetime.now(UTC) + timedelta(minutes=5))
    with pytest.raises(ValidationError, match="older than the raw retention"):
        services.record_gpu_samples(node, [reading(0)], at=datetime.now(UTC) - timedelta(hours=2))
    settings.TELEMETRY_MAX_SAMPLES_PER_CALL = 4
    with pytest.raises(ValidationError, match="5 samples in one report; at most 4"):
        services.record_gpu_samples(node, [reading(gpu) for gpu in range(5)])


def test_an_unknown_job_is_kept_as_no_job(cluster: dict[str, Any]) -> None:
    services.record_gpu_samples(cluster["nodes"][0], [reading(0, job_id=999_999)])
    assert GpuSample.objects.get().job_id is None


def test_json_readings_are_parsed_and_a_missing_field_named() -> None:
    parsed = services.parse_gpu_readings(
        [{"gpu": 0, "utilisation": "12.5", "memory_used_mib": 10, "memory_total_mib": 100, "job_id": None}]
    )
    assert parsed == [GpuReading(gpu=0, utilisation=12.5, memory_used_mib=10, memory_total_mib=100)]
    with pytest.raises(ValidationError, match="sample 0: KeyError 'memory_total_mib'"):
        services.parse_gpu_readings([{"gpu": 0, "utilisation": 1, "memory_used_mib": 1}])


# ---------------------------------------------------------------------------------------------
# Synthetic curves
# ---------------------------------------------------------------------------------------------


def test_curves_are_deterministic_and_shaped_by_kind() -> None:
    moments = [T0.timestamp() + 5 * step for step in range(720 * 24)]  # a day every 5 s
    training = [synthetic.utilisation(job_id=12, kind="training", gpu=0, at=at) for at in moments]
    again = [synthetic.utilisation(job_id=12, kind="training", gpu=0, at=at) for at in moments]
    assert training == again
    assert min(training) >= 85 and max(training) <= 95
    assert training != [synthetic.utilisation(job_id=13, kind="training", gpu=0, at=at) for at in moments]

    notebook = [synthetic.utilisation(job_id=12, kind="notebook", gpu=0, at=at) for at in moments]
    busy = sum(1 for value in notebook if value >= 55) / len(notebook)
    assert 0.15 < busy < 0.35, busy  # bursts about a quarter of the time
    assert sum(1 for value in notebook if value <= 8) / len(notebook) > 0.6

    hour = [
        synthetic.utilisation(job_id=12, kind="inference", gpu=0, at=T0.replace(hour=h).timestamp()) for h in range(24)
    ]
    assert max(hour[12:17]) > 70 and min(hour[0:5]) < 30  # busy in the afternoon, quiet at night (UTC)

    assert synthetic.utilisation(job_id=12, kind="unknown", gpu=0, at=moments[0]) == 0
    shared = synthetic.gpu_reading(
        [(1, "training", 0.5), (2, "training", 0.5)], gpu=0, at=moments[0], memory_total_mib=1000
    )
    assert 85 <= shared[0] <= 95 and 800 <= shared[1] <= 920


def test_the_beat_task_samples_every_gpu_of_the_simulated_nodes(cluster: dict[str, Any]) -> None:
    train, notebook = cluster["train"], cluster["notebook"]
    with CaptureQueriesContext(connection) as queries:
        written = tasks.sample_simulated_gpus()
    assert written == 16
    assert len(queries.captured_queries) <= 6  # nodes, placements, job ids, the insert (+ savepoint)
    rows = list(GpuSample.objects.filter(resolution=Resolution.RAW))
    held = {(row.node_id, row.gpu): row for row in rows if row.job_id is not None}
    assert sorted(row.job_id for row in held.values() if row.job_id is not None) == sorted(
        [train.pk, train.pk, notebook.pk]
    )
    for row in held.values():
        if row.job_id == train.pk:
            assert 85 <= row.utilisation <= 95
            assert row.memory_used_mib >= 0.8 * 81920
    idle = [row for row in rows if row.job_id is None]
    assert len(idle) == 13 and all(row.utilisation == 0 and row.memory_used_mib == 0 for row in idle)
    # The same instant gives the same figures (deterministic).
    at = rows[0].at
    again = services.simulated_readings(at=at)
    figures = {(target.id, r.gpu): (r.utilisation, r.memory_used_mib, r.job_id) for target, rs in again for r in rs}
    assert figures == {(row.node_id, row.gpu): (row.utilisation, row.memory_used_mib, row.job_id) for row in rows}


def test_a_node_that_is_down_or_not_simulated_is_not_sampled(cluster: dict[str, Any]) -> None:
    from quotas.models import Node

    Node.objects.filter(pk=cluster["nodes"][1].pk).update(state="not_ready")
    assert services.record_simulated_samples() == 8
    Node.objects.filter(pk=cluster["nodes"][0].pk).update(executor="agent")
    assert services.record_simulated_samples() == 0


# ---------------------------------------------------------------------------------------------
# Retention
# ---------------------------------------------------------------------------------------------


def sample_for(cluster: dict[str, Any], *, start: datetime, seconds: int, every: int = 5) -> None:
    """The beat sampler with the clock moved, every `every` seconds for `seconds`."""
    with time_machine.travel(start, tick=False) as traveller:
        for _ in range(seconds // every):
            services.record_simulated_samples()
            traveller.shift(timedelta(seconds=every))


def test_downsampling_averages_whole_minutes_and_hours_then_prunes(cluster: dict[str, Any]) -> None:
    sample_for(cluster, start=T0, seconds=3 * 60)  # 09:00:00 .. 09:02:55, 36 samples per GPU
    train = cluster["train"]
    with time_machine.travel(T0 + timedelta(minutes=3, seconds=20), tick=False):
        outcome = tasks.downsample_and_prune()
    # Three whole minutes for 16 GPUs; no whole hour yet.
    assert outcome["downsampled"] == {Resolution.MINUTE: 48, Resolution.HOUR: 0}
    minutes = GpuSample.objects.filter(resolution=Resolution.MINUTE, job=train, gpu__in=[0, 1]).order_by("at", "gpu")
    first = minutes[0]
    raw = GpuSample.objects.filter(
        resolution=Resolution.RAW, job=train, node_id=first.node_id, gpu=first.gpu, at__lt=T0 + timedelta(minutes=1)
    )
    assert raw.count() == 12
    assert first.at == T0
    assert first.utilisation == pytest.approx(sum(r.utilisation for r in raw) / 12, abs=0.05)
    # Run again: nothing new to average.
    with time_machine.travel(T0 + timedelta(minutes=3, seconds=30), tick=False):
        assert tasks.downsample_and_prune()["downsampled"] == {Resolution.MINUTE: 0, Resolution.HOUR: 0}

    # Two hours later: the hour 09:00 is averaged from its minutes, raw samples are pruned.
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        outcome = tasks.downsample_and_prune()
    assert outcome["downsampled"][Resolution.HOUR] == 16
    assert outcome["pruned"][Resolution.RAW] == 16 * 36
    assert not GpuSample.objects.filter(resolution=Resolution.RAW).exists()
    hour = GpuSample.objects.get(resolution=Resolution.HOUR, job=train, node_id=first.node_id, gpu=first.gpu)
    assert hour.at == T0 and 85 <= hour.utilisation <= 95

    # Eight days on, the minutes are gone; 91 days on, the hours too.
    with time_machine.travel(T0 + timedelta(days=8), tick=False):
        assert tasks.downsample_and_prune()["pruned"][Resolution.MINUTE] == 48
    assert GpuSample.objects.filter(resolution=Resolution.HOUR).count() == 16
    with time_machine.travel(T0 + timedelta(days=91), tick=False):
        assert tasks.downsample_and_prune()["pruned"][Resolution.HOUR] == 16
    assert GpuSample.objects.count() == 0


def test_retention_follows_the_settings(cluster: dict[str, Any], settings: Any) -> None:
    settings.TELEMETRY_RAW_RETENTION_HOURS = 0.5
    sample_for(cluster, start=T0, seconds=60)
    with time_machine.travel(T0 + timedelta(minutes=40), tick=False):
        pruned = retention.downsample_and_prune()["pruned"]
    assert pruned[Resolution.RAW] == 16 * 12
    assert GpuSample.objects.filter(resolution=Resolution.MINUTE).count() == 16
    assert selectors.resolution_for(timedelta(minutes=20)) == Resolution.RAW
    assert selectors.resolution_for(timedelta(hours=24)) == Resolution.MINUTE
    assert selectors.resolution_for(timedelta(days=30)) == Resolution.HOUR


def test_a_job_changing_gpus_within_a_minute_gets_its_own_average(cluster: dict[str, Any]) -> None:
    node, train, notebook = cluster["nodes"][0], cluster["train"], cluster["notebook"]
    with time_machine.travel(T0, tick=False) as traveller:
        for step in range(12):
            job = train if step < 6 else notebook
            services.record_gpu_samples(node, [reading(5, job_id=job.pk, utilisation=90.0 if step < 6 else 10.0)])
            traveller.shift(timedelta(seconds=5))
    with time_machine.travel(T0 + timedelta(minutes=2), tick=False):
        retention.downsample_and_prune()
    averages = dict(GpuSample.objects.filter(resolution=Resolution.MINUTE).values_list("job_id", "utilisation"))
    assert averages == {train.pk: 90.0, notebook.pk: 10.0}


def test_selectors_latest_reading_and_job_series(cluster: dict[str, Any]) -> None:
    train = cluster["train"]
    sample_for(cluster, start=datetime.now(UTC) - timedelta(seconds=30), seconds=30)
    now = datetime.now(UTC)
    with CaptureQueriesContext(connection) as queries:
        latest = selectors.latest_gpu_readings(now=now)
    assert len(queries.captured_queries) == 1
    assert len(latest) == 16
    assert {entry.job for entry in latest if entry.job_id == train.pk} == {"train"}
    newest = max(entry.at for entry in latest)
    assert all(entry.at == newest for entry in latest)
    assert selectors.latest_gpu_readings(now=now + timedelta(minutes=5)) == []  # stale: none
    assert len(selectors.latest_gpu_readings(now=now, node_ids=[cluster["nodes"][1].pk])) == 8

    series = selectors.job_gpu_series(job_id=train.pk, since=now - timedelta(hours=1), resolution=Resolution.RAW)
    placed = [f"{p.node.name} GPU {gpu}" for p in train.placements.select_related("node") for gpu in p.devices]
    assert [entry.label for entry in series] == sorted(placed)
    assert all(len(entry.at) == 6 for entry in series)


def test_beat_runs_the_sampler_and_the_downsampling() -> None:
    from django.conf import settings

    schedule = settings.CELERY_BEAT_SCHEDULE
    sampler, retention = schedule["telemetry-sample-simulated-gpus"], schedule["telemetry-downsample-and-prune"]
    assert sampler["task"] == tasks.sample_simulated_gpus.name
    assert sampler["schedule"] == settings.TELEMETRY_SAMPLE_SECONDS == 5.0
    assert retention["task"] == tasks.downsample_and_prune.name and retention["schedule"] == 60.0
    assert "scheduling-cycle" in schedule  # added to, not replaced


@pytest.mark.django_db(transaction=True)
def test_agents_readings_are_written_by_the_writer_thread_within_the_flush_time(
    cluster: dict[str, Any], settings: Any
) -> None:
    """No beat writes readings (a beat that did waited for them): the process's writer thread does."""
    settings.AGENT_SAMPLES_FLUSH_SECONDS = 0.05
    node = cluster["nodes"][0]
    readings = [{"index": gpu, "utilization": 50.0, "memory_used_mib": 10} for gpu in range(8)]
    try:
        assert services.record_agent_samples(node=node, samples=readings) == 0
        deadline = time.monotonic() + 10
        # The writer thread's insert and this read meet on the in-memory SQLite's shared cache,
        # whose table lock fails the read instead of waiting: read again (`unlocked`).
        while unlocked(GpuSample.objects.filter(node=node).count) < 8 and time.monotonic() < deadline:
            time.sleep(0.02)
        written = unlocked(lambda: list(GpuSample.objects.filter(node=node).values_list("gpu", flat=True)))
        assert sorted(written) == list(range(8))
    finally:
        settings.AGENT_SAMPLES_FLUSH_SECONDS = 0
        services.flush_agent_samples()
