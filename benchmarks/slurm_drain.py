"""Issue 25's drain: Slurm's own scheduler against the console on Slurm and the console on agents.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/h5 REDIS_URL=redis://127.0.0.1:6379/5 \\
        nice -n 10 .venv/bin/python benchmarks/slurm_drain.py [--nodes 256] [--jobs 10000] [--parts a b c]

The load, the same in each part: --nodes emulated nodes of 8 GPUs, each held by one whole-node
filler (`sleep`), and --jobs one-GPU jobs of `true` queued behind them. The clock starts when the
fillers are cancelled and stops when the last queued job has ended; jobs per second is --jobs
divided by that. Every job is a real process on both sides:

(a) Slurm alone: the fillers and the jobs are sbatch'ed straight to slurmctld (sched/builtin) and
    its slurmds run them; the drain ends when squeue lists none of them pending, running or
    completing.
(b) the console through the `slurm` executor: the same Slurm cluster (started afresh), the
    console (web, worker, beat: `console.launcher serve`, DEBUG off as a site runs it) with
    SLURM_CONF set; the fillers are cancelled in one transaction (Slurm's in one scancel); the jobs are
    submitted to the console (submit_jobs, as the API's bulk submit does), which decides and
    sbatch'es each admitted one pinned to its node; the drain ends when the console has every
    job succeeded.
(c) the console through --nodes node agents (`python -m gqc.agent --fake-gpus 8`, one process
    per node), no Slurm; the same end.

The Slurm cluster is slurm.testing's (the one tests/slurm start): slurmctld and one `slurmd -N`
per node on this machine, auth/none, fake GPU GRES. Every process this starts runs under an
address-space cap (prlimit --as), and a watchdog ends the run with the figures so far if the
machine's available memory falls under --memory-floor-gib. Nothing a part starts outlives it:
the agents run in their own sessions and are SIGKILLed by group, and whatever still carries the
part's environment mark at its end (a replica, a slurmstepd) is SIGKILLed with its group
(sweep_run), on success, error or Ctrl-C alike. Before it starts, the run prints how long it
should take and its largest resident memory (estimate).
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import process_cpu, statement_log  # noqa: E402
from benchmarks.console_process import _role, drop_postgres, fresh_postgres, running_console  # noqa: E402
from slurm.testing import SlurmCluster, wait_until  # noqa: E402

GPUS = 8
FILLER_COMMAND = "exec sleep 1000000"
SLURM_TARGET = 34.0  # jobs/s: the issue's measure of (a) on this machine
AGENT_CAP_BYTES = 1_000_000_000


@dataclass
class Figure:
    """A drain: `ended` of `jobs` ended (`failed` of them not succeeded) `seconds` after the cancel."""

    part: str
    jobs: int
    ended: int
    seconds: float
    failed: int = 0
    # Jobs left in Slurm when the drain stopped moving for --stall seconds: `seconds` ends at the
    # last one that ended, and the rate is of the ended jobs.
    stuck: int = 0

    @property
    def rate(self) -> float:
        return self.ended / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        whole = "" if self.ended == self.jobs else f" (stopped at --limit: {self.ended} of {self.jobs} ended)"
        if self.stuck:
            whole = f" ({self.ended} of {self.jobs} ended, {self.stuck} stuck: no progress for --stall seconds)"
        return (
            f"({self.part}) {self.rate:.1f} jobs/s: {self.ended} jobs in {self.seconds:.1f} s, "
            f"{self.failed} not succeeded{whole}"
        )


class MemoryWatch:
    """Ends the run (SIGTERM to this process) when the machine's available memory falls under the floor."""

    def __init__(self, floor_bytes: int) -> None:
        self.floor = floor_bytes
        self.lowest = psutil.virtual_memory().available
        self.stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self.stop.wait(0.5):
            available = psutil.virtual_memory().available
            self.lowest = min(self.lowest, available)
            if available < self.floor:
                print(f"available memory {available / 2**30:.1f} GiB < floor: stopping", flush=True)
                _thread.interrupt_main()  # KeyboardInterrupt in the main thread: the clean-ups run
                return


# Every process a part starts inherits this variable (the console, the agents and their
# replicas, slurmctld, the slurmds and their jobs' slurmstepd): the sweep at the end finds by it
# what outlived its parent (a replica in its own session whose wrapper ignores SIGTERM, left
# by a stopped agent), without this process becoming their subreaper (it would have to reap
# every slurmstepd: thousands of zombies in a drain, and a slurmd lost with them once).
RUN_MARK = "GQC_SLURM_DRAIN_RUN"


def mark_run() -> str:
    token = f"{os.getpid()}-{time.time_ns()}"
    os.environ[RUN_MARK] = token
    return token


