"""The `slurm` executor: what the console decided, carried out by a Slurm cluster (docs/slurm.md).

Each sync (at the first tick, then at most every SLURM_SYNC_SECONDS) reads the cluster with two
bounded commands (a plain-text `squeue --array`, then `sinfo --json`), and:

1. follows the Slurm jobs it submitted: the devices Slurm bound (recorded on the placement, so the
   Nodes grid shows Slurm's truth), the output (shipped to the job's log), the end (exit 0:
   succeeded; another code: failed with it; cancelled or vanished outside the console: failed with
   the reason; a node failure: back to the queue);
2. stops what the console no longer wants: an evicted or cancelled job's Slurm jobs get SIGTERM,
   then SIGKILL after the job's grace; its GPUs are freed only once Slurm says they ended;
3. keeps Slurm's nodes as console nodes (slurm.inventory);
4. submits each replica placed on a Slurm node that has no Slurm job yet (slurm.submitting:
   `sbatch --array`, pinned with `--nodelist` and `--gres=gpu:N`, one array per node and shape
   of a wave): each replica is one task of an array, a Slurm job of its own (`ARRAY_TASK`), so
   that two replicas on one node and replicas on several nodes are alike, and a replica is
   adopted, signalled and ended by itself, as the agent does with its processes. The cycle that
   admits a job submits it at once (SlurmExecutor.on_admitted_many); the sync sends what that
   left (a cycle's process that stopped, a Slurm that did not answer).

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
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from quotas import bounds
from quotas.models import NodeExecutor
from quotas.node_agents import installation_identity
from scheduling import lifecycle, triggers
from scheduling.agent_services import FAILURE_LOG_LINES, _append_logs
from scheduling.events import published_later
from scheduling.models import Job, JobEvent, JobEventKind, JobLog, JobState, ReplicaPlacementRecord
from scheduling.services import Ending, Release, finish_cancels, finish_jobs, release_jobs
from slurm import inventory, naming
from slurm.client import SlurmClient, SlurmJob, SlurmUnavailable, read_devices_file
from slurm.models import SlurmJob as SlurmJobRow
from slurm.models import slurm_label
from slurm.submitting import _now, _with_held, submit_placed

logger = logging.getLogger(__name__)

# How much new output one sync reads of one Slurm job.
_OUTPUT_BYTES_PER_SYNC = 256 * 1024
# Slurm's job states that mean its node failed rather than its process.
_NODE_FAILURES = frozenset({"NODE_FAIL", "BOOT_FAIL"})
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
                # The live pages' news of the jobs a sync ends goes out from this process's
                # publisher thread, after the sync (scheduling.events.published_later): read back
                # on the sync's thread, it was a third of a drain's `follow` (0.5 s a sync at 64
                # nodes), which the next sync, and so the next ends seen, waited for.
                with published_later():
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
    """One round: read the jobs and follow them (ends, starts, stops), read the nodes and keep the
    inventory, submit what is placed and not yet in Slurm. Returns how many nodes and jobs changed.

    The jobs come first: their ends free GPUs (finish_jobs asks for the cycle that fills them), and
    `sinfo` with the inventory, then a wave's sbatch, took from a fraction of a second to seconds
    at a drain's load that every end seen waited for (benchmarks/slurm_drain.py)."""
    read_from = _now()
    try:
        jobs = slurm.jobs()
    except SlurmUnavailable as error:
        return inventory.mark_unreachable(str(error), now)
    # Only this console's jobs are followed, adopted or stopped; another console's (the same
    # numbers, another identity) are left alone, said once.
    named = naming.sort_out(jobs, installation_identity())
    naming.report_foreign(named.foreign)
    changed = follow(slurm, named.own, now, read_from=read_from)
    try:
        nodes = slurm.nodes()
        own = {job.slurm_id for job in named.own}
        outside = _with_held(slurm, [job for job in jobs if job.slurm_id not in own])
    except SlurmUnavailable as error:
        return changed + inventory.mark_unreachable(str(error), now)
    changed += inventory.sync_nodes(nodes, now)
    changed += inventory.mark_held_outside(outside)
    # What is placed and not yet in Slurm (the cycle that admitted it submits it at once: this is
    # what that left), against this read's GPUs held outside; the jobs submitted after squeue was
    # read are left for the next sync's follow (rows newer than read_from).
    changed += submit_placed(slurm, held=inventory.held_outside(outside))
    return changed


