"""Submitting what the console placed on Slurm nodes (slurm.executor's sync, and at admission).

A wave's replicas are submitted in groups: those placed on one node that ask for the same GPUs,
CPUs, memory and partition become one job array (`sbatch --array`), task i running replica i of
the group; its batch script picks the replica's command and environment by SLURM_ARRAY_TASK_ID
(slurm.client.array_script). One sbatch per replica was one process and one slurmctld RPC each:
on the drain benchmark's 2,048 slots, a wave of 2,048 processes on two cores beside slurmctld and
256 slurmd (docs/slurm.md, "Job arrays"). Each replica stays a Slurm job of its own to the rest of
the executor: followed, signalled and cancelled as `ARRAY_TASK`, with its own output file.

Before its sbatch runs, each replica's row is written (the claim): a second tick, or a console
restarted meanwhile, never submits it twice; a row whose sbatch never answered is adopted by its
array's name and task (slurm.executor.follow).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Case, PositiveBigIntegerField, Value, When

from quotas.models import NodeExecutor
from quotas.node_agents import installation_identity
from scheduling import lifecycle, triggers
from scheduling.agent_beat import replica_environment, replica_ranks
from scheduling.models import Job, JobState, ReplicaPlacementRecord
from scheduling.services import finish_job
from slurm import inventory, naming
from slurm.arrays import ArrayTask, array_output
from slurm.client import SlurmClient, SlurmJob, SlurmUnavailable, devices_path
from slurm.models import SlurmJob as SlurmJobRow

logger = logging.getLogger("slurm.executor")

# A job with no command still holds its GPUs for its duration (or until ended), as on agent nodes.
_FOREVER_SECONDS = 2**31 - 1
# How many sbatch commands run at once when a cycle admitted many groups (_sbatch_all), and about
# how many replicas are claimed (their rows written) in one statement before theirs run. 16
# threads were slower than 8 in the drain benchmark on the 2-core VM (sbatch is a process each).
_SUBMIT_THREADS = 8
_SUBMIT_CHUNK = 256
# The most tasks in one array: Slurm's MaxArraySize defaults to 1001 (task ids 0–1000), and a
# batch script holds every task's command and environment.
_ARRAY_TASKS = 128
# How often a claim of many replicas is tried again in one statement, less those taken meanwhile.
_CLAIM_TRIES = 3


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
    wanted = [
        (one, job) for one in placed if (job := jobs.get(one.job_id)) is not None and job.state == JobState.RUNNING
    ]
    groups = _groups(wanted, ranks, output_dir, installation_identity())
    submitted = 0
    # A chunk of groups at a time: its rows claimed in one statement, its sbatch _SUBMIT_THREADS at
    # a time (one per group), its ids written in one. A claimed row waits for its id at most a
    # chunk's sbatch (follow drops a claim whose sbatch has not answered after 3 ×
    # SLURM_COMMAND_SECONDS).
    for chunk in _chunks(groups):
        claimed = _claim_all(chunk)
        answered: dict[int, list[SlurmJobRow]] = {}
        for group, answer in zip(claimed, _sbatch_all(slurm, claimed), strict=True):
            if isinstance(answer, SlurmUnavailable):
                pks = [task.row.pk for task in group.tasks]
                if _submit_refused(answer):
                    SlurmJobRow.objects.filter(pk__in=pks).update(state="REFUSED", ended_at=_now())
                    for job, rank in {task.job.pk: (task.job, task.row.rank) for task in group.tasks}.values():
                        _fail(job, f"Slurm refused replica {rank} on {group.node}: {answer}")
                else:
                    # Not reached: no Slurm job exists; the next sync submits them again.
                    SlurmJobRow.objects.filter(pk__in=pks).delete()
                    logger.warning("Slurm: %s replicas on %s not submitted yet: %s", len(pks), group.node, answer)
                continue
            answered[answer] = [task.row for task in group.tasks]
        # submitted_at becomes when the ids are known: a sync whose squeue was read before it
        # does not take a job's absence there for a vanished job (follow). One statement; only
        # the array ids differ from group to group.
        if answered:
            SlurmJobRow.objects.filter(pk__in=[row.pk for rows in answered.values() for row in rows]).update(
                state="PENDING",
                submitted_at=_now(),
                slurm_id=Case(
                    *(When(pk__in=[row.pk for row in rows], then=Value(array)) for array, rows in answered.items()),
                    output_field=PositiveBigIntegerField(),
                ),
            )
        submitted += sum(len(rows) for rows in answered.values())
    return submitted


@dataclass(slots=True)
class _Task:
    """One replica as a task of its group's array: its claim (`row`, written before sbatch runs)."""

    one: _Placed
    job: Job
    row: SlurmJobRow


@dataclass(slots=True)
class _Group:
    """Replicas placed on one node with one shape: one job array. Its name is its first replica's
    (slurm.naming), shared by every task; task i's row has `array_task` i."""

    node: str
    partition: str
    gpus: int
    cpus: int
    memory_mib: int
    name: str
    output_pattern: str
    tasks: list[_Task]