def kill_groups(pids: list[int]) -> None:
    """SIGKILL the process group each of `pids` leads (each was started in its own session)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def sweep_run(token: str) -> list[str]:
    """SIGKILL every process still marked with this run's token (and its group, unless it is ours)
    and wait for it: nothing a part started outlives it, on success, error or interrupt. What
    was left (names). A slurmstepd overwrites its environment with its title, so the mark does
    not find it: the cluster's stop ends each slurmd's session (slurm.testing)."""
    own_group = os.getpgrp()
    left: list[psutil.Process] = []
    names = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if process.environ().get(RUN_MARK) != token:
                continue
            names.append(" ".join(process.cmdline())[:60])
            group = os.getpgid(process.pid)
            if group != own_group:
                os.killpg(group, signal.SIGKILL)
            process.kill()
            left.append(process)
    psutil.wait_procs(left, timeout=10)
    return names


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def node_names(count: int) -> tuple[str, ...]:
    return tuple(f"s{number:04d}" for number in range(1, count + 1))


@contextlib.contextmanager
def slurm_cluster(nodes: int, root: Path, scheduler_parameters: str = "") -> Iterator[SlurmCluster]:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    overrides = {"MaxJobCount": "100000"}
    if scheduler_parameters:
        # --scheduler-parameters: slurm.conf's SchedulerParameters, the same for (a) and (b).
        overrides["SchedulerParameters"] = scheduler_parameters
    cluster = SlurmCluster(
        root=root,
        nodes=node_names(nodes),
        gpus_per_node=GPUS,
        cpus=16,
        memory_mib=64000,
        overrides=overrides,
        start_seconds=300.0,
    )
    started = time.monotonic()
    try:
        cluster.start()
        daemons = [cluster.controller, *cluster.daemons.values()]
        rss = sum(_rss(process.pid) for process in daemons if process is not None)
        say(
            f"Slurm up: {nodes} slurmd in {time.monotonic() - started:.0f} s, "
            f"{rss / 2**30:.2f} GiB resident with slurmctld"
        )
        yield cluster
    finally:
        cluster.close()


def until(done: Callable[[], bool], limit: float) -> float:
    """Seconds until `done()`, polled every 0.2 s, or `limit` when it is not by then."""
    began = time.monotonic()
    while not done():
        if time.monotonic() - began > limit:
            return limit
        time.sleep(0.2)
    return time.monotonic() - began


def squeue_ids(cluster: SlurmCluster, name: str, states: str) -> list[str] | None:
    """The ids of the jobs named `name` in `states`; None when squeue did not answer in time (a
    busy slurmctld on a loaded machine: the caller asks again)."""
    try:
        return cluster.command("squeue", "-h", f"--name={name}", "-t", states, "-o", "%i").split()
    except subprocess.TimeoutExpired:
        return None


def cancel_fillers(cluster: SlurmCluster, fillers: list[str], tries: int = 10) -> None:
    """scancel the fillers by id until none is left running. At 256 nodes with 10,000 jobs just
    queued, slurmctld is busy: `scancel --name=filler` (which first lists every job) did not
    answer within a command's 10 s, twelve times over, and a scancel by id timed out on some ids
    (2026-11-28); cancelling one twice is harmless. The time it takes counts in Slurm's drain,
    as its own work."""
    left = fillers
    for _ in range(tries):
        with contextlib.suppress(subprocess.TimeoutExpired):
            cluster.command("scancel", *left, check=False, timeout=120)
        running = set(answered(lambda: squeue_ids(cluster, "filler", "RUNNING,PENDING")))
        left = [job for job in left if job in running]
        if not left:
            return
        say(f"(a) {len(left)} fillers still there after scancel; asking again")
    raise RuntimeError(f"{len(left)} fillers not cancelled in {tries} tries")


def live_count(cluster: SlurmCluster, name: str) -> int:
    """How many are pending, running or completing (-1: no answer in time)."""
    ids = squeue_ids(cluster, name, "PENDING,RUNNING,COMPLETING,CONFIGURING")
    return -1 if ids is None else len(ids)


def answered(ask: Callable[[], list[str] | None]) -> list[str]:
    while (ids := ask()) is None:
        time.sleep(1)
    return ids


def part_a(args: argparse.Namespace, scratch: Path) -> Figure:
    with slurm_cluster(args.nodes, scratch / "slurm-a", args.scheduler_parameters) as cluster:
        fillers = [
            cluster.command(
                "sbatch",
                "--parsable",
                "--job-name=filler",
                f"--gres=gpu:{GPUS}",
                "--output=/dev/null",
                "--wrap",
                FILLER_COMMAND,
            ).strip()
            for _ in range(args.nodes)
        ]
        wait_until(
            lambda: len(squeue_ids(cluster, "filler", "RUNNING") or ()) == args.nodes,
            seconds=300,
            what="fillers running",
        )

        def submit(_number: int) -> None:
            cluster.command("sbatch", "--job-name=drain", "--gres=gpu:1", "--output=/dev/null", "--wrap", "true")

        started = time.monotonic()
        pool = ThreadPoolExecutor(4)
        try:
            list(pool.map(submit, range(args.jobs)))
        finally:
            pool.shutdown(cancel_futures=True)  # an interrupted run stops submitting
        say(f"(a) {args.jobs} jobs sbatch'ed in {time.monotonic() - started:.0f} s, pending behind the fillers")
        began = time.monotonic()
        cancel_fillers(cluster, fillers)
        seconds = until_stalled(lambda: live_count(cluster, "drain"), began, args.limit, args.stall)
        left = len(answered(lambda: squeue_ids(cluster, "drain", "PENDING,RUNNING,COMPLETING,CONFIGURING")))
        failed = answered(lambda: squeue_ids(cluster, "drain", "FAILED,TIMEOUT,NODE_FAIL"))
    if left:
        say(f"(a) {left} jobs stuck in Slurm (no progress for {args.stall:g} s, or --limit): the rate is of the ended")
    return Figure("a", args.jobs, args.jobs - left, seconds, len(failed), stuck=left)


def until_stalled(live: Callable[[], int], began: float, limit: float, stall: float) -> float:
    """Seconds from `began` (a monotonic time) until `live()` (jobs left, -1: no answer) is 0, or,
    when it stops moving for `stall` seconds (Slurm alone has left jobs held or running with no
    process for ever on this machine: 32 of 10,000 on 2026-11-28), until it last moved; `limit`
    at most."""
    last_count, last_moved = -1, began
    while time.monotonic() - began < limit:
        count = live()
        now = time.monotonic()
        if count == 0:
            return now - began
        if count > 0 and count != last_count:
            last_count, last_moved = count, now
        elif now - last_moved > stall:
            return last_moved - began
        time.sleep(0.2)
    return limit


# --- the console ------------------------------------------------------------------------------


def console_world(pool_name: str, nodes: int) -> tuple[Any, Any, Any]:
    """An admin, a quota of every GPU in `pool_name`, and a workspace bound to it."""
    from django.contrib.auth import get_user_model

    from quotas.models import ResourcePool
    from quotas.services import create_quota
    from workspaces.services import create_workspace

    admin = get_user_model().objects.create_superuser(username="bench", email="", password=None)
    pool = ResourcePool.objects.get(name=pool_name)
    quota = create_quota(actor=admin, name="drain", pool=pool, gpus=nodes * GPUS)
    workspace = create_workspace(actor=admin, name="lab", quotas=[quota])
    return admin, quota, workspace


def submit(world: tuple[Any, Any, Any], prefix: str, count: int, gpus: int, command: str) -> list[int]:
    from scheduling.submission import JobSubmission, submit_jobs

    admin, quota, workspace = world
    ids: list[int] = []
    for first in range(0, count, 1000):
        batch = [
            JobSubmission(
                workspace=workspace, quota=quota, name=f"{prefix}-{number}", kind="training", gpus=gpus, command=command
            )
            for number in range(first, min(count, first + 1000))
        ]
        ids += [job.pk for job in submit_jobs(actor=admin, submissions=batch)]
    return ids


def states(ids: list[int]) -> dict[str, int]:
    from django.db.models import Count

    from scheduling.models import Job

    # A bulk submit's ids are one range: counted by it, not by a list of thousands of ids that
    # Django would compose into the statement (a third of a second each at 10,000).
    if ids and len(set(ids)) == max(ids) - min(ids) + 1:
        jobs = Job.objects.filter(pk__gte=min(ids), pk__lte=max(ids))
    else:
        jobs = Job.objects.filter(pk__in=ids)
    rows = jobs.values_list("state").annotate(count=Count("id"))
    return {str(state): int(count) for state, count in rows}


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else float("nan")


def spread(values: list[float]) -> str:
    """Median and 90th percentile, in seconds."""
    ordered = sorted(values)
    if not ordered:
        return "none"
    return f"median {median(ordered):.2f} s, p90 {ordered[int(len(ordered) * 0.9)]:.2f} s"


def console_phases(queued: list[int], began_wall: float, seconds: float, slots: int, part: str) -> None:
    """Where a slot's turnover went: the console's own records of the drained jobs (admitted, ended)
    and the cycles in the drain, read from the database before it is dropped."""
    from scheduling.models import CycleRecord, Job

    held = [
        (finished - started).total_seconds()
        for started, finished in Job.objects.filter(pk__in=queued, finished_at__isnull=False).values_list(
            "started_at", "finished_at"
        )
        if started is not None and finished is not None
    ]
    cycles = list(
        CycleRecord.objects.filter(started_at__gte=datetime.fromtimestamp(began_wall, UTC)).values_list(
            "duration_ms", "admitted"
        )
    )
    busy = sum(held) / (slots * seconds) if seconds else 0.0
    say(
        f"({part}) a slot turned over every {slots * seconds / max(1, len(held)):.2f} s; "
        f"admission to end recorded: {spread(held)}; slots held by a console job {busy:.0%} of the drain; "
        f"{len(cycles)} cycles, median {median([c[0] for c in cycles]):.0f} ms, "
        f"{sum(c[1] for c in cycles)} admissions"
    )


def agent_phases(queued: list[int], part: str) -> None:
    """(c): admission -> the agent's first report of the process (its `started` event: the beat
    after the answer that asked for the start) -> the end recorded (the beat that carried the exit)."""
    from scheduling.models import Job, JobEvent

    admitted = dict(Job.objects.filter(pk__in=queued).values_list("pk", "started_at"))
    finished = dict(Job.objects.filter(pk__in=queued).values_list("pk", "finished_at"))
    reported: dict[int, datetime] = {}
    for job_id, at in JobEvent.objects.filter(job_id__in=queued, kind="started").values_list("job_id", "at"):
        reported.setdefault(job_id, at)
    to_report = [(at - start).total_seconds() for pk, at in reported.items() if (start := admitted.get(pk))]
    to_end = [(end - at).total_seconds() for pk, at in reported.items() if (end := finished.get(pk))]
    say(f"({part}) admitted -> the agent reported the process: {spread(to_report)}")
    say(f"({part}) the agent reported it -> the end recorded: {spread(to_end)}")


def slurm_phases(cluster: SlurmCluster, queued: list[int], part: str) -> None:
    """(b): admission → sbatch answered → Slurm's start → Slurm's end → the console saw it → the job
    ended in the console, from the console's rows and squeue's times (whole seconds)."""
    import json as json_module

    from scheduling.models import Job
    from slurm.models import SlurmJob

    admitted: dict[int, datetime] = {
        pk: at for pk, at in Job.objects.filter(pk__in=queued).values_list("pk", "started_at") if at is not None
    }
    finished: dict[int, datetime] = {
        pk: at for pk, at in Job.objects.filter(pk__in=queued).values_list("pk", "finished_at") if at is not None
    }
    rows = list(
        SlurmJob.objects.filter(job_id__in=queued).values_list(
            "job_id", "slurm_id", "array_task", "submitted_at", "ended_at"
        )
    )
    try:
        answer = json_module.loads(cluster.command("squeue", "--json", "--states=all"))
    except (subprocess.TimeoutExpired, ValueError):
        return
    # By the array's id and task (slurm.client.SlurmJob.key): the console's replicas are array tasks.
    times = {
        (int(row.get("array_job_id") or row["job_id"]), row.get("array_task_id")): (
            row.get("start_time"),
            row.get("end_time"),
        )
        for row in answer.get("jobs", [])
    }
    to_sbatch, to_start, to_end, to_seen, to_finish = [], [], [], [], []
    for job_id, slurm_id, array_task, submitted_at, ended_at in rows:
        start, end = times.get((int(slurm_id or 0), array_task), (None, None))
        if admitted.get(job_id) and submitted_at:
            to_sbatch.append((submitted_at - admitted[job_id]).total_seconds())
        if start and submitted_at:
            to_start.append(start - submitted_at.timestamp())
        if start and end:
            to_end.append(end - start)
        if end and ended_at:
            to_seen.append(ended_at.timestamp() - end)
        if ended_at and finished.get(job_id):
            to_finish.append((finished[job_id] - ended_at).total_seconds())
    for what, values in (
        ("admitted -> sbatch answered", to_sbatch),
        ("sbatch answered -> Slurm started it (1 s steps)", to_start),
        ("Slurm started -> Slurm ended (1 s steps)", to_end),
        ("Slurm ended -> the console saw it (1 s steps)", to_seen),
        ("the console saw it -> the job ended", to_finish),
    ):
        say(f"({part}) {what}: {spread(values)}")
    say(f"({part}) slurmctld's RPCs: {rpc_counts(cluster)}")


def rpc_counts(cluster: SlurmCluster) -> str:
    """sdiag's count of each kind of RPC that slurmctld answered since its start (or `sdiag -r`)."""
    try:
        text = cluster.command("sdiag")
    except (subprocess.TimeoutExpired, AssertionError):
        return "sdiag did not answer"
    counts = []
    in_types = False
    # The main scheduler's passes since the cancel (`sdiag -r`): a job sbatch'ed waits for the next.
    passes = re.search(r"Main schedule statistics.*?Total cycles:\s*(\d+)", text, re.S)
    if passes:
        counts.append(f"main scheduler passes {passes[1]}")
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            in_types = True
            continue
        if in_types and not line.strip():
            break
        if in_types and "count:" in line:
            name, _, rest = line.strip().partition("(")
            count = rest.split("count:")[1].split()[0]
            counts.append(f"{name.strip().removeprefix('REQUEST_').lower()} {count}")
    return ", ".join(counts[:13])