# --- following --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Outcome:
    """How one replica's Slurm job ended."""

    rank: int
    # Slurm's id of the replica (`12_3`, slurm.models.slurm_label).
    label: str
    state: str
    exit_code: int | None
    reason: str


def follow(slurm: SlurmClient, seen: Sequence[SlurmJob], now: datetime, *, read_from: datetime) -> int:
    """Match the console's open Slurm jobs with what squeue said of this console's jobs (`seen`,
    read from `read_from` on; slurm.naming sorted out the others'); record starts, output and
    ends; stop what is no longer wanted; settle the console jobs whose Slurm jobs ended.

    The starts and ends of one read are written together (a few statements for them all): one
    job at a time, a drain of short jobs spent most of each sync here."""
    # An array task is its array's id and its task id (slurm.client.SlurmJob.key); a row whose
    # sbatch never answered is found by its array's name and its task.
    by_key = {job.key: job for job in seen}
    by_name = {(job.name, job.array_task): job for job in seen if job.live}
    # Only the rows' own columns: nothing here reads their console job (a join of every open
    # job's row, thousands at a drain's width, at every sync).
    rows = list(SlurmJobRow.objects.filter(ended_at__isnull=True))
    if not rows:
        return 0
    lines_by_job: dict[int, list[str]] = defaultdict(list)
    truncated: set[int] = set()
    ended: dict[int, tuple[SlurmJobRow, _Outcome]] = {}
    started: dict[int, tuple[SlurmJobRow, SlurmJob, list[int]]] = {}
    moved: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        found = (
            by_key.get((row.slurm_id, row.array_task))
            if row.slurm_id is not None
            else by_name.get((row.name, row.array_task))
        )
        if found is None and row.slurm_id is not None and row.array_task is not None:
            # An array cancelled (or ended) before Slurm started its task: squeue shows the
            # array's own record, task "N/A", for the tasks it never split off.
            head = by_key.get((row.slurm_id, None))
            found = head if head is not None and not head.live else None
        if row.slurm_id is None:
            if found is None:
                if now - row.submitted_at > timedelta(seconds=3 * float(settings.SLURM_COMMAND_SECONDS)):
                    # Its sbatch never answered and Slurm has no job of its name: never submitted.
                    SlurmJobRow.objects.filter(pk=row.pk, slurm_id__isnull=True).delete()
                continue
            row.slurm_id = found.key[0]  # adopted by its name (an array's id, not its task's own)
            SlurmJobRow.objects.filter(pk=row.pk).update(slurm_id=row.slurm_id)
        if found is None and row.submitted_at >= read_from:
            continue  # submitted (by another process) after squeue was read: not seen yet
        if found is None or not found.live or inventory.holds_devices(found):
            # A job still waiting in Slurm has written nothing yet: its file is not opened.
            _read_output(row, lines_by_job, truncated, final=found is None or not found.live)
        if found is None:
            ended[row.pk] = (row, _Outcome(row.rank, row.slurm_label, "VANISHED", None, "Slurm no longer knows it"))
        elif not found.live:
            ended[row.pk] = (row, _Outcome(row.rank, row.slurm_label, found.state, found.exit_code, found.reason))
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
            row, _found, devices = started[pk]
            row.state, row.devices = "RUNNING", devices
            rows.append(row)
            if devices:
                devices_of_replica[row.replica] = devices
            events.append(_started_event(row, "started on", devices, now))
        SlurmJobRow.objects.bulk_update(rows, ["state", "devices"])
        # Slurm chose the devices: the placement says which. A fraction keeps the console's.
        placements = list(ReplicaPlacementRecord.objects.filter(pk__in=list(devices_of_replica), fraction__gte=1))
        for placement in placements:
            placement.devices = devices_of_replica[placement.pk]
        ReplicaPlacementRecord.objects.bulk_update(placements, ["devices"])
        JobEvent.objects.bulk_create(events)
    return len(rows)


