"""The `slurm` executor: what the console decided, carried out by a Slurm cluster (docs/slurm.md).

Each sync (at the first tick, then at most every SLURM_SYNC_SECONDS) reads the cluster with two
bounded commands (`sinfo --json`, `squeue --json`), then:

1. keeps Slurm's nodes as console nodes (slurm.inventory);
2. submits each replica placed on a Slurm node that has no Slurm job yet (`sbatch`, pinned with
   `--nodelist` and `--gres=gpu:N`): one batch job per replica, so that two replicas on one node
   and replicas on several nodes are alike, and a replica is adopted, signalled and ended by
   itself, as the agent does with its processes;
3. follows the Slurm jobs it submitted: the devices Slurm bound (recorded on the placement, so the
   Nodes grid shows Slurm's truth), the output (shipped to the job's log), the end (exit 0:
   succeeded; another code: failed with it; cancelled or vanished outside the console: failed with
   the reason; a node failure: back to the queue);
4. stops what the console no longer wants: an evicted or cancelled job's Slurm jobs get SIGTERM,
   then SIGKILL after the job's grace; its GPUs are freed only once Slurm says they ended.

A Slurm that does not answer is one log line and, after NODE_LOST_SECONDS, its nodes not ready
(slurm.inventory.mark_unreachable); the tick never raises for it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Case, PositiveBigIntegerField, Value, When

from quotas import bounds
from quotas.models import NodeExecutor
from quotas.node_agents import installation_identity
from scheduling import lifecycle, triggers
from scheduling.agent_beat import replica_environment, replica_ranks
from scheduling.agent_services import FAILURE_LOG_LINES, _append_logs
from scheduling.models import Job, JobEvent, JobEventKind, JobLog, JobState, ReplicaPlacementRecord
from scheduling.services import Ending, Release, finish_cancels, finish_job, finish_jobs, release_jobs
from slurm import inventory, naming
from slurm.client import SlurmClient, SlurmJob, SlurmUnavailable, devices_path, read_devices_file
from slurm.models import SlurmJob as SlurmJobRow

logger = logging.getLogger(__name__)

# A job with no command still holds its GPUs for its duration (or until ended), as on agent nodes.
_FOREVER_SECONDS = 2**31 - 1
# How much new output one sync reads of one Slurm job.
_OUTPUT_BYTES_PER_SYNC = 256 * 1024
# Slurm's job states that mean its node failed rather than its process.
_NODE_FAILURES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
# How many sbatch commands run at once when a cycle admitted many replicas (_sbatch_all), and how
# many replicas are claimed (their rows written) in one statement before theirs run. 16 threads
# were slower than 8 in the drain benchmark on the 2-core VM (sbatch is a process each).
_SUBMIT_THREADS = 8
_SUBMIT_CHUNK = 64

_sync_lock = threading.Lock()
_last_sync = {"at": -math.inf}
# The worker runs several processes, each ticking: their syncs took turns ending the same jobs
# (each read the same ended rows and waited on the other's row locks in finish_jobs), which was
# most of a drain's database time. A sync holds this lease in Redis (SET NX PX, released with a
# compare-and-delete), so one process syncs at a time and the others skip the tick.
_SYNC_LEASE_KEY = "slurm-sync"
_RELEASE_LEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""


def configured() -> bool:
    return bool(getattr(settings, "SLURM_CONF", ""))


def client() -> SlurmClient:
    return SlurmClient(conf=str(settings.SLURM_CONF), timeout=float(settings.SLURM_COMMAND_SECONDS))


def forget_last_sync() -> None:
    """The next tick syncs at once (tests, and a console that changed SLURM_CONF)."""
    _last_sync["at"] = -math.inf


class SlurmExecutor:
    name = "slurm"

    def on_admitted(self, job: Job) -> None:
        self.on_admitted_many([job])

    def on_admitted_many(self, jobs: Sequence[Job]) -> None:
        if configured() and jobs:
            submit_placed(client(), job_ids=[job.pk for job in jobs])

    def on_evicted(self, job: Job) -> None:
        # The next sync signals its Slurm jobs (SIGTERM, SIGKILL after the grace).
        return None

    def tick(self, now: datetime) -> int:
        if not configured():
            return 0
        if time.monotonic() - _last_sync["at"] < float(settings.SLURM_SYNC_SECONDS):
            return 0
        if not _sync_lock.acquire(blocking=False):
            return 0  # another thread of this process is syncing
        try:
            with _sync_lease() as held:
                if not held:
                    return 0  # another process is syncing
                _last_sync["at"] = time.monotonic()
                return sync(client(), now)
        finally:
            _sync_lock.release()


@contextlib.contextmanager
def _sync_lease() -> Iterator[bool]:
    """Whether this process may sync now (no other holds the lease). The lease outlives any sync
    that is not stuck: each of its commands is bounded by SLURM_COMMAND_SECONDS. Without Redis the
    sync runs anyway, as before the lease: its conditional writes keep two syncs safe, only slower."""
    from scheduling.lock import holder_name, redis_client, redis_prefix

    key = f"{redis_prefix()}{_SYNC_LEASE_KEY}"
    holder = holder_name()
    ttl_ms = int(1000 * (6 * float(settings.SLURM_COMMAND_SECONDS) + 30))
    try:
        redis = redis_client()
        held = bool(redis.set(key, holder, nx=True, px=ttl_ms))
    except Exception as error:  # noqa: BLE001 (whatever Redis raises: sync without the lease)
        inventory.warn_once("lease", f"Slurm: syncing without the cross-process lease, Redis: {error}")
        yield True
        return
    try:
        yield held
    finally:
        if held:
            with contextlib.suppress(Exception):  # it expires by itself
                redis.eval(_RELEASE_LEASE, 1, key, holder)


def sync(slurm: SlurmClient, now: datetime) -> int:
    """One round: read the cluster, keep the inventory, submit, follow and stop. Returns how many
    nodes and jobs changed."""
    try:
        nodes = slurm.nodes()
    except SlurmUnavailable as error:
        return inventory.mark_unreachable(str(error), now)
    changed = inventory.sync_nodes(nodes, now)
    read_from = _now()
    try:
        jobs = slurm.jobs()
        # Only this console's jobs are followed, adopted or stopped; another console's (the same
        # numbers, another identity) are left alone, said once.
        named = naming.sort_out(jobs, installation_identity())
        own = {job.slurm_id for job in named.own}
        outside = _with_held(slurm, [job for job in jobs if job.slurm_id not in own])
    except SlurmUnavailable as error:
        return changed + inventory.mark_unreachable(str(error), now)
    naming.report_foreign(named.foreign)
    changed += inventory.mark_held_outside(outside)
    # Submitted after squeue was read, against that read's GPUs held outside; follow leaves the
    # jobs submitted now for the next sync (their rows are newer than read_from).
    changed += submit_placed(slurm, held=inventory.held_outside(outside))
    changed += follow(slurm, named.own, now, read_from=read_from)
    return changed


# --- submitting -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Placed:
    replica: int
    job_id: int
    node: str
    devices: tuple[int, ...]
    fraction: float
    # The node's Slurm partition (its first): the job is submitted there, since a node outside the
    # cluster's default partition is not reachable from it.
    partition: str


def _placed_without_slurm_job(job_ids: Sequence[int] | None) -> list[_Placed]:
    placements = ReplicaPlacementRecord.objects.filter(
        node__executor=NodeExecutor.SLURM, job__state=JobState.RUNNING
    ).exclude(id__in=SlurmJobRow.objects.values("replica"))
    if job_ids is not None:
        placements = placements.filter(job_id__in=list(job_ids))
    return [
        _Placed(
            replica,
            job_id,
            node,
            tuple(int(device) for device in devices or ()),
            float(fraction),
            str((labels or {}).get(inventory.PARTITION) or ""),
        )
        for replica, job_id, node, devices, fraction, labels in placements.order_by("job_id", "id").values_list(
            "id", "job_id", "node__name", "devices", "fraction", "node__labels"
        )
    ]


def _environment(job: Job, rank: int, fraction: float) -> dict[str, str]:
    environment = replica_environment(
        job.environment or {},
        job_id=job.pk,
        job_name=job.name,
        quota=job.quota.name,
        rank=rank,
        replicas=job.running_replicas,
    )
    if fraction < 1:
        environment["GPU_QUOTA_FRACTION"] = f"{fraction:g}"
    return environment


def _command(job: Job) -> str:
    if job.command:
        return str(job.command)
    return f"exec sleep {int(job.duration if job.duration is not None else _FOREVER_SECONDS)}"


def _submit_refused(error: SlurmUnavailable) -> bool:
    """sbatch ran and said no (a request Slurm cannot take), rather than not reaching slurmctld."""
    said = str(error).lower()
    unreachable = ("did not answer", "could not be run", "contact", "connect", "timed out", "communication")
    return not any(word in said for word in unreachable)


def _read_held_outside(slurm: SlurmClient) -> dict[str, dict[int, int]] | None:
    """The GPUs that Slurm jobs outside the console hold now (one squeue), also written on the
    nodes; None when Slurm does not answer (nothing is submitted then)."""
    try:
        jobs = slurm.jobs(ended=False)
        own = {job.slurm_id for job in naming.sort_out(jobs, installation_identity()).own}
        outside = _with_held(slurm, [job for job in jobs if job.slurm_id not in own])
    except SlurmUnavailable as error:
        logger.warning("Slurm: nothing submitted now, squeue did not answer: %s", error)
        return None
    inventory.mark_held_outside(outside)
    return inventory.held_outside(outside)


# The GPUs each running Slurm job outside the console holds, by its id, as scontrol said when the
# console first saw it run: they do not change while it runs, so each is asked once (squeue's
# text answer has no indices; client.jobs says why the console reads that one).
_outside_held: dict[int, tuple[tuple[str, tuple[int, ...]], ...]] = {}


def _with_held(slurm: SlurmClient, outside: Sequence[SlurmJob]) -> list[SlurmJob]:
    """The jobs outside the console, the running ones with the devices they hold on each node."""
    holding = [job for job in outside if inventory.holds_devices(job)]
    for job in holding:
        if job.slurm_id not in _outside_held:
            held = slurm.held_gpus(job.slurm_id)
            if held:  # none yet: asked again at the next read
                _outside_held[job.slurm_id] = held
    running = {job.slurm_id for job in holding}
    for slurm_id in [known for known in _outside_held if known not in running]:
        del _outside_held[slurm_id]
    return [replace(job, held=_outside_held.get(job.slurm_id, ())) for job in outside]


def _taken_outside(job: Job, placed: Sequence[_Placed], held: Mapping[str, Mapping[int, int]], now: datetime) -> bool:
    """A job one of whose replicas was placed on devices that a Slurm job outside the console took
    since the placement read them (it started after the last sync) goes back to the queue before
    any of its replicas is submitted: submitted, it would wait in Slurm while the console counts
    it running. The next cycle places it again, around those devices (its node's label says them)."""
    for one in placed:
        taken = sorted(set(one.devices) & set(held.get(one.node, {})))
        if not taken:
            continue
        holders = sorted({held[one.node][device] for device in taken})
        message = (
            f"not started: Slurm job {', '.join(map(str, holders))}, outside the console, took GPU "
            f"{','.join(map(str, taken))} of {one.node} after it was placed there; back to the queue"
        )
        with transaction.atomic():
            if lifecycle.requeue_unstarted(job_id=job.pk, seen_revision=job.revision, now=now, message=message):
                triggers.request_cycle_on_commit("slurm-gpus-outside")
        return True
    return False


def submit_placed(
    slurm: SlurmClient,
    *,
    job_ids: Sequence[int] | None = None,
    held: Mapping[str, Mapping[int, int]] | None = None,
) -> int:
    """Submit each replica placed on a Slurm node that has no Slurm job yet; returns how many.

    `held` is what Slurm jobs outside the console hold (inventory.held_outside), as the caller's
    squeue read it; None reads it now. A job placed on devices held there goes back to the queue
    instead (_taken_outside)."""
    placed = _placed_without_slurm_job(job_ids)
    if not placed:
        return 0
    if held is None:
        held = _read_held_outside(slurm)
        if held is None:
            return 0
    jobs = {job.pk: job for job in Job.objects.filter(pk__in={p.job_id for p in placed}).select_related("quota")}
    # A job with a Slurm job already (a replica submitted before) is not taken back: its GPUs are
    # held until that Slurm job ends; the rest of it is submitted and waits in Slurm.
    started = set(SlurmJobRow.objects.filter(job_id__in=list(jobs)).values_list("job_id", flat=True))
    replicas_of: dict[int, list[_Placed]] = defaultdict(list)
    for one in placed:
        replicas_of[one.job_id].append(one)
    now = _now()
    for job_id, replicas in replicas_of.items():
        job = jobs.get(job_id)
        if job is not None and job_id not in started and _taken_outside(job, replicas, held, now):
            del jobs[job_id]
    ranks = replica_ranks(jobs)
    output_dir = Path(str(settings.SLURM_OUTPUT_DIR))
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        # Nothing is submitted whose output would be lost; said once, tried again at each sync.
        inventory.warn_once("output", f"Slurm: SLURM_OUTPUT_DIR {output_dir} cannot be made: {error.strerror}")
        return 0
    console = installation_identity()
    wanted = [
        (one, job) for one in placed if (job := jobs.get(one.job_id)) is not None and job.state == JobState.RUNNING
    ]
    submitted = 0
    # A chunk at a time: its rows claimed in one statement, its sbatch _SUBMIT_THREADS at a time,
    # its ids written in one. A claimed row waits for its id at most a chunk's sbatch (follow
    # drops a claim whose sbatch has not answered after 3 × SLURM_COMMAND_SECONDS).
    for first in range(0, len(wanted), _SUBMIT_CHUNK):
        claimed = _claim_all(
            [
                (one, job, naming.job_name(console, job.pk, one.replica))
                for one, job in wanted[first : first + _SUBMIT_CHUNK]
            ],
            ranks,
            output_dir,
        )
        answered: list[SlurmJobRow] = []
        for (one, job, row), answer in zip(claimed, _sbatch_all(slurm, claimed), strict=True):
            if isinstance(answer, SlurmUnavailable):
                if _submit_refused(answer):
                    SlurmJobRow.objects.filter(pk=row.pk).update(state="REFUSED", ended_at=_now())
                    _fail(job, f"Slurm refused replica {row.rank} on {one.node}: {answer}")
                else:
                    # Not reached: no Slurm job exists; the next sync submits it again.
                    SlurmJobRow.objects.filter(pk=row.pk).delete()
                    logger.warning("Slurm: replica %s of job %s not submitted yet: %s", one.replica, job.pk, answer)
                continue
            row.slurm_id, row.state = answer, "PENDING"
            answered.append(row)
        # submitted_at becomes when the ids are known: a sync whose squeue was read before it
        # does not take a job's absence there for a vanished job (follow). One statement; only
        # the ids differ from row to row (bulk_update's CASE for three fields cost 0.1 s a chunk).
        if answered:
            SlurmJobRow.objects.filter(pk__in=[row.pk for row in answered]).update(
                state="PENDING",
                submitted_at=_now(),
                slurm_id=Case(
                    *(When(pk=row.pk, then=Value(row.slurm_id)) for row in answered),
                    output_field=PositiveBigIntegerField(),
                ),
            )
        submitted += len(answered)
    return submitted


def _claim_all(
    wanted: Sequence[tuple[_Placed, Job, str]], ranks: Mapping[int, int], output_dir: Path
) -> list[tuple[_Placed, Job, SlurmJobRow]]:
    """The claims of many replicas in one statement; when another process claimed one of them
    meanwhile (the statement fails as a whole), one at a time, leaving out the ones taken."""
    rows = [_claim_row(one, job, name, ranks, output_dir) for one, job, name in wanted]
    try:
        with transaction.atomic():
            created = SlurmJobRow.objects.bulk_create(rows)
    except IntegrityError:
        return [claim for one, job, name in wanted if (claim := _claim(one, job, name, ranks, output_dir))]
    return [(one, job, row) for (one, job, _name), row in zip(wanted, created, strict=True)]


def _claim(
    one: _Placed, job: Job, name: str, ranks: Mapping[int, int], output_dir: Path
) -> tuple[_Placed, Job, SlurmJobRow] | None:
    """The claim: whoever writes this row submits the replica, once; None when another did."""
    row = _claim_row(one, job, name, ranks, output_dir)
    try:
        with transaction.atomic():
            row.save(force_insert=True)
    except IntegrityError:
        return None
    return one, job, row


def _claim_row(one: _Placed, job: Job, name: str, ranks: Mapping[int, int], output_dir: Path) -> SlurmJobRow:
    """The row that claims a replica for this process, not yet written."""
    return SlurmJobRow(
        job=job,
        replica=one.replica,
        rank=ranks.get(one.replica, 0),
        node_name=one.node,
        name=name,
        output=str(output_dir / f"{name}.out"),
        submitted_at=_now(),
    )


def _sbatch_all(
    slurm: SlurmClient, claimed: Sequence[tuple[_Placed, Job, SlurmJobRow]]
) -> list[int | SlurmUnavailable]:
    """Each claimed replica's sbatch, all at once: its Slurm id, or why not. One after another, an
    admission of two thousand one-GPU jobs waited minutes on sbatch alone, which mostly waits on
    slurmctld's answer. The threads run the commands only; the database is written by the caller."""

    def one_sbatch(claim: tuple[_Placed, Job, SlurmJobRow]) -> int | SlurmUnavailable:
        one, job, row = claim
        try:
            return slurm.submit(
                name=row.name,
                comment=f"gqc job {job.pk} ({job.name}) replica {one.replica}",
                node=one.node,
                partition=one.partition,
                gpus=len(one.devices) if one.fraction >= 1 else 1,
                cpus=math.ceil(job.cpu) if job.cpu else 0,
                memory_mib=math.ceil(job.memory_gib * 1024) if job.memory_gib else 0,
                output=row.output,
                command=_command(job),
                environment=_environment(job, row.rank, one.fraction),
                devices_file=devices_path(row.output),
            )
        except SlurmUnavailable as error:
            return error

    if len(claimed) <= 1:
        return [one_sbatch(claim) for claim in claimed]
    with ThreadPoolExecutor(max_workers=min(len(claimed), _SUBMIT_THREADS)) as pool:
        return list(pool.map(one_sbatch, claimed))


def _now() -> datetime:
    from scheduling.clock import get_clock

    return get_clock().now()


def _fail(job: Job, message: str) -> None:
    try:
        finish_job(job=job, succeeded=False, message=message)
    except ValidationError:
        logger.info("job %s moved on before its Slurm outcome was recorded", job.pk)


# --- following --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Outcome:
    """How one replica's Slurm job ended."""

    rank: int
    slurm_id: int | None
    state: str
    exit_code: int | None
    reason: str


def follow(slurm: SlurmClient, seen: Sequence[SlurmJob], now: datetime, *, read_from: datetime) -> int:
    """Match the console's open Slurm jobs with what squeue said of this console's jobs (`seen`,
    read from `read_from` on; slurm.naming sorted out the others'); record starts, output and
    ends; stop what is no longer wanted; settle the console jobs whose Slurm jobs ended.

    The starts and ends of one read are written together (a few statements for them all): one
    job at a time, a drain of short jobs spent most of each sync here."""
    by_id = {job.slurm_id: job for job in seen}
    by_name = {job.name: job for job in seen if job.live}
    rows = list(SlurmJobRow.objects.filter(ended_at__isnull=True).select_related("job"))
    if not rows:
        return 0
    lines_by_job: dict[int, list[str]] = defaultdict(list)
    truncated: set[int] = set()
    ended: dict[int, tuple[SlurmJobRow, _Outcome]] = {}
    started: dict[int, tuple[SlurmJobRow, SlurmJob, list[int]]] = {}
    moved: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        found = by_id.get(row.slurm_id) if row.slurm_id is not None else by_name.get(row.name)
        if row.slurm_id is None:
            if found is None:
                if now - row.submitted_at > timedelta(seconds=3 * float(settings.SLURM_COMMAND_SECONDS)):
                    # Its sbatch never answered and Slurm has no job of its name: never submitted.
                    SlurmJobRow.objects.filter(pk=row.pk, slurm_id__isnull=True).delete()
                continue
            row.slurm_id = found.slurm_id  # adopted by its name
            SlurmJobRow.objects.filter(pk=row.pk).update(slurm_id=found.slurm_id)
        if found is None and row.submitted_at >= read_from:
            continue  # submitted (by another process) after squeue was read: not seen yet
        _read_output(row, lines_by_job, truncated, final=found is None or not found.live)
        if found is None:
            ended[row.pk] = (row, _Outcome(row.rank, row.slurm_id, "VANISHED", None, "Slurm no longer knows it"))
        elif not found.live:
            ended[row.pk] = (row, _Outcome(row.rank, row.slurm_id, found.state, found.exit_code, found.reason))
        elif found.state == "RUNNING" and row.state != "RUNNING":
            devices = _devices_of(row, found)
            if devices is not None:  # None: Slurm runs it but its devices are not known yet
                started[row.pk] = (row, found, devices)
        elif found.state != row.state and row.state != "RUNNING":
            # Once RUNNING, the row stays so until the end (COMPLETING, SUSPENDED are not kept): it
            # says that the start was told.
            moved[found.state].append(row.pk)
    for state, pks in moved.items():
        SlurmJobRow.objects.filter(pk__in=pks).exclude(state="RUNNING").update(state=state)
    changed = _record_starts(started, now)
    reasons = _record_ends(ended, now)
    if lines_by_job or truncated:
        with transaction.atomic():
            _append_logs(lines_by_job, truncated, now)
    changed += _stop_unwanted(slurm, now)
    changed += _settle(reasons, now)
    return changed


def _devices_of(row: SlurmJobRow, found: SlurmJob) -> list[int] | None:
    """The GPU indices Slurm bound a running job of the console's to: those squeue gave, else
    those its script wrote beside its output (slurm.client.devices_file); None while neither
    says (the script has not run its first line yet)."""
    if found.gpu_indices:
        return list(found.gpu_indices)
    written = read_devices_file(row.output)
    return None if written is None else list(written)


def _record_starts(started: Mapping[int, tuple[SlurmJobRow, SlurmJob, list[int]]], now: datetime) -> int:
    """The rows whose Slurm jobs run now: RUNNING with their devices, the placements' devices (so
    that the Nodes grid shows Slurm's choice) and a `started` event each."""
    if not started:
        return 0
    with transaction.atomic():
        # Only the rows still not RUNNING are this sync's to tell (a sync of another process, run
        # without the lease, may have told some).
        untold = set(
            SlurmJobRow.objects.select_for_update()
            .filter(pk__in=list(started))
            .exclude(state="RUNNING")
            .values_list("pk", flat=True)
        )
        rows = []
        devices_of_replica: dict[int, list[int]] = {}
        events = []
        for pk in sorted(untold):
            row, found, devices = started[pk]
            row.state, row.devices = "RUNNING", devices
            rows.append(row)
            if devices:
                devices_of_replica[row.replica] = devices
            events.append(_started_event(row, "started on", found.slurm_id, devices, now))
        SlurmJobRow.objects.bulk_update(rows, ["state", "devices"])
        # Slurm chose the devices: the placement says which. A fraction keeps the console's.
        placements = list(ReplicaPlacementRecord.objects.filter(pk__in=list(devices_of_replica), fraction__gte=1))
        for placement in placements:
            placement.devices = devices_of_replica[placement.pk]
        ReplicaPlacementRecord.objects.bulk_update(placements, ["devices"])
        JobEvent.objects.bulk_create(events)
    return len(rows)


def _started_event(
    row: SlurmJobRow, verb: str, slurm_id: int | None, devices: Sequence[int], now: datetime
) -> JobEvent:
    """A replica's start as its job's events tell it ("replica 0 started on gpu-1 as Slurm job 12
    (GPUs 0,1)"); `verb` is "ran on" for one whose start is told only once it has ended."""
    shown = f" (GPUs {','.join(map(str, devices))})" if devices else ""
    return JobEvent(
        job_id=row.job_id,
        kind=JobEventKind.STARTED,
        at=now,
        message=f"replica {row.rank} {verb} {row.node_name} as Slurm job {slurm_id}{shown}",
    )


def _record_ends(ended: Mapping[int, tuple[SlurmJobRow, _Outcome]], now: datetime) -> dict[int, str]:
    """The rows whose Slurm jobs ended: their state, code and end, one statement per kind of end.
    Returns Slurm's reason for each row this sync recorded (the row keeps the state and code)."""
    if not ended:
        return {}
    with transaction.atomic():
        untold = set(
            SlurmJobRow.objects.select_for_update()
            .filter(pk__in=list(ended), ended_at__isnull=True)
            .values_list("pk", flat=True)
        )
        by_end: dict[tuple[str, int | None], list[int]] = defaultdict(list)
        events = []
        for pk in sorted(untold):
            row, outcome = ended[pk]
            by_end[(outcome.state, outcome.exit_code)].append(pk)
            if row.state != "RUNNING" and outcome.state in ("COMPLETED", "FAILED"):
                # It ran and ended between two syncs: its start is told now (its devices are
                # those its script wrote, when it got that far).
                devices = read_devices_file(row.output) or ()
                events.append(_started_event(row, "ran on", row.slurm_id, devices, now))
        for (state, exit_code), pks in by_end.items():
            SlurmJobRow.objects.filter(pk__in=pks).update(state=state, exit_code=exit_code, ended_at=now)
        JobEvent.objects.bulk_create(events)
    return {pk: ended[pk][1].reason for pk in untold}


def _read_output(row: SlurmJobRow, lines_by_job: dict[int, list[str]], truncated: set[int], *, final: bool) -> None:
    """The job's new complete lines (and, once it ended, its last partial one) into its log."""
    try:
        with open(row.output, "rb") as output:
            output.seek(row.output_offset)
            chunk = output.read(_OUTPUT_BYTES_PER_SYNC)
    except OSError:
        return
    if not chunk:
        return
    complete = chunk if final and len(chunk) < _OUTPUT_BYTES_PER_SYNC else chunk[: chunk.rfind(b"\n") + 1]
    if not complete:
        return
    # Two syncs reading the same bytes: only the one that moves the offset ships them.
    if not SlurmJobRow.objects.filter(pk=row.pk, output_offset=row.output_offset).update(
        output_offset=row.output_offset + len(complete)
    ):
        return
    row.output_offset += len(complete)
    lines = complete.decode("utf-8", errors="replace").splitlines()
    if len(lines) > bounds.AGENT_LOG_LINES_PER_BEAT:
        truncated.add(row.job_id)
        lines = lines[-bounds.AGENT_LOG_LINES_PER_BEAT :]
    lines_by_job[row.job_id].extend(line[: bounds.AGENT_LOG_LINE_MAX_LENGTH] for line in lines)


def _stop_unwanted(slurm: SlurmClient, now: datetime) -> int:
    """Signal the Slurm jobs of replicas the console no longer runs: a releasing job's get SIGTERM,
    then SIGKILL once its grace is over; a replica no longer placed (its job ended or moved) is
    cancelled at once."""
    open_rows = list(
        SlurmJobRow.objects.filter(ended_at__isnull=True, slurm_id__isnull=False).values_list(
            "pk", "slurm_id", "replica", "job__state", "job__grace_seconds", "stop_asked_at", "killed_at"
        )
    )
    if not open_rows:
        return 0
    placed = set(
        ReplicaPlacementRecord.objects.filter(pk__in=[row[2] for row in open_rows]).values_list("pk", flat=True)
    )
    terminate: list[tuple[int, int]] = []
    kill: list[tuple[int, int]] = []
    for pk, slurm_id, replica, state, grace, stop_asked_at, killed_at in open_rows:
        assert slurm_id is not None  # filtered above
        if state == JobState.RUNNING and replica in placed:
            continue
        if state == JobState.RELEASING and replica in placed:
            if stop_asked_at is None:
                terminate.append((pk, slurm_id))
            elif killed_at is None and now >= stop_asked_at + timedelta(seconds=float(grace)):
                kill.append((pk, slurm_id))
            continue
        if killed_at is None:
            kill.append((pk, slurm_id))
    try:
        if terminate:
            slurm.signal([slurm_id for _pk, slurm_id in terminate], "TERM")
            SlurmJobRow.objects.filter(pk__in=[pk for pk, _id in terminate]).update(stop_asked_at=now)
        if kill:
            ids = [slurm_id for _pk, slurm_id in kill]
            slurm.signal(ids, "KILL")
            slurm.cancel(ids)
            SlurmJobRow.objects.filter(pk__in=[pk for pk, _id in kill]).update(killed_at=now)
    except SlurmUnavailable as error:
        # The next sync asks again: the rows still say what was not done.
        logger.warning("Slurm: could not signal the console's jobs: %s", error)
    return len(terminate) + len(kill)


def _settle(reasons: Mapping[int, str], now: datetime) -> int:
    """Console jobs whose Slurm jobs ended: a running job fails at its first replica that failed
    (or whose Slurm job was cancelled or lost outside the console), goes back to the queue when a
    node failed under it, and succeeds once every replica exited 0; a releasing job lets go of its
    GPUs once none of its Slurm jobs is left.

    Read from the rows rather than from this sync's news, so that an end recorded by a sync that
    stopped before settling it is settled by the next. Only the rows of replicas still placed
    count: the rows of an earlier run of a requeued job ended with that run."""
    releasing = set(
        Job.objects.filter(state=JobState.RELEASING, placements__node__executor=NodeExecutor.SLURM).values_list(
            "pk", flat=True
        )
    )
    ended_rows = list(
        SlurmJobRow.objects.filter(ended_at__isnull=False, job__state=JobState.RUNNING)
        .order_by("id")
        .values_list("pk", "job_id", "replica", "rank", "slurm_id", "state", "exit_code")
    )
    placed = (
        set(
            ReplicaPlacementRecord.objects.filter(job_id__in={row[1] for row in ended_rows}).values_list(
                "pk", flat=True
            )
        )
        if ended_rows
        else set()
    )
    outcomes: dict[int, list[_Outcome]] = defaultdict(list)
    for pk, job_id, replica, rank, slurm_id, slurm_state, exit_code in ended_rows:
        if replica in placed:
            outcomes[job_id].append(_Outcome(rank, slurm_id, slurm_state, exit_code, reasons.get(pk, "")))
    touched = set(outcomes) | releasing
    if not touched:
        return 0
    still_open = set(
        SlurmJobRow.objects.filter(job_id__in=touched, ended_at__isnull=True).values_list("job_id", flat=True)
    )
    changed = 0
    endings: list[Ending] = []
    unsubmitted = _with_replicas_unsubmitted([job_id for job_id in outcomes if job_id not in still_open])
    gone: list[Job] = []
    for job in Job.objects.filter(pk__in=touched).select_related("quota"):
        if job.state == JobState.RELEASING:
            if job.pk not in still_open:
                gone.append(job)
        elif job.state == JobState.RUNNING and outcomes.get(job.pk):
            all_done = job.pk not in still_open and job.pk not in unsubmitted
            ending = _end_running(job, outcomes[job.pk], all_done=all_done, now=now)
            if isinstance(ending, Ending):
                endings.append(ending)
            else:
                changed += ending
    changed += _release_all(gone, now)
    endings = _with_log_tails(endings)
    # Every job that ended in this read, in one write (finish_jobs): one at a time, a drain of
    # thousands of short jobs spent most of its time here (docs/slurm.md, the drain benchmark).
    finished = {job.pk for job in finish_jobs(endings)}
    for ending in endings:
        if ending.job_id not in finished:
            logger.info("job %s moved on before its Slurm outcome was recorded", ending.job_id)
    return changed + len(finished)


def _release_all(jobs: Sequence[Job], now: datetime) -> int:
    """Releasing jobs none of whose Slurm jobs is left let go of their GPUs, all in one transaction
    (job_endings' bulk writes): a cancelled one is cancelled, an evicted one goes back to the
    queue (or fails, not requeued). One cycle request each kind."""
    cancels = [(job.pk, job.revision) for job in jobs if job.reason_code == lifecycle.CANCELLING]
    releases = [
        Release(
            job.pk,
            JobState.RELEASING,
            job.revision,
            job.requeue,
            "its Slurm jobs ended after the eviction; devices freed",
        )
        for job in jobs
        if job.reason_code != lifecycle.CANCELLING
    ]
    if not jobs:
        return 0
    with transaction.atomic():
        cancelled = finish_cancels(cancels, now, "its Slurm jobs ended; devices freed") if cancels else []
        released = release_jobs(releases, now) if releases else []
        if cancelled:
            triggers.request_cycle_on_commit("cancel")
        if released:
            triggers.request_cycle_on_commit("released")
    return len(cancelled) + len(released)


def _end_running(job: Job, outcomes: Sequence[_Outcome], *, all_done: bool, now: datetime) -> int | Ending:
    """A node failure releases the job here (1, or 0 when it moved on); otherwise its end to write
    (an Ending), or 0 while some replicas still run."""
    node_failure = next((o for o in outcomes if o.state in _NODE_FAILURES), None)
    if node_failure is not None:
        with transaction.atomic():
            done = lifecycle.release_job(
                job_id=job.pk,
                seen_state=JobState.RUNNING,
                seen_revision=job.revision,
                requeue=job.requeue,
                now=now,
                message=f"Slurm job {node_failure.slurm_id} (replica {node_failure.rank}) ended with "
                f"{node_failure.state}: its node failed",
            )
            if done:
                triggers.request_cycle_on_commit("released")
        return int(bool(done))
    failed = next((o for o in outcomes if o.state != "COMPLETED" or o.exit_code), None)
    if failed is None and not all_done:
        return 0  # some replicas still run (or are still to be submitted); the job ends with its last one
    if failed is None:
        message = "every replica's Slurm job exited with code 0"
    elif failed.state == "VANISHED":
        message = f"Slurm job {failed.slurm_id} (replica {failed.rank}) vanished: {failed.reason}"
    elif failed.state in ("COMPLETED", "FAILED"):
        code = failed.exit_code
        message = f"replica {failed.rank} (Slurm job {failed.slurm_id}) exited with code {code}"
    else:
        why = f" ({failed.reason})" if failed.reason and failed.reason != "None" else ""
        message = f"Slurm job {failed.slurm_id} (replica {failed.rank}) ended {failed.state} outside the console{why}"
    return Ending(job.pk, failed is None, message)


def _with_replicas_unsubmitted(job_ids: Sequence[int]) -> set[int]:
    """Those of the jobs with a replica placed that has no Slurm job yet: two reads for them all
    (a read per job was a third of a drain's settling)."""
    if not job_ids:
        return set()
    submitted = set(SlurmJobRow.objects.filter(job_id__in=job_ids).values_list("replica", flat=True))
    placed = ReplicaPlacementRecord.objects.filter(job_id__in=job_ids).values_list("pk", "job_id")
    return {job_id for replica, job_id in placed if replica not in submitted}


def _with_log_tails(endings: Sequence[Ending]) -> list[Ending]:
    """Each ending's message with the last lines of its job's log, read in one query for them all."""
    if not endings:
        return []
    logs = dict(JobLog.objects.filter(job_id__in=[e.job_id for e in endings]).values_list("job_id", "lines"))
    told = []
    for ending in endings:
        tail = [str(line) for line in (logs.get(ending.job_id) or [])[-FAILURE_LOG_LINES:]]
        last_lines = "; last lines:\n" + "\n".join(tail) if tail else ""
        told.append(Ending(ending.job_id, ending.succeeded, ending.message + last_lines))
    return told


def slurm_ids_of(job: Job) -> list[int]:
    """The Slurm job ids of a console job's replicas, in submission order."""
    ids = SlurmJobRow.objects.filter(job=job, slurm_id__isnull=False).order_by("id").values_list("slurm_id", flat=True)
    return [int(slurm_id) for slurm_id in ids if slurm_id is not None]


__all__ = ["SlurmExecutor", "configured", "forget_last_sync", "slurm_ids_of", "sync"]