def drain(
    world: tuple[Any, Any, Any],
    args: argparse.Namespace,
    fillers_started: Callable[[list[int]], bool],
    part: str,
    cluster: SlurmCluster | None = None,
    agents_cpu: Callable[[], float] | None = None,
    cpu_groups: process_cpu.Groups | None = None,
    statements_of: Callable[[datetime, datetime], None] | None = None,
    sessions: Callable[[], int] | None = None,
) -> Figure:
    from django.db import transaction

    from scheduling.events import published_later
    from scheduling.job_endings import cancel_job
    from scheduling.models import FINAL_STATES, Job

    fillers = submit(world, "filler", args.nodes, GPUS, FILLER_COMMAND)
    wait_until(lambda: fillers_started(fillers), seconds=600, what="fillers started")
    say(f"({part}) {args.nodes} fillers started")
    started = time.monotonic()
    queued = submit(world, "drain", args.jobs, 1, "true")
    say(f"({part}) {args.jobs} jobs submitted in {time.monotonic() - started:.0f} s")
    idle_from = (time.monotonic(), agents_cpu()) if agents_cpu else None
    time.sleep(args.settle)  # a few cycles find no room: the queue is steady before the clock starts
    if idle_from is not None and agents_cpu is not None:
        # Steady beats only (fillers running, nothing placeable): the agents' cost of beating.
        spent, over = agents_cpu() - idle_from[1], time.monotonic() - idle_from[0]
        say(
            f"({part}) agents' CPU while idle: {spent / over / args.nodes * 1000:.2f} ms a second per agent "
            f"({spent / over / args.nodes * args.heartbeat * 1000:.1f} ms per {args.heartbeat:g} s heartbeat)"
        )
    pending = states(queued)
    say(f"({part}) before the cancel: {pending}")
    if cluster is not None:
        cluster.command("sdiag", "-r", check=False)
    tally = (
        process_cpu.CpuTally(cpu_groups, with_children=frozenset({"agents"}), every=args.cpu_every)
        if cpu_groups
        else None
    )
    if tally is not None:
        tally.start()
    load_before = os.getloadavg()[0]
    began = time.monotonic()
    began_wall = time.time()
    cpu_before = agents_cpu() if agents_cpu else 0.0
    cpu_began = console_cpu_seconds()
    sessions_before = sessions() if sessions else 0
    # The fillers are cancelled in one transaction, as part (a)'s one scancel cancels Slurm's: a
    # node takes no job until its filler is gone, and one commit each (about 20 ms quiet, far more
    # under load: 199 s for 256 at load 20) had the last nodes join the drain long after the first.
    # The live pages' news of the cancels goes out from the publisher thread, as a beat's and a
    # sync's does in the console, not as one channel-layer send per cancel, each on an event loop
    # of its own in this plain process (64 cancels: 2.4 s that way, 1.4 s this way at load 14).
    with published_later(), transaction.atomic():
        for job in Job.objects.filter(pk__in=fillers):
            cancel_job(actor=world[0], job=job)
    say(f"({part}) {len(fillers)} fillers cancelled in {time.monotonic() - began:.1f} s")
    last = [0.0]

    # The poll every 0.2 s counts the ended jobs by their id range when the queue's ids are one
    # (a bulk submit), not by a list of thousands of ids: the driver shares the console's cores.
    contiguous = len(set(queued)) == max(queued) - min(queued) + 1
    final = [str(state) for state in FINAL_STATES]

    def done() -> bool:
        if time.monotonic() - last[0] > 10:
            last[0] = time.monotonic()
            say(f"({part}) {time.monotonic() - began:.0f} s: {states(queued)}")
        if contiguous:
            in_range = Job.objects.filter(pk__gte=min(queued), pk__lte=max(queued), state__in=final)
            return in_range.count() == len(queued)
        counts = states(queued)
        return sum(counts.get(state, 0) for state in final) == len(queued)

    until(done, args.limit)
    seconds = time.monotonic() - began
    if agents_cpu is not None:
        spent = agents_cpu() - cpu_before
        say(
            f"({part}) agents' CPU over the drain (theirs and their reaped children's): {spent:.1f} s, "
            f"{spent / max(1, len(queued)) * 1000:.2f} ms a job"
        )
    cpu = console_cpu_seconds() - cpu_began
    say(f"({part}) the console's processes used {cpu:.1f} CPU-s in the drain, {1000 * cpu / len(queued):.1f} ms a job")
    if tally is not None:
        by_kind = tally.stop()
        say(f"({part}) CPU over the drain: {process_cpu.line(by_kind, args.jobs, seconds)}")
        say(f"({part}) load {load_before:.2f} at the cancel, {os.getloadavg()[0]:.2f} at the end")
    if sessions is not None:
        time.sleep(1)  # a backend reports its connection with its next statistics flush: within 1 s
        opened = sessions() - sessions_before
        say(f"({part}) PostgreSQL connections opened over the drain: {opened} ({opened / len(queued):.3f} a job)")
    if statements_of is not None:
        statements_of(datetime.fromtimestamp(began_wall, UTC), datetime.now(UTC))
    if cluster is None:
        from telemetry.models import GpuSample

        # The agents' GPU readings the console stored (a row per GPU of each beat that carried them).
        stored = GpuSample.objects.filter(at__gte=datetime.fromtimestamp(began_wall, UTC)).count()
        say(f"({part}) GPU readings stored over the drain: {stored} ({stored / len(queued):.2f} a job)")
    counts = states(queued)
    ended = sum(counts.get(str(state), 0) for state in FINAL_STATES)
    why = Job.objects.filter(pk__in=queued, state="failed").values_list("reason_message", flat=True)
    for message in sorted({str(message)[:200] for message in why[:200]})[:5]:
        say(f"({part}) failed: {message}")
    console_phases(queued, began_wall, seconds, args.nodes * GPUS, part)
    if cluster is not None:
        slurm_phases(cluster, queued, part)
    else:
        agent_phases(queued, part)
    return Figure(part, args.jobs, ended, seconds, ended - counts.get("succeeded", 0))