def _started_event(row: SlurmJobRow, verb: str, devices: Sequence[int], now: datetime) -> JobEvent:
    """A replica's start as its job's events tell it ("replica 0 started on gpu-1 as Slurm job 12
    (GPUs 0,1)"); `verb` is "ran on" for one whose start is told only once it has ended."""
    shown = f" (GPUs {','.join(map(str, devices))})" if devices else ""
    return JobEvent(
        job_id=row.job_id,
        kind=JobEventKind.STARTED,
        at=now,
        message=f"replica {row.rank} {verb} {row.node_name} as Slurm job {row.slurm_label}{shown}",
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
                events.append(_started_event(row, "ran on", devices, now))
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
    # Only the rows that may need a signal: not killed yet, and not of a running job's replica
    # still placed (every row but a few, each sync; they were all read and joined, and their
    # placements read, at each sync of a drain).
    open_rows = list(
        SlurmJobRow.objects.filter(ended_at__isnull=True, slurm_id__isnull=False, killed_at__isnull=True)
        .exclude(job__state=JobState.RUNNING, replica__in=ReplicaPlacementRecord.objects.values("pk"))
        .values_list(
            "pk", "slurm_id", "array_task", "replica", "job__state", "job__grace_seconds", "stop_asked_at"
        )
    )
    if not open_rows:
        return 0
    placed = set(
        ReplicaPlacementRecord.objects.filter(pk__in=[row[3] for row in open_rows]).values_list("pk", flat=True)
    )
    terminate: list[tuple[int, str]] = []
    kill: list[tuple[int, str]] = []
    for pk, slurm_id, array_task, replica, state, grace, stop_asked_at in open_rows:
        label = slurm_label(slurm_id, array_task)
        if state == JobState.RELEASING and replica in placed:
            if stop_asked_at is None:
                terminate.append((pk, label))
            elif now >= stop_asked_at + timedelta(seconds=float(grace)):
                kill.append((pk, label))
            continue
        kill.append((pk, label))
    try:
        if terminate:
            slurm.signal([label for _pk, label in terminate], "TERM")
            SlurmJobRow.objects.filter(pk__in=[pk for pk, _id in terminate]).update(stop_asked_at=now)
        if kill:
            ids = [label for _pk, label in kill]
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
        .values_list("pk", "job_id", "replica", "rank", "slurm_id", "array_task", "state", "exit_code")
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
    for pk, job_id, replica, rank, slurm_id, array_task, slurm_state, exit_code in ended_rows:
        if replica in placed:
            label = slurm_label(slurm_id, array_task)
            outcomes[job_id].append(_Outcome(rank, label, slurm_state, exit_code, reasons.get(pk, "")))
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
                message=f"Slurm job {node_failure.label} (replica {node_failure.rank}) ended with "
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
        message = f"Slurm job {failed.label} (replica {failed.rank}) vanished: {failed.reason}"
    elif failed.state in ("COMPLETED", "FAILED"):
        code = failed.exit_code
        message = f"replica {failed.rank} (Slurm job {failed.label}) exited with code {code}"
    else:
        why = f" ({failed.reason})" if failed.reason and failed.reason != "None" else ""
        message = f"Slurm job {failed.label} (replica {failed.rank}) ended {failed.state} outside the console{why}"
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


def slurm_ids_of(job: Job) -> list[str]:
    """Slurm's ids of a console job's replicas (`12_3`: task 3 of array 12), in submission order."""
    rows = SlurmJobRow.objects.filter(job=job, slurm_id__isnull=False).order_by("id")
    return [slurm_label(slurm_id, task) for slurm_id, task in rows.values_list("slurm_id", "array_task")]


__all__ = ["SlurmExecutor", "configured", "forget_last_sync", "slurm_ids_of", "sync"]
