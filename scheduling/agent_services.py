"""The console's half of the agent protocol (AGENT.md): what a beat changes, and what it answers.
The protocol's shapes and the beat's read are agent_beat.py, a registration's claim
agent_claims.py; their names are re-exported here.

The database stays the truth. A heartbeat reports the processes the agent holds; the answer is
derived from the rows after the report is applied: a replica placed on the node and never reported
is a start, a reported process whose replica is no longer wanted there is a stop. So the same
answer twice changes nothing: the agent starts a replica once (it keys processes by replica id),
and a stop it is already carrying out keeps its first deadline.

A beat is a constant number of queries whatever the node runs (bulk reads, bulk writes); only a
process exit that ends a job costs that job's own few statements, as `finish_job` writes them.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from quotas import bounds
from quotas.models import Node, NodeAgent, NodeExecutor, NodeState
from quotas.node_agents import mark_seen
from scheduling import bulk, lifecycle, triggers
from scheduling.agent_beat import FOREIGN_STOP_GRACE_SECONDS as FOREIGN_STOP_GRACE_SECONDS
from scheduling.agent_beat import Claim as Claim
from scheduling.agent_beat import Desired as Desired
from scheduling.agent_beat import DesiredStart as DesiredStart
from scheduling.agent_beat import DesiredStop as DesiredStop
from scheduling.agent_beat import HeldProcess as HeldProcess
from scheduling.agent_beat import ProcessReport as ProcessReport
from scheduling.agent_beat import _read_beat, _start_of, has_free_device, read_for_endings
from scheduling.agent_claims import claim_state as claim_state
from scheduling.models import (
    AgentProcess,
    AgentProcessState,
    Job,
    JobEvent,
    JobEventKind,
    JobLog,
    JobState,
    ReplicaPlacementRecord,
)

logger = logging.getLogger(__name__)

# How many of the log's last lines go into the event of a failed job.
FAILURE_LOG_LINES = 20
# The started events' columns, written as plain rows (scheduling.bulk), as the job ends' are: as
# model instances through bulk_create, building and compiling them was 4-8 % of the web processes'
# Python time in the drain benchmark of issue 25 (an exit beat of a short job writes its start too).
_EVENT_COLUMNS = ("job_id", "kind", "at", "rule", "beneficiary_id", "message")


def _append_logs(lines_by_job: dict[int, list[str]], truncated_jobs: set[int], now: datetime) -> None:
    """Each job's tail grows by what this beat shipped and keeps its last AGENT_LOG_LINES_KEPT lines."""
    if not lines_by_job and not truncated_jobs:
        return
    job_ids = set(lines_by_job) | truncated_jobs
    existing = {log.job_id: log for log in JobLog.objects.filter(job_id__in=job_ids)}
    created: list[JobLog] = []
    changed: list[JobLog] = []
    for job_id in sorted(job_ids):
        log = existing.get(job_id)
        if log is None:
            log = JobLog(job_id=job_id, lines=[], truncated=False, updated_at=now)
            created.append(log)
        else:
            changed.append(log)
        lines = [*log.lines, *lines_by_job.get(job_id, [])]
        keep = bounds.AGENT_LOG_LINES_KEPT
        log.truncated = log.truncated or len(lines) > keep or job_id in truncated_jobs
        log.lines = lines[-keep:]
        log.updated_at = now
    JobLog.objects.bulk_create(created, ignore_conflicts=True)
    JobLog.objects.bulk_update(changed, ["lines", "truncated", "updated_at"])


# Sent after a beat's commit with `node` and `samples` (the beat's GPU readings, as validated by
# the API: index, utilization, memory_used_mib, memory_total_mib?). Telemetry stores them
# (telemetry.apps connects the receiver): scheduling sits below telemetry and cannot call it.
gpu_samples_reported = Signal()


def report_gpu_samples(*, agent: NodeAgent, samples: Sequence[Mapping[str, Any]]) -> None:
    """Hand a beat's GPU readings to whoever records them, once the beat has committed."""
    if not samples:
        return
    node = agent.node
    readings = [dict(sample) for sample in samples]
    transaction.on_commit(lambda: gpu_samples_reported.send(sender=NodeAgent, node=node, samples=readings))