def console_cpu_seconds() -> float:
    """User and system CPU seconds of the console's processes so far (the launcher, its web,
    worker and beat processes and their children; not PostgreSQL): on this shared machine a
    drain's rate moves with the load, its CPU per job much less."""
    total = 0.0
    for process in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "console.launcher" not in " ".join(process.cmdline()):
                continue
            for member in [process, *process.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = member.cpu_times()
                    total += times.user + times.system
    return total


@contextlib.contextmanager
def console(args: argparse.Namespace, database: str, extra: dict[str, str]) -> Iterator[int]:
    """The console running on a fresh database `database`: yields the launcher's pid."""
    import redis

    server = os.environ["DATABASE_URL"]
    database_url = fresh_postgres(server, database)
    if args.statements:
        import psycopg

        with psycopg.connect(f"{server.rsplit('/', 1)[0]}/postgres", autocommit=True) as admin:
            statement_log.log_every_statement(admin, database)
    redis_url = os.environ["REDIS_URL"]
    redis.Redis.from_url(redis_url).flushdb()
    os.environ.update(
        {
            "CONSOLE_DEMO": "0",
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "CELERY_QUEUE": f"slurm-drain-{os.getpid()}",
            "CHANNELS_PREFIX": "slurm-drain",
            "LOG_LEVEL": "WARNING",
            # As a site runs it: DEBUG off (Django's debug cursor composed and kept every SQL
            # statement's text in each process). Plain HTTP on 127.0.0.1, so no redirect to HTTPS.
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(32),
            "DJANGO_SECURE_SSL_REDIRECT": "false",
            "DATABASE_URL": database_url,
            **extra,
        }
    )
    try:
        with running_console(
            port=args.port, database_url=database_url, redis_url=redis_url, memory_cap_bytes=4_000_000_000
        ) as running:
            import django
            from django.db import connections

            django.setup()
            from django.conf import settings

            settings.DATABASES["default"]["NAME"] = database
            connections.close_all()
            try:
                yield running.process.pid
            finally:
                connections.close_all()
    finally:
        os.environ["DATABASE_URL"] = server
        drop_postgres(database_url)


def part_b(args: argparse.Namespace, scratch: Path) -> Figure:
    with slurm_cluster(args.nodes, scratch / "slurm-b", args.scheduler_parameters) as cluster:
        output = scratch / "slurm-output"
        extra = {"SLURM_CONF": str(cluster.conf), "SLURM_OUTPUT_DIR": str(output), "SLURM_SYNC_SECONDS": str(args.sync)}
        with console(args, f"slurmdrain_b_{os.getpid()}", extra):
            from quotas.models import Node
            from slurm.models import SlurmJob

            wait_until(
                lambda: Node.objects.filter(executor="slurm").count() == args.nodes, seconds=300, what="nodes synced"
            )
            pool = Node.objects.filter(executor="slurm").values_list("pool__name", flat=True).first()
            world = console_world(str(pool), args.nodes)

            def fillers_started(ids: list[int]) -> bool:
                return SlurmJob.objects.filter(job_id__in=ids, state="RUNNING").count() == len(ids)

            return drain(world, args, fillers_started, "b", cluster)


def part_c(args: argparse.Namespace, scratch: Path) -> Figure:
    # Two web processes, as the agent benchmark's thousand agents ran (docs/agent.md).
    extra = {"AGENT_HEARTBEAT_SECONDS": str(args.heartbeat), "WEB_CONCURRENCY": "2"}
    database = f"slurmdrain_c_{os.getpid()}"
    with console(args, database, extra) as launcher:
        from gqc.agent import command_line
        from quotas.models import Node, NodeExecutor, ResourcePool
        from quotas.node_agents import issue_node_token
        from quotas.services import create_node

        admin_nodes = []
        from django.contrib.auth import get_user_model

        root = get_user_model().objects.create_superuser(username="inventory", email="", password=None)
        pool = ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)[0]
        for name in node_names(args.nodes):
            admin_nodes.append(
                create_node(
                    actor=root, name=name, gpus=GPUS, cpu=16, memory_gib=64, executor=NodeExecutor.AGENT, pool=pool
                )
            )
        agents_dir = scratch / "agents"
        agents_dir.mkdir(exist_ok=True)
        processes: list[subprocess.Popen[bytes]] = []
        census_link: psycopg.Connection[Any] | None = None
        try:
            for node in admin_nodes:
                token = agents_dir / f"{node.name}.token"
                token.write_text(issue_node_token(actor=None, node=node))
                argv = command_line(
                    server=f"http://127.0.0.1:{args.port}",
                    node=node.name,
                    token_file=token,
                    state_dir=agents_dir / node.name,
                    fake_gpus=GPUS,
                )
                with open(agents_dir / f"{node.name}.log", "ab") as log:
                    processes.append(
                        subprocess.Popen(
                            ["prlimit", f"--as={AGENT_CAP_BYTES}", "--", *argv],
                            cwd=ROOT,
                            # INFO: each start and exit with its time, read back by agent_timeline.
                            env={**os.environ, "LOG_LEVEL": "INFO"},
                            stdout=subprocess.DEVNULL,
                            stderr=log,
                            start_new_session=True,  # its group is SIGKILLed at the end
                        )
                    )
            wait_until(
                lambda: Node.objects.filter(agent__registered_at__isnull=False).count() == args.nodes,
                seconds=300,
                what="agents registered",
            )
            rss = sum(_rss(process.pid) for process in processes)
            say(
                f"(c) {args.nodes} agents registered, {rss / 2**30:.2f} GiB resident together, "
                f"{rss / args.nodes / 2**20:.1f} MiB an agent"
            )
            say(f"(c) node states: {node_states()}")
            world = console_world(pool.name, args.nodes)

            def fillers_started(ids: list[int]) -> bool:
                return sum(
                    len(list((agents_dir / name / "replicas").glob("*.json"))) for name in node_names(args.nodes)
                ) >= len(ids)

            def agents_cpu() -> float:
                return sum(_cpu_seconds(process.pid) for process in processes)

            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                driver_backend = int(cursor.fetchone()[0])
            # The census asks the server for the database's backends on a connection of its own
            # (the sampler's thread), which is the driver's too.
            census_link = psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)
            drivers = {driver_backend, census_link.info.backend_pid}
            census = process_cpu.Census(launcher=launcher, classify=_console_kind)
            census.keep("driver", process_cpu.this_process())
            census.keep("agents", [psutil.Process(process.pid) for process in processes])
            census.keep("redis (whole server)", process_cpu.redis_servers())

            def cpu_groups() -> dict[str, list[psutil.Process]]:
                with census_link.cursor() as cursor:
                    if not args.postgres_by_client:
                        backends = process_cpu.postgres_backend_pids(cursor, database)
                        census.keep_pids({pid: "driver" if pid in drivers else "postgres" for pid in backends})
                        return census.groups()
                    cursor.execute("SELECT pid, client_port FROM pg_stat_activity WHERE datname = %s", [database])
                    ports = {int(port): int(pid) for pid, port in cursor.fetchall() if port is not None}
                # Only a backend not yet kept is matched to its client's socket: the web's and the
                # worker's connections last, so the sockets are read when one opens, not each sample.
                new = {port: pid for port, pid in ports.items() if pid not in drivers and not census.knows(pid)}
                groups = census.groups()
                clients = {k: v for k, v in groups.items() if k in ("web", "worker", "beat", "launcher", "other")}
                kinds = statement_log.clients_of(new, clients) if new else {}
                census.keep_pids({pid: "driver" for pid in drivers})
                census.keep_pids({pid: f"postgres ({kinds.get(pid, '?')})" for pid in new.values()})
                return census.groups()

            def statements_of(since: datetime, until: datetime) -> None:
                kinds = statement_log.backends_by_process(connection, cpu_groups())
                time.sleep(1)  # the server's log is written a little later
                counted = statement_log.count(database, since.replace(tzinfo=None), until.replace(tzinfo=None), kinds)
                for said in statement_log.lines(counted, args.jobs):
                    say(f"(c) SQL over the drain, {said}")

            def sessions() -> int:
                """Connections ever opened to the drain's database (pg_stat_database, PostgreSQL 14+)."""
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_stat_force_next_flush()")
                    cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
                    return int(cursor.fetchone()[0])

            try:
                figure = drain(
                    world,
                    args,
                    fillers_started,
                    "c",
                    cpu_groups=cpu_groups,
                    statements_of=statements_of if args.statements else None,
                    agents_cpu=agents_cpu,
                    sessions=sessions,
                )
                rss = sum(_rss(process.pid) for process in processes)
                say(f"(c) after the drain: {rss / 2**30:.2f} GiB resident, {rss / args.nodes / 2**20:.1f} MiB an agent")
                agent_timeline(agents_dir, args.nodes)
                unanswered = sum(
                    (agents_dir / f"{name}.log").read_text(errors="replace").count("console unreachable or refused")
                    for name in node_names(args.nodes)
                )
                say(f"(c) requests the agents gave up on (a timeout, a refusal): {unanswered}")
                return figure
            except AssertionError:
                say(f"(c) node states: {node_states()}")
                for name, state, beat, lost, registered in Node.objects.exclude(state="ready").values_list(
                    "name", "state", "last_heartbeat", "agent__lost_at", "agent__registered_at"
                )[:5]:
                    tail = (agents_dir / f"{name}.log").read_text(errors="replace").strip().splitlines()[-3:]
                    say(f"(c) {name} {state}: beat {beat}, lost {lost}, registered {registered}; agent log: {tail}")
                raise
        finally:
            if census_link is not None:
                census_link.close()
            # SIGKILL, not SIGTERM: a stopping agent leaves its replicas (each in its own session,
            # the filler's wrapper ignoring SIGTERM) running; sweep_run ends those.
            kill_groups([process.pid for process in processes])
            for process in processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=10)