def _groups(
    wanted: Sequence[tuple[_Placed, Job]], ranks: Mapping[int, int], output_dir: Path, console: str
) -> list[_Group]:
    """The replicas grouped by node and shape, in placement order, at most _ARRAY_TASKS a group;
    each replica's claim row made (not written)."""
    by_shape: dict[tuple[str, str, int, int, int], list[tuple[_Placed, Job]]] = defaultdict(list)
    for one, job in wanted:
        gpus = len(one.devices) if one.fraction >= 1 else 1
        cpus = math.ceil(job.cpu) if job.cpu else 0
        memory_mib = math.ceil(job.memory_gib * 1024) if job.memory_gib else 0
        by_shape[(one.node, one.partition, gpus, cpus, memory_mib)].append((one, job))
    groups = []
    for (node, partition, gpus, cpus, memory_mib), members in by_shape.items():
        for first in range(0, len(members), _ARRAY_TASKS):
            part = members[first : first + _ARRAY_TASKS]
            lead, lead_job = part[0]
            name = naming.job_name(console, lead_job.pk, lead.replica)
            tasks = [
                _Task(one, job, _claim_row(one, job, name, index, ranks, output_dir))
                for index, (one, job) in enumerate(part)
            ]
            pattern = str(output_dir / f"{name}_%a.out")
            groups.append(_Group(node, partition, gpus, cpus, memory_mib, name, pattern, tasks))
    return groups


def _chunks(groups: Sequence[_Group]) -> list[list[_Group]]:
    """Whole groups, about _SUBMIT_CHUNK replicas a chunk."""
    chunks: list[list[_Group]] = [[]]
    size = 0
    for group in groups:
        if size >= _SUBMIT_CHUNK:
            chunks.append([])
            size = 0
        chunks[-1].append(group)
        size += len(group.tasks)
    return [chunk for chunk in chunks if chunk]


def _claim_all(groups: Sequence[_Group]) -> list[_Group]:
    """The claims of many groups in one statement. When another process claimed some of their
    replicas meanwhile (the statement fails as a whole: the cycle's submission and a sync's both
    send a wave), the ones taken are read back and left out, and the rest claimed again in one
    statement, a few times; then one at a time. A group keeps its other tasks' ids (sbatch's
    --array lists them). One INSERT a replica after every conflict was a third of a drain's
    submitting time (benchmarks/slurm_drain.py, 64 nodes)."""
    groups = list(groups)
    for _attempt in range(_CLAIM_TRIES):
        try:
            with transaction.atomic():
                SlurmJobRow.objects.bulk_create([task.row for group in groups for task in group.tasks])
        except IntegrityError:
            for group in groups:
                for task in group.tasks:
                    task.row.pk = None  # a failed bulk INSERT may have set some
            replicas = [task.row.replica for group in groups for task in group.tasks]
            taken = set(SlurmJobRow.objects.filter(replica__in=replicas).values_list("replica", flat=True))
            groups = _without(groups, taken)
            continue
        return groups
    kept = []
    for group in groups:
        group.tasks = [task for task in group.tasks if _claim(task.row)]
        if group.tasks:
            kept.append(group)
    return kept


def _without(groups: Sequence[_Group], taken: set[int]) -> list[_Group]:
    """The groups less the tasks whose replicas are in `taken`; the groups left with none, gone."""
    kept = []
    for group in groups:
        group.tasks = [task for task in group.tasks if task.row.replica not in taken]
        if group.tasks:
            kept.append(group)
    return kept


def _claim(row: SlurmJobRow) -> bool:
    """The claim: whoever writes this row submits the replica, once; False when another did."""
    row.pk = None
    try:
        with transaction.atomic():
            row.save(force_insert=True)
    except IntegrityError:
        return False
    return True


def _claim_row(one: _Placed, job: Job, name: str, task: int, ranks: Mapping[int, int], output_dir: Path) -> SlurmJobRow:
    """The row that claims a replica for this process as task `task` of array `name`, not yet written."""
    return SlurmJobRow(
        job=job,
        replica=one.replica,
        rank=ranks.get(one.replica, 0),
        node_name=one.node,
        name=name,
        array_task=task,
        output=array_output(str(output_dir / f"{name}_%a.out"), task),
        submitted_at=_now(),
    )


def _sbatch_all(slurm: SlurmClient, groups: Sequence[_Group]) -> list[int | SlurmUnavailable]:
    """Each group's sbatch, all at once: its array's Slurm id, or why not. One after another, an
    admission of two thousand one-GPU jobs waited minutes on sbatch alone, which mostly waits on
    slurmctld's answer. The threads run the commands only; the database is written by the caller."""

    def one_sbatch(group: _Group) -> int | SlurmUnavailable:
        jobs = sorted({task.job.pk for task in group.tasks})
        shown = ", ".join(map(str, jobs[:8])) + (f" and {len(jobs) - 8} more" if len(jobs) > 8 else "")
        try:
            return slurm.submit_array(
                name=group.name,
                comment=f"gqc jobs {shown}: {len(group.tasks)} replicas",
                node=group.node,
                partition=group.partition,
                gpus=group.gpus,
                cpus=group.cpus,
                memory_mib=group.memory_mib,
                output_pattern=group.output_pattern,
                tasks={
                    int(task.row.array_task or 0): ArrayTask(
                        command=_command(task.job),
                        environment=_environment(task.job, task.row.rank, task.one.fraction),
                        devices_file=devices_path(task.row.output),
                    )
                    for task in group.tasks
                },
            )
        except SlurmUnavailable as error:
            return error

    if len(groups) <= 1:
        return [one_sbatch(group) for group in groups]
    with ThreadPoolExecutor(max_workers=min(len(groups), _SUBMIT_THREADS)) as pool:
        return list(pool.map(one_sbatch, groups))


def _now() -> datetime:
    from scheduling.clock import get_clock

    return get_clock().now()


def _fail(job: Job, message: str) -> None:
    try:
        finish_job(job=job, succeeded=False, message=message)
    except ValidationError:
        logger.info("job %s moved on before its Slurm outcome was recorded", job.pk)