def heartbeat(*, agent: NodeAgent, processes: Sequence[ProcessReport], now: datetime | None = None) -> Desired:
    """Apply one beat of `agent`'s node and answer its desired state (see the module's docstring).

    A steady beat (the same processes running, nothing ended, nothing stopping) writes nothing
    but, now and then, the node's last beat (mark_seen): one statement, or two, and no
    transaction. Any other opens one for its writes. The read needs none: PostgreSQL's READ
    COMMITTED gave each statement of the transaction its own snapshot anyway, and every write
    below tolerates a row that moved since it was read (ignore_conflicts, seen revisions)."""
    now = now or timezone.now()
    node: Node = agent.node
    reported = {report.replica: report for report in processes}
    # The placements with no process row yet carry their rank, environment and image.
    placements, rows, forgotten = _read_beat(agent, node, reported)
    change = _changes_of(placements, rows, reported, node=node, now=now)
    releasing = any(row["state"] == JobState.RELEASING for row in placements.values())
    unasked, overdue = _starts_pending(placements, rows, reported, node=node, now=now)
    if unasked:
        # The clock of each start runs from the first answer that asks for it; one statement,
        # only in a beat that asks for something new.
        ReplicaPlacementRecord.objects.filter(pk__in=unasked, start_asked_at__isnull=True).update(start_asked_at=now)
    if not (change or releasing or overdue or agent.lost_at is not None):
        mark_seen(agent=agent, node=node, now=now)
        return _answer(node, placements, rows, reported, ended=set())
    with transaction.atomic():
        AgentProcess.objects.bulk_update(change.exited_rows, ["state", "exit_code", "exited_at"])
        bulk.insert(JobEvent, _EVENT_COLUMNS, change.new_events)
        _append_logs(change.lines_by_job, change.truncated_jobs, now)
        ended = _settle_jobs(placements, rows, reported, change.outcomes, node=node, now=now)
        ended |= _give_up_starts(agent, placements, overdue, ended, node=node, now=now)
        # A process first reported exited, whose job ended here, would be written only to be
        # forgotten below (its replica is no longer placed): a short job's usual row.
        new_rows = [row for row in change.new_rows if row.state != AgentProcessState.EXITED or row.job_id not in ended]
        AgentProcess.objects.bulk_create(new_rows, ignore_conflicts=True)
        if ended:  # before the commit: a quick cycle could place here before a later mark (agent_holds)
            triggers.mark_freed(node.pk)
        if change.new_rows and agent.start_missed_at is not None and not overdue:
            # It takes up starts again: the Nodes page's warning has done its work.
            NodeAgent.objects.filter(pk=agent.pk).update(start_missed_at=None, start_missed="")
            agent.start_missed_at, agent.start_missed = None, ""
        if change.exited_rows or any(row.state == AgentProcessState.EXITED for row in change.new_rows):
            # An exited process's row is kept while its replica is still placed here (so that it
            # is never started again) and forgotten after: rows would only grow. A row is left
            # behind only in a beat that records an exit, so only such a beat pays for this, and
            # only when there is such a row.
            still_placed = [replica for replica, row in placements.items() if row["job_id"] not in ended]
            unwritten = {row.replica for row in change.new_rows} - {row.replica for row in new_rows}
            if forgotten or any(
                row.state == AgentProcessState.EXITED and replica not in unwritten and replica not in still_placed
                for replica, row in rows.items()
            ):
                AgentProcess.objects.filter(node=node, state=AgentProcessState.EXITED).exclude(
                    replica__in=still_placed
                ).delete()
        # Last, so that the node's row (which every page and cycle reads) is written for the
        # shortest time.
        if mark_seen(agent=agent, node=node, now=now):
            node.state = NodeState.READY
            triggers.request_cycle_on_commit("node-back")
    return _answer(node, placements, rows, reported, ended)


def start_deadline_seconds() -> float:
    """How long an agent has to report a start it was asked for: AGENT_START_BEATS heartbeats.

    An agent reports a process at its first beat after the answer that asked for it (it starts
    what an answer asks before it beats again), so a start still missing this many beats later was
    lost on the way or refused: a state directory it cannot write, a fork that fails."""
    return float(settings.AGENT_START_BEATS) * float(settings.AGENT_HEARTBEAT_SECONDS)


def _starts_pending(
    placements: dict[int, dict[str, Any]],
    rows: dict[int, AgentProcess],
    reported: dict[int, ProcessReport],
    *,
    node: Node,
    now: datetime,
) -> tuple[list[int], list[int]]:
    """The starts this beat asks for the first time, and those asked for so long ago that the agent
    will not take them up (start_deadline_seconds)."""
    if node.executor != NodeExecutor.AGENT:
        return [], []
    unasked: list[int] = []
    overdue: list[int] = []
    deadline = start_deadline_seconds()
    for replica, row in placements.items():
        if row["state"] != JobState.RUNNING or replica in rows or replica in reported:
            continue
        asked = row["start_asked_at"]
        if asked is None:
            unasked.append(replica)
        elif (now - asked).total_seconds() >= deadline:
            overdue.append(replica)
    return unasked, overdue