# The agent's own log lines (gqc.node_agent, at INFO) of a start and of an exit, with their time.
_AGENT_LINE = re.compile(r"^(\S+ \S+) agent (?:started replica \d+ of job (\d+)|replica \d+ of job (\d+) exited with)")


def _console_kind(process: psutil.Process) -> str:
    role = _role(process)
    if role == "other" and "multiprocessing" in process_cpu.command_of(process):
        return "web"  # uvicorn's workers: spawned by its manager, named by nothing else
    return role


def _agent_moment(stamp: str) -> datetime:
    # logging's asctime: local time, milliseconds after a comma.
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").astimezone(UTC)


def agent_timeline(agents_dir: Path, nodes: int) -> None:
    """(c): where a drained job's time went, from the console's records and each agent's log:
    the slot freed (the end recorded of the job before it on that node) -> admitted (the cycle)
    -> the agent started its process (the answer that carried the start) -> the agent saw it
    exit -> the beat that reported it began (the `started` event) -> its end recorded."""
    from scheduling.models import Job, JobEvent

    started: dict[int, datetime] = {}
    exited: dict[int, datetime] = {}
    node_of: dict[int, str] = {}
    for name in node_names(nodes):
        for line in (agents_dir / f"{name}.log").read_text(errors="replace").splitlines():
            if (match := _AGENT_LINE.match(line)) is None:
                continue
            if match.group(2):
                job = int(match.group(2))
                started.setdefault(job, _agent_moment(match.group(1)))
                node_of[job] = name
            else:
                exited.setdefault(int(match.group(3)), _agent_moment(match.group(1)))
    times = {
        pk: (admitted, finished)
        for pk, admitted, finished in Job.objects.filter(pk__in=list(node_of)).values_list(
            "pk", "started_at", "finished_at"
        )
    }
    reported: dict[int, datetime] = {}
    for pk, at in JobEvent.objects.filter(job_id__in=list(node_of), kind="started").values_list("job_id", "at"):
        reported.setdefault(pk, at)
    ends_by_node: dict[str, list[datetime]] = {}
    for pk, name in node_of.items():
        if (finished := times.get(pk, (None, None))[1]) is not None:
            ends_by_node.setdefault(name, []).append(finished)
    for ends in ends_by_node.values():
        ends.sort()
    phases: dict[str, list[float]] = {
        "slot freed -> admitted": [],
        "admitted -> the agent started it": [],
        "started -> the agent saw the exit": [],
        "exit seen -> the reporting beat began": [],
        "the beat began -> the end recorded": [],
    }
    for pk, (admitted, finished) in times.items():
        if admitted is None or pk not in started or pk not in exited or pk not in reported or finished is None:
            continue
        before = [end for end in ends_by_node.get(node_of[pk], []) if end <= admitted]
        if before:
            phases["slot freed -> admitted"].append((admitted - before[-1]).total_seconds())
        phases["admitted -> the agent started it"].append((started[pk] - admitted).total_seconds())
        phases["started -> the agent saw the exit"].append((exited[pk] - started[pk]).total_seconds())
        phases["exit seen -> the reporting beat began"].append((reported[pk] - exited[pk]).total_seconds())
        phases["the beat began -> the end recorded"].append((finished - reported[pk]).total_seconds())
    for what, values in phases.items():
        say(f"(c) {what}: {spread(values)}")


