"""Writes of per-GPU telemetry: record samples (the node agent and the simulated sampler). Their
downsampling and pruning are retention.py's.

Samples are measurements, not anyone's decision: they carry no audit record (as the cycle's
AllocationSample does not). Every write is a bulk insert or a ranged delete.

Node agents' beats reach `record_agent_samples` after they commit, which keeps each web process's
readings for up to a second and writes them together (docs/agent.md); `record_gpu_samples` writes
one report at once (docs/telemetry.md).
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import DatabaseError, close_old_connections, reset_queries, transaction

from quotas.models import Node
from scheduling import bulk
from scheduling import selectors as scheduling_selectors
from scheduling.clock import get_clock
from telemetry import live, selectors, synthetic
from telemetry.models import GpuSample, Resolution

logger = logging.getLogger(__name__)

# A GPU with more memory than this is a mistake in the report (the largest today hold 192 GB).
MAX_MEMORY_MIB: Final = 1_048_576
# A report stamped this far ahead of the server's clock is refused (clocks drift a little).
MAX_CLOCK_AHEAD: Final = timedelta(seconds=60)
_COLUMNS: Final = (
    "node_id", "gpu", "job_id", "resolution", "at", "utilisation", "memory_used_mib", "memory_total_mib",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's reading, as the node agent (NVML) or the simulated executor reports it.

    gpu: the device index on the node (0 to the node's GPUs - 1); utilisation: percent busy,
    0 to 100; memory used and total in MiB (used <= total, total 1 to 1 TiB); job_id: the job the
    agent ran on that GPU, or None when idle.
    """

    gpu: int
    utilisation: float
    memory_used_mib: int
    memory_total_mib: int
    job_id: int | None = None


@dataclass(frozen=True, slots=True)
class _Target:
    id: int
    name: str
    gpus: int