def _give_up_starts(
    agent: NodeAgent,
    placements: dict[int, dict[str, Any]],
    overdue: Sequence[int],
    ended: set[int],
    *,
    node: Node,
    now: datetime,
) -> set[int]:
    """Jobs with a start the agent did not take up in time go back to the queue, with an event
    saying so, and the node shows a warning. Returns the jobs requeued."""
    requeued: set[int] = set()
    deadline = start_deadline_seconds()
    for replica in sorted(overdue):
        row = placements[replica]
        job_id = row["job_id"]
        if job_id in ended or job_id in requeued:
            continue
        if lifecycle.requeue_unstarted(
            job_id=job_id,
            seen_revision=row["revision"],
            now=now,
            message=f"the agent on {node.name} did not start it within {deadline:g} s",
        ):
            requeued.add(job_id)
            logger.warning("the agent on %s did not start replica %s of job %s in time", node.name, replica, job_id)
    if requeued:
        missed = f"did not start job {min(requeued)} within {deadline:g} s"
        if len(requeued) > 1:
            missed = f"did not start {len(requeued)} jobs within {deadline:g} s"
        NodeAgent.objects.filter(pk=agent.pk).update(start_missed_at=now, start_missed=missed)
        agent.start_missed_at, agent.start_missed = now, missed
        triggers.request_cycle_on_commit("start-missed")
    return requeued