def node_states() -> dict[str, int]:
    from django.db.models import Count

    from quotas.models import Node

    return {str(state): int(count) for state, count in Node.objects.values_list("state").annotate(Count("id"))}


def _cpu_seconds(pid: int) -> float:
    """The process's CPU (user and system) with that of its children it has reaped: an agent's own
    work and its job wrappers' (each wrapper reaps the job's processes before the agent reaps it)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system + times.children_user + times.children_system)


def _rss(pid: int) -> int:
    try:
        family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
        return sum(process.memory_info().rss for process in family)
    except psutil.Error:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--parts", nargs="*", default=["a", "b", "c"], choices=["a", "b", "c"])
    parser.add_argument("--port", type=int, default=8475)
    parser.add_argument("--sync", type=float, default=1.0, help="the console's SLURM_SYNC_SECONDS in (b)")
    parser.add_argument("--heartbeat", type=float, default=2.0, help="AGENT_HEARTBEAT_SECONDS in (c)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds the queue waits before the cancel")
    parser.add_argument("--limit", type=float, default=1800.0, help="the longest a drain may take")
    parser.add_argument(
        "--stall", type=float, default=60.0, help="(a) stops when no job ended for this long; the rest are stuck"
    )
    parser.add_argument("--memory-floor-gib", type=float, default=2.5)
    parser.add_argument(
        "--cpu-every",
        type=float,
        default=2.0,
        help="(c) seconds between CPU samples; a PostgreSQL backend that lives between two is not counted "
        "(Celery's fix-up gave the worker one for each task), so 0.1 when comparing the worker's connections",
    )
    parser.add_argument(
        "--scheduler-parameters",
        default="",
        help="slurm.conf's SchedulerParameters for (a) and (b) (empty: Slurm's defaults), e.g. batch_sched_delay=0",
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="(c) counts the SQL statements of the drain by process, from the server's log (slows the server)",
    )
    parser.add_argument(
        "--postgres-by-client",
        action="store_true",
        help="(c) splits PostgreSQL's CPU by the kind of process each backend serves (web, worker, beat)",
    )
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get("REDIS_URL"):
        sys.exit(
            "Set DATABASE_URL (PostgreSQL: scratch databases are made next to it) and REDIS_URL (a private index)."
        )
    watch = MemoryWatch(int(args.memory_floor_gib * 2**30))
    scratch = Path(tempfile.mkdtemp(prefix="slurm-drain-"))
    say(
        f"{args.nodes} nodes x {GPUS} GPUs, {args.jobs} jobs, parts {' '.join(args.parts)}; "
        f"{psutil.cpu_count()} CPUs, {psutil.virtual_memory().available / 2**30:.1f} GiB available, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    figures: list[Figure] = []
    if len(args.parts) > 1:
        say(estimate(args))
    try:
        if len(args.parts) == 1:
            token = mark_run()
            try:
                figure = {"a": part_a, "b": part_b, "c": part_c}[args.parts[0]](args, scratch)
            finally:
                if swept := sweep_run(token):
                    say(f"({args.parts[0]}) {len(swept)} processes left at the end, killed: {'; '.join(swept[:5])}")
            say(f"{figure.line()}; load {os.getloadavg()[0]:.2f}")
            print(
                f"FIGURE {figure.part} {figure.jobs} {figure.ended} {figure.seconds} {figure.failed} {figure.stuck}",
                flush=True,
            )
            return 0
        for part in args.parts:
            # Each part in its own process: its own Django set-up, database and console.
            figures.append(run_part(part))
    finally:
        watch.stop.set()
        shutil.rmtree(scratch, ignore_errors=True)
        if figures:
            report(figures, watch)
    return 0


# What one part took per node and per job on the shared 2-core VM (docs/benchmarks-runtime.md,
# issue 25): starting a slurmd or an agent and the console, sbatch'ing or submitting the queue,
# and draining at about 30 jobs/s; resident memory per slurmd and per agent.
_START_S_PER_NODE = 0.4
_SUBMIT_S_PER_JOB = 0.02
_DRAIN_JOBS_PER_S = 30.0
_RSS_PER_NODE = {"a": 12 * 2**20, "b": 12 * 2**20, "c": 22 * 2**20}  # an agent: 32 MiB while it imported httpx


def estimate(args: argparse.Namespace) -> str:
    """How long the run should take and its largest resident memory, said before it starts: at
    the issue's size (256 nodes, 10,000 jobs) a run is long and holds hundreds of processes."""
    per_part = 60 + args.nodes * _START_S_PER_NODE + args.jobs * (_SUBMIT_S_PER_JOB + 1 / _DRAIN_JOBS_PER_S)
    memory = max(_RSS_PER_NODE[part] for part in args.parts) * args.nodes + 1.5 * 2**30  # + the console
    return (
        f"estimate: about {len(args.parts) * per_part / 60:.0f} min in all (limit {args.limit:.0f} s a drain), "
        f"at most {memory / 2**30:.1f} GiB resident at once; the watchdog stops the run under "
        f"{args.memory_floor_gib:g} GiB available"
    )