def parse_gpu_readings(items: Sequence[Mapping[str, Any]]) -> list[GpuReading]:
    """Readings from JSON objects ({"gpu", "utilisation", "memory_used_mib", "memory_total_mib",
    "job_id"?}), for a heartbeat's body; a missing or non-numeric field is refused by name."""
    readings = []
    for position, item in enumerate(items):
        try:
            job = item.get("job_id")
            readings.append(
                GpuReading(
                    gpu=int(item["gpu"]),
                    utilisation=float(item["utilisation"]),
                    memory_used_mib=int(item["memory_used_mib"]),
                    memory_total_mib=int(item["memory_total_mib"]),
                    job_id=None if job is None else int(job),
                )
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValidationError({"samples": f"sample {position}: {type(error).__name__} {error}"}) from error
    return readings


def _check(target: _Target, readings: Sequence[GpuReading], *, at: datetime, now: datetime) -> None:
    """Refuse the whole report on the first reading out of bounds, naming it and its numbers."""
    limit = int(selectors.setting("TELEMETRY_MAX_SAMPLES_PER_CALL"))
    if len(readings) > limit:
        raise ValidationError({"samples": f"{len(readings)} samples in one report; at most {limit}"})
    if at > now + MAX_CLOCK_AHEAD:
        raise ValidationError({"at": f"{at.isoformat()} is {(at - now).total_seconds():.0f} s ahead of the server"})
    oldest = now - selectors.retention()[Resolution.RAW]
    if at < oldest:
        raise ValidationError({"at": f"{at.isoformat()} is older than the raw retention ({oldest.isoformat()})"})
    seen: set[int] = set()
    for position, reading in enumerate(readings):
        where = f"sample {position} (GPU {reading.gpu} of {target.name})"
        if not 0 <= reading.gpu < target.gpus:
            raise ValidationError({"gpu": f"{where}: {target.name} has GPUs 0 to {target.gpus - 1}"})
        if reading.gpu in seen:
            raise ValidationError({"gpu": f"{where}: GPU {reading.gpu} twice in one report"})
        seen.add(reading.gpu)
        if not (math.isfinite(reading.utilisation) and 0 <= reading.utilisation <= 100):
            raise ValidationError({"utilisation": f"{where}: {reading.utilisation} is not between 0 and 100 %"})
        if not 1 <= reading.memory_total_mib <= MAX_MEMORY_MIB:
            raise ValidationError(
                {"memory_total_mib": f"{where}: {reading.memory_total_mib} MiB is not between 1 and {MAX_MEMORY_MIB}"}
            )
        if not 0 <= reading.memory_used_mib <= reading.memory_total_mib:
            raise ValidationError(
                {
                    "memory_used_mib": f"{where}: {reading.memory_used_mib} MiB used of "
                    f"{reading.memory_total_mib} MiB total"
                }
            )
        if reading.job_id is not None and reading.job_id <= 0:
            raise ValidationError({"job_id": f"{where}: {reading.job_id} is not a job id"})


def _record(batch: Sequence[tuple[_Target, Sequence[GpuReading]]], *, at: datetime) -> int:
    """Check, then write every reading of the batch in one statement; live changes go out after
    commit."""
    now = get_clock().now()
    for target, readings in batch:
        _check(target, readings, at=at, now=now)
    return _write([(target, readings, at) for target, readings in batch])


def _write(batch: Sequence[tuple[_Target, Sequence[GpuReading], datetime]]) -> int:
    """Write checked readings, each report at its own moment, in one statement. A job id the
    console does not know (a job deleted meanwhile) is kept as no job: the GPU's reading still
    counts."""
    if not batch:
        return 0
    known = selectors.existing_job_ids(
        {reading.job_id for _target, readings, _at in batch for reading in readings if reading.job_id is not None}
    )
    rows = []
    recorded: list[live.Recorded] = []
    for target, readings, at in batch:
        for reading in readings:
            job_id = reading.job_id if reading.job_id in known else None
            busy = round(float(reading.utilisation), 1)
            rows.append(
                (target.id, reading.gpu, job_id, Resolution.RAW, at, busy, reading.memory_used_mib,
                 reading.memory_total_mib)
            )  # fmt: skip
            recorded.append(
                live.Recorded(target.id, target.name, reading.gpu, job_id, busy, reading.memory_used_mib,
                              reading.memory_total_mib)
            )  # fmt: skip
    latest = max(at for _target, _readings, at in batch)
    with transaction.atomic():
        bulk.insert(GpuSample, _COLUMNS, rows)
        transaction.on_commit(lambda: live.publish(live.topic_changes(recorded, at=latest)))
    return len(rows)


def record_gpu_samples(node: Node, samples: Sequence[GpuReading], *, at: datetime | None = None) -> int:
    """The node agent's entry point: one report of the node's GPUs, taken at `at` (now when not
    given). Refused whole (ValidationError naming the field and the numbers) when a reading is out
    of bounds. Returns how many samples were written."""
    return _record([(_Target(node.pk, node.name, node.gpus), samples)], at=at or get_clock().now())


Holder = tuple[int, str, float]  # (job id, kind, share of the GPU)


def _holders_by_gpu(*, node_ids: Sequence[int]) -> dict[tuple[int, int], list[Holder]]:
    """The jobs on each (node, GPU) of these nodes, with their share: one query."""
    holders: dict[tuple[int, int], list[Holder]] = defaultdict(list)
    for held in scheduling_selectors.held_devices_with_kind(node_ids=node_ids):
        fraction = held.fraction if held.fraction < 1 else 1.0
        for device in held.devices:
            holders[(held.node_id, device)].append((held.job_id, held.kind, fraction))
    return holders


def _naming_job(on_gpu: Sequence[Holder]) -> int | None:
    """The job a GPU's reading is filed under: the largest share; ties go to the lowest id (the earlier job)."""
    return min(on_gpu, key=lambda holder: (-holder[2], holder[0]))[0] if on_gpu else None


def _agent_readings(
    node: Node, samples: Sequence[Mapping[str, Any]], holders: Mapping[tuple[int, int], list[Holder]]
) -> list[GpuReading]:
    """A beat's samples as readings: the job on each GPU from the placements, and a reading
    without its memory total takes the size the agent registered for that GPU."""
    registered = {
        int(device["index"]): int(device.get("memory_mib") or 0)
        for device in (getattr(getattr(node, "agent", None), "registered_devices", None) or [])
        if isinstance(device, Mapping) and "index" in device
    }
    readings = []
    for sample in samples:
        gpu = int(sample["index"])
        used = int(sample["memory_used_mib"])
        total = int(sample.get("memory_total_mib") or registered.get(gpu) or max(used, 1))
        readings.append(
            GpuReading(
                gpu=gpu,
                utilisation=float(sample["utilization"]),
                memory_used_mib=used,
                memory_total_mib=max(total, used, 1),
                job_id=_naming_job(holders.get((node.pk, gpu), [])),
            )
        )
    return readings


# Node agents' beats arrive one by one, hundreds a second at scale; writing each beat's eight
# readings on its own cost three statements and a live message per beat. So this process keeps
# them for up to AGENT_SAMPLES_FLUSH_SECONDS and a thread of its own writes all of them together:
# three statements and one live message for every beat of that second. The write is that
# thread's, never a beat's: a beat that wrote its second's readings waited tens of milliseconds
# for them, and the beats queued behind it as long (a heartbeat p99 of its own). The price:
# readings reach the database and the pages up to a second late, and a web process that is
# killed loses the readings it held (at most that second's; a process that stops normally writes
# them as it exits). AGENT_SAMPLES_BUFFER_MAX readings wake the thread early.
# settings.AGENT_SAMPLES_FLUSH_SECONDS = 0 writes every beat's in the beat (the tests).
AGENT_SAMPLES_BUFFER_MAX: Final = 20_000


@dataclass(frozen=True, slots=True)
class _AgentReport:
    node: Node
    samples: list[dict[str, Any]]
    at: datetime


class _AgentSampleBuffer:
    """The readings this process holds; beats on several threads add, one thread writes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: list[_AgentReport] = []
        self._readings = 0
        self._oldest = 0.0  # time.monotonic() of the first report held
        self._due = threading.Event()
        self._writer: threading.Thread | None = None

    def add(self, report: _AgentReport) -> None:
        with self._lock:
            if not self._reports:
                self._oldest = time.monotonic()
            self._reports.append(report)
            self._readings += len(report.samples)
            if self._readings >= AGENT_SAMPLES_BUFFER_MAX:
                self._due.set()
            if self._writer is None or not self._writer.is_alive():
                # Started at the first beat, in the process that serves it (after any fork).
                self._writer = threading.Thread(target=self._write_forever, name="gpu-samples", daemon=True)
                self._writer.start()

    def take(self) -> list[_AgentReport]:
        with self._lock:
            reports, self._reports, self._readings = self._reports, [], 0
            self._due.clear()
            return reports

    def _wait_until_due(self) -> None:
        """Until the oldest report held is AGENT_SAMPLES_FLUSH_SECONDS old or the buffer is full;
        the setting is read again at least every second (a test, or an operator, may change it)."""
        while True:
            flush_after = float(settings.AGENT_SAMPLES_FLUSH_SECONDS)
            with self._lock:
                age = time.monotonic() - self._oldest if self._reports else None
            if age is not None and age >= flush_after:
                return
            # Nothing held: a look a second at most (at 0 beats write their own and nothing comes).
            left = flush_after - age if age is not None else (flush_after if flush_after > 0 else 1.0)
            if self._due.wait(timeout=min(max(left, 0.01), 1.0)):
                return

    def _write_forever(self) -> None:
        live.keep_event_loop()
        while True:
            self._wait_until_due()
            reports = self.take()
            if not reports:
                continue
            try:
                _store_agent_reports(reports)
            except Exception:  # the database away for a moment: that second's readings are lost, not the thread
                logger.warning("%d agent GPU reports not stored", len(reports), exc_info=True)
            finally:
                # As at the end of a request: the pool gets its connection back, a broken one goes,
                # and (DEBUG) the statements logged on this thread's connection are let go, which
                # nothing else would do for a thread that serves no request.
                close_old_connections()
                reset_queries()


_agent_buffer = _AgentSampleBuffer()


def record_agent_samples(*, node: Node, samples: Sequence[Mapping[str, Any]], at: datetime | None = None) -> int:
    """A node agent's beat (scheduling.agent_services.gpu_samples_reported, after its commit),
    whose bounds the API validated: kept with the others of this second and written with them
    by this process's writer thread (see AGENT_SAMPLES_BUFFER_MAX). Returns how many readings
    this call wrote: 0 while kept, all of them where AGENT_SAMPLES_FLUSH_SECONDS is 0."""
    report = _AgentReport(node=node, samples=[dict(sample) for sample in samples], at=at or get_clock().now())
    if float(settings.AGENT_SAMPLES_FLUSH_SECONDS) <= 0:
        return _store_agent_reports([*_agent_buffer.take(), report])
    _agent_buffer.add(report)
    return 0


def flush_agent_samples() -> int:
    """Write the readings this process holds now (a test, or the process exiting)."""
    return _store_agent_reports(_agent_buffer.take())


def _store_agent_reports(reports: Sequence[_AgentReport]) -> int:
    if not reports:
        return 0
    holders = _holders_by_gpu(node_ids=sorted({report.node.pk for report in reports}))
    now = get_clock().now()
    checked: list[tuple[_Target, Sequence[GpuReading], datetime]] = []
    for report in reports:
        target = _Target(report.node.pk, report.node.name, report.node.gpus)
        readings = _agent_readings(report.node, report.samples, holders)
        try:
            _check(target, readings, at=report.at, now=now)
        except ValidationError as refusal:
            # The beat has committed and its answer went out: a reading telemetry refuses (a GPU
            # index past the node's size) is dropped with one line, never a failed beat.
            logger.warning("GPU samples of node %s not stored: %s", report.node.name, refusal)
            continue
        checked.append((target, readings, report.at))
    try:
        return _write(checked)
    except DatabaseError:
        # A node deleted in the second its readings waited: its rows cannot be written, and
        # telemetry is not worth a failed beat (the one that happened to flush).
        logger.warning("%d agent GPU reports not stored", len(checked), exc_info=True)
        return 0


def _flush_at_exit() -> None:
    try:
        flush_agent_samples()
    except Exception:  # the database may be gone already; the loss is the documented one
        logger.warning("GPU samples held at exit were not stored", exc_info=True)


atexit.register(_flush_at_exit)


def simulated_readings(*, at: datetime) -> list[tuple[_Target, list[GpuReading]]]:
    """What every simulated node's GPUs read at `at`, from the synthetic curves of the jobs
    placed on them (telemetry.synthetic): two queries whatever the size of the cluster."""
    nodes = selectors.simulated_nodes()
    holders = _holders_by_gpu(node_ids=[node.id for node in nodes])
    total = int(selectors.setting("TELEMETRY_SIMULATED_GPU_MEMORY_MIB"))
    moment = at.timestamp()
    batch = []
    for node in nodes:
        readings = []
        for gpu in range(node.gpus):
            on_gpu = holders.get((node.id, gpu), [])
            busy, used = synthetic.gpu_reading(on_gpu, gpu=gpu, at=moment, memory_total_mib=total)
            readings.append(GpuReading(gpu, busy, used, total, _naming_job(on_gpu)))
        batch.append((_Target(node.id, node.name, node.gpus), readings))
    return batch


def record_simulated_samples(*, at: datetime | None = None) -> int:
    """One sample of every simulated node's GPUs (the beat task, every TELEMETRY_SAMPLE_SECONDS)."""
    moment = at or get_clock().now()
    return _record(simulated_readings(at=moment), at=moment)