@dataclass(slots=True)
class _BeatChange:
    """What a beat's report changes: rows to add or mark exited, events, log lines, and the
    (job id, replica, exit code) of each process that ended a replica."""

    new_rows: list[AgentProcess] = field(default_factory=list)
    exited_rows: list[AgentProcess] = field(default_factory=list)
    new_events: list[tuple[int, str, datetime, str, int | None, str]] = field(default_factory=list)  # _EVENT_COLUMNS
    lines_by_job: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    truncated_jobs: set[int] = field(default_factory=set)
    outcomes: list[tuple[int, int, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.new_rows or self.exited_rows or self.lines_by_job or self.truncated_jobs or self.outcomes)


def _changes_of(
    placements: dict[int, dict[str, Any]],
    rows: dict[int, AgentProcess],
    reported: dict[int, ProcessReport],
    *,
    node: Node,
    now: datetime,
) -> _BeatChange:
    """Compare the report with the rows; `rows` gains the new ones (the answer reads it)."""
    change = _BeatChange()
    for replica, report in reported.items():
        placement = placements.get(replica)
        row = rows.get(replica)
        if row is None and placement is None:
            continue  # Not a replica of this node (gone, or another node's): only told to stop.
        exited = report.state == AgentProcessState.EXITED
        if row is None:
            assert placement is not None
            row = AgentProcess(
                node=node,
                replica=replica,
                job_id=placement["job_id"],
                state=report.state,
                pid=report.pid,
                exit_code=report.exit_code if exited else None,
                started_at=now,
                exited_at=now if exited else None,
            )
            change.new_rows.append(row)
            rows[replica] = row
            pid = f" (pid {report.pid})" if report.pid else ""
            message = f"replica {placement['rank']} started on {node.name}{pid}"
            change.new_events.append((row.job_id, JobEventKind.STARTED.value, now, "", None, message))
            if exited:
                change.outcomes.append((row.job_id, replica, int(report.exit_code or 0)))
        elif row.state == AgentProcessState.RUNNING and exited:
            row.state = AgentProcessState.EXITED
            row.exit_code = report.exit_code
            row.exited_at = now
            change.exited_rows.append(row)
            if placement is not None:
                change.outcomes.append((row.job_id, replica, int(report.exit_code or 0)))
        if report.log:
            change.lines_by_job[row.job_id].extend(report.log)
        if report.log_truncated:
            change.truncated_jobs.add(row.job_id)
    return change


def _settle_jobs(
    placements: dict[int, dict[str, Any]],
    rows: dict[int, AgentProcess],
    reported: dict[int, ProcessReport],
    outcomes: Sequence[tuple[int, int, int]],
    *,
    node: Node,
    now: datetime,
) -> set[int]:
    """Jobs whose processes say they are over: a failed exit fails the job, all replicas out with 0
    succeed it, and an evicted job is released once none of its processes is left. Returns the ids
    of the jobs that let go of their GPUs (their replicas here are no longer wanted)."""
    from scheduling.services import Ending, finish_jobs

    ended: set[int] = set()
    endings: list[Ending] = []
    releasing = {row["job_id"] for row in placements.values() if row["state"] == JobState.RELEASING}
    touched = {job_id for job_id, _r, _c in outcomes} | releasing
    if not touched:
        return ended
    # Every replica of those jobs, on every node, with its agent's report, and the jobs: one query.
    replicas, reported_state, jobs = read_for_endings(touched, FAILURE_LOG_LINES)
    for replica, row in rows.items():  # this node's as this beat left them
        if (node.pk, replica) in reported_state:
            reported_state[(node.pk, replica)] = row.state

    def gone(replica: int, node_id: int) -> bool:
        state = reported_state.get((node_id, replica))
        if state is not None:
            return state == AgentProcessState.EXITED
        # Never reported: on this node, the agent just said it holds no such process; elsewhere
        # it was never seen started (a start in flight is told to stop when it reports).
        return node_id != node.pk or replica not in reported

    failures = {(job_id, replica): code for job_id, replica, code in outcomes if code != 0}
    for job_id in sorted(touched):
        job = jobs.get(job_id)
        if job is None:
            continue
        all_gone = all(gone(replica, node_id) for replica, node_id in replicas[job_id])
        if job.state == JobState.RELEASING and all_gone and job.reason_code == lifecycle.CANCELLING:
            if lifecycle.finish_cancel(
                job_id=job.pk, seen_revision=job.revision, now=now, why="its processes stopped; devices freed"
            ):
                ended.add(job.pk)
                triggers.request_cycle_on_commit("cancel")
            continue
        if job.state == JobState.RELEASING and all_gone:
            if lifecycle.release_job(
                job_id=job.pk,
                seen_state=JobState.RELEASING,
                seen_revision=job.revision,
                requeue=job.requeue,
                now=now,
                message="its processes stopped after the eviction; devices freed",
            ):
                ended.add(job.pk)
                triggers.request_cycle_on_commit("released")
            continue
        if job.state != JobState.RUNNING:
            continue
        failed = next(((replica, code) for (jid, replica), code in failures.items() if jid == job_id), None)
        # A running job succeeds only once every replica was seen exiting, on every node.
        all_exited = all(
            reported_state.get((node_id, replica)) == AgentProcessState.EXITED for replica, node_id in replicas[job_id]
        )
        if failed is None and not all_exited:
            continue  # Some replicas still run; the job ends with its last one.
        tail = job.tail
        if failed is not None:
            message = f"replica {failed[0]} exited with code {failed[1]}" + (
                "; last lines:\n" + "\n".join(tail) if tail else ""
            )
        else:
            message = "every replica exited with code 0" + ("; last lines:\n" + "\n".join(tail) if tail else "")
        endings.append(Ending(job.pk, failed is None, message))
    # The beat's ends in one write: one cycle request and one live publish for them all (the
    # publish alone cost about 0.17 s a job on the loaded test machine, benchmarks/slurm_drain.py).
    finished = {job.pk for job in finish_jobs(endings)}
    for ending in endings:
        if ending.job_id not in finished:  # It moved on meanwhile (cancelled): left as it is.
            logger.info("job %s moved on before its exit was recorded", ending.job_id)
    return ended | finished


def _answer(
    node: Node,
    placements: dict[int, dict[str, Any]],
    rows: dict[int, AgentProcess],
    reported: dict[int, ProcessReport],
    ended: set[int],
) -> Desired:
    wanted = {
        replica: row
        for replica, row in placements.items()
        if row["state"] == JobState.RUNNING and row["job_id"] not in ended
    }
    heartbeat_seconds = float(settings.AGENT_HEARTBEAT_SECONDS)
    follow_up = min(heartbeat_seconds, float(settings.AGENT_FOLLOW_UP_SECONDS))
    desired = Desired(node=node.name, state=node.state, heartbeat_seconds=heartbeat_seconds)
    if node.executor == NodeExecutor.AGENT:
        desired.starts = [
            _start_of(row) for replica, row in sorted(wanted.items()) if replica not in rows and replica not in reported
        ]
    if ended:
        # It freed devices and asked for a cycle, whose placements here come sooner than a heartbeat.
        desired.heartbeat_seconds, desired.follow_up = follow_up, True
    elif (
        follow_up < heartbeat_seconds
        and not desired.starts
        and has_free_device(node, placements, ended)
        and triggers.cycle_on_its_way(node.pk)
    ):
        # The follow-up came before the cycle its release asked for committed: again soon.
        desired.heartbeat_seconds, desired.follow_up = follow_up, True
    unwanted = sorted(
        replica
        for replica, report in reported.items()
        if report.state == AgentProcessState.RUNNING and replica not in wanted
    )
    if unwanted:
        job_of = {replica: row.job_id for replica, row in rows.items()}
        job_of.update({replica: row["job_id"] for replica, row in placements.items()})
        graces = dict(
            Job.objects.filter(pk__in={job_of[r] for r in unwanted if r in job_of}).values_list("pk", "grace_seconds")
        )
        desired.stops = [
            DesiredStop(
                replica=replica,
                job=job_of.get(replica, 0),
                grace_seconds=float(graces.get(job_of.get(replica, 0), 0.0)),
            )
            for replica in unwanted
        ]
    return desired