def run_part(part: str) -> Figure:
    argv = [sys.executable, __file__, *sys.argv[1:]]
    if "--parts" in argv:
        at = argv.index("--parts")
        while at + 1 < len(argv) and argv[at + 1] in ("a", "b", "c"):
            del argv[at + 1]
        argv.insert(at + 1, part)
    else:
        argv += ["--parts", part]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    figure = Figure(part, 0, 0, 0.0)
    try:
        for line in child.stdout:
            if line.startswith("FIGURE "):
                _tag, name, jobs, ended, seconds, failed, stuck = line.split()
                figure = Figure(name, int(jobs), int(ended), float(seconds), int(failed), int(stuck))
            else:
                print(line, end="", flush=True)
    finally:
        if child.poll() is None:  # interrupted here: the part's own clean-up runs on its SIGINT
            child.send_signal(signal.SIGINT)
        child.wait()
    return figure


def report(figures: list[Figure], watch: MemoryWatch) -> None:
    by_part = {figure.part: figure for figure in figures}
    for figure in figures:
        print(figure.line())
    slurm = by_part.get("a")
    if slurm and slurm.rate:  # a part that failed has no rate to compare with
        if "b" in by_part:
            print(f"(b)/(a) = {by_part['b'].rate / slurm.rate:.2f} (target >= 1)")
        if "c" in by_part:
            print(f"(c)/(a) = {by_part['c'].rate / slurm.rate:.2f} (target >= 10)")
    print(f"lowest available memory during the run: {watch.lowest / 2**30:.1f} GiB")


if __name__ == "__main__":
    sys.exit(main())
