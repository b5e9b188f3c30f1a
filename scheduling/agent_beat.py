"""The agent protocol's shapes and a beat's one read (AGENT.md): what a beat reports and what
its answer says (ProcessReport; Desired, with its starts and stops), what an agent holds when it
registers (HeldProcess, Claim), and the one statement that checks a beat's token and reads the
node, the replicas placed on it with what a start needs, and the agent's process rows.
agent_services applies a beat over them and re-exports the shapes."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from django.db import connection
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from quotas.models import Node, NodeAgent, NodeExecutor, NodeState
from quotas.node_agents import NodeTokenRevoked, forget_token
from scheduling.models import (
    AgentProcess,
    AgentProcessState,
    ReplicaPlacementRecord,
)

# The grace of a stop for a process left from a state directory of another console: the console
# knows nothing of its job, and the devices it holds may be placed on already.
FOREIGN_STOP_GRACE_SECONDS: Final = 10.0
# A job with no command on an agent node still holds its GPUs for its duration (or until ended).
_FOREVER_SECONDS = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ProcessReport:
    """One process the agent holds, as its beat says: running, or exited with a code."""

    replica: int
    state: str
    pid: int | None = None
    exit_code: int | None = None
    log: tuple[str, ...] = ()
    log_truncated: bool = False


@dataclass(frozen=True, slots=True)
class DesiredStart:
    replica: int
    job: int
    rank: int
    command: str
    environment: dict[str, str]
    gpus: list[int]
    fraction: float
    image: str = ""


@dataclass(frozen=True, slots=True)
class DesiredStop:
    replica: int
    job: int
    grace_seconds: float


@dataclass(slots=True)
class Desired:
    """The answer to a beat: the node's desired state."""

    node: str
    state: str
    starts: list[DesiredStart] = field(default_factory=list)
    stops: list[DesiredStop] = field(default_factory=list)
    heartbeat_seconds: float = 2.0
    # Asked back sooner (AGENT_FOLLOW_UP_SECONDS) for what the cycle on its way places here; not
    # sent: the heartbeat's route may hold such an answer until that cycle (console.agent_holds).
    follow_up: bool = False


@dataclass(frozen=True, slots=True)
class HeldProcess:
    """A process the agent's state directory holds when it registers (running, or exited unreported)."""

    replica: int
    job: int
    pid: int


@dataclass(frozen=True, slots=True)
class Claim:
    """Whose the agent's state directory is: this console's identity and the node's, the replicas
    the agent keeps and reports as this console's, and those it stops (if alive) and forgets."""

    console: str
    node_id: int
    adopt: list[int]
    stop: list[int]
    stop_grace_seconds: float = FOREIGN_STOP_GRACE_SECONDS


# The agent's token, its node's current row, the node's placements with what a start needs, and
# the agent's process rows: one statement, without the ORM's compile step (a beat runs it each
# time: compiling the joins cost as much as running them). The token is checked here because the
# agent may come from this process's memory (quotas.node_agents.agent_for_token): a token rotated
# by another process matches no row, and the beat is refused. The node's row is re-read for the
# same reason: an admin may have cordoned it or changed its executor meanwhile. The first part's
# rows are the node and its placements (one row with no placement when it has none), the second
# part's the processes. A placement with no process row yet (a start to ask for, or one the beat
# reports for the first time) also carries what its start needs beyond the row: its rank (its
# position among its job's placements) and its job's environment and image; a steady beat does not
# carry up to 64 variables of 4 KiB for every replica on the node. These were two more queries in
# every beat that asked for starts (the drain of issue 25: most beats).
_PROCESS_FIELDS = ("id", "node_id", "replica", "job_id", "state", "pid", "exit_code", "started_at", "exited_at")
_PLACEMENT_COLUMNS = (
    "id", "job_id", "devices", "fraction", "start_asked_at", "state", "revision", "name", "command", "duration",
    "grace_seconds", "requeue", "quota", "replicas", "fresh", "rank", "environment", "image",
)  # fmt: skip
_NO_PROCESS = ", ".join(["NULL"] * len(_PROCESS_FIELDS))
_NO_PLACEMENT = ", ".join(["NULL"] * (5 + len(_PLACEMENT_COLUMNS)))
_BEAT_SQL = f"""
SELECT 0, a.lost_at, a.start_missed_at, n.state, n.executor, n.last_heartbeat,
       p.id, p.job_id, p.devices, p.fraction, p.start_asked_at, j.state, j.revision, j.name, j.command,
       j.duration, j.grace_seconds, j.requeue, q.name, j.running_replicas,
       CASE WHEN r0.id IS NULL THEN 1 ELSE 0 END,
       CASE WHEN r0.id IS NULL THEN (
           SELECT COUNT(*) FROM scheduling_replicaplacementrecord p0 WHERE p0.job_id = p.job_id AND p0.id < p.id
       ) END,
       CASE WHEN r0.id IS NULL THEN j.environment END,
       CASE WHEN r0.id IS NULL THEN j.image END,
       {_NO_PROCESS}
FROM quotas_nodeagent a
JOIN quotas_node n ON n.id = a.node_id
LEFT JOIN scheduling_replicaplacementrecord p ON p.node_id = a.node_id
LEFT JOIN scheduling_job j ON j.id = p.job_id
LEFT JOIN quotas_quota q ON q.id = j.quota_id
LEFT JOIN scheduling_agentprocess r0 ON r0.node_id = a.node_id AND r0.replica = p.id
WHERE a.id = %s AND a.token_hash = %s
UNION ALL
SELECT 1, {_NO_PLACEMENT}, {", ".join(f"r.{name}" for name in _PROCESS_FIELDS)}
FROM quotas_nodeagent a
JOIN scheduling_agentprocess r ON r.node_id = a.node_id
WHERE a.id = %s AND a.token_hash = %s
"""
_PLACEMENT_AT: Final = slice(6, 6 + len(_PLACEMENT_COLUMNS))
_PROCESS_AT: Final = slice(6 + len(_PLACEMENT_COLUMNS), None)


class _ServerBindingDebugCursor(CursorDebugWrapper):
    """Django's PostgreSQL backend logs a statement by reading it back from a client-binding
    cursor (None from this one): logged as written instead, placeholders and all."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        with self.debug_sql(sql, params):
            return CursorWrapper.execute(self, sql, params)


def _beat_cursor() -> CursorWrapper:
    """The cursor for _BEAT_SQL. Django's psycopg cursor binds parameters client-side, so
    PostgreSQL planned the statement at every beat: 0.3 ms of a 0.4 ms round trip (measured
    with 1,000 nodes), at 200 beats a second. On PostgreSQL this one binds server-side, and the
    connection prepares such statements at their first run (Django turns psycopg's preparing off
    for connection poolers' sake; no other cursor of ours binds server-side, so nothing else is
    prepared). psycopg drops its prepared statements at a rollback and prepares again. Django's
    wrapper stays around it: the query log and execute_wrappers (the tests' query counts) see it."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    import psycopg  # here, not at the top: a process on SQLite (`manage.py simulate`) never loads it

    raw = connection.connection
    raw.prepare_threshold = 0
    cursor = psycopg.Cursor(raw)
    if connection.queries_logged:
        return _ServerBindingDebugCursor(cursor, connection)
    return CursorWrapper(cursor, connection)


def _moment(value: Any) -> datetime | None:
    """A timestamp from a raw row: SQLite hands back text or naive datetimes, PostgreSQL aware ones."""
    if value is None:
        return None
    moment = parse_datetime(value) if isinstance(value, str) else value
    assert isinstance(moment, datetime)
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)


def _read_beat(
    agent: NodeAgent, node: Node, reported: Collection[int]
) -> tuple[dict[int, dict[str, Any]], dict[int, AgentProcess], bool]:
    """Check the token, refresh the node and the agent, and read every replica placed on the node
    with what its start needs, and the agent's rows of those and of the `reported` replicas, by
    replica, and whether the node has rows of other exited processes (left for the next exit to
    forget); one query. Raises NodeTokenRevoked."""
    with _beat_cursor() as cursor:
        cursor.execute(_BEAT_SQL, [agent.pk, agent.token_hash] * 2)
        rows = cursor.fetchall()
    own = [row for row in rows if row[0] == 0]
    if not own:
        forget_token(agent.token_hash)
        raise NodeTokenRevoked(agent.token_hash)
    lost_at, start_missed_at, node.state, node.executor, last_heartbeat = own[0][1:6]
    agent.lost_at, node.last_heartbeat = _moment(lost_at), _moment(last_heartbeat)
    agent.start_missed_at = _moment(start_missed_at)
    placements = {}
    for row in own:
        if row[6] is None:
            continue  # the node's row alone: nothing is placed on it
        placement = dict(zip(_PLACEMENT_COLUMNS, row[_PLACEMENT_AT], strict=True))
        if isinstance(placement["devices"], str):  # SQLite hands JSON back as text
            placement["devices"] = json.loads(placement["devices"])
        if placement.pop("fresh"):
            environment = placement["environment"]
            if isinstance(environment, str):  # SQLite's text, and PostgreSQL's jsonb as Django reads it
                environment = json.loads(environment)
            placement["environment"] = environment or {}
            placement["image"] = placement["image"] or ""
        else:  # what only a start needs is left out, as a steady beat never reads it
            del placement["rank"], placement["environment"], placement["image"]
        placement["requeue"] = bool(placement["requeue"])
        placement["start_asked_at"] = _moment(placement["start_asked_at"])
        placements[placement["id"]] = placement
    processes = {}
    forgotten = False
    for row in rows:
        if row[0] != 1:
            continue
        process = AgentProcess.from_db(None, list(_PROCESS_FIELDS), row[_PROCESS_AT])
        if process.replica not in placements and process.replica not in reported:
            # an exited replica's row, forgotten at the next exit (heartbeat)
            forgotten = forgotten or process.state == AgentProcessState.EXITED
            continue
        # Raw rows skip the ORM's converters: SQLite gives timestamps as text or naive values.
        started = _moment(process.started_at)
        assert started is not None  # a non-null column
        process.started_at = started
        process.exited_at = _moment(process.exited_at)
        processes[process.replica] = process
    return placements, processes, forgotten


# What a beat that ends jobs reads of them, in one statement without the ORM's compile step (it
# cost more than running it, at every exit beat of a drain): every replica of those jobs on every
# node with the state its agent reported (NULL: no report), then the jobs with their logs' lines.
_ENDING_SQL = """
SELECT 0, p.id, p.job_id, p.node_id, r.state, NULL, NULL, NULL, NULL, NULL
FROM scheduling_replicaplacementrecord p
LEFT JOIN scheduling_agentprocess r ON r.node_id = p.node_id AND r.replica = p.id
WHERE p.job_id IN ({marks})
UNION ALL
SELECT 1, j.id, NULL, NULL, NULL, j.state, j.revision, j.reason_code, j.requeue, l.lines
FROM scheduling_job j
LEFT JOIN scheduling_joblog l ON l.job_id = j.id
WHERE j.id IN ({marks})
"""


@dataclass(frozen=True, slots=True)
class SeenJob:
    """A job as a beat that may end it reads it (no lock: each write checks state and revision),
    with its log's last lines."""

    pk: int
    state: str
    revision: int
    reason_code: str
    requeue: bool
    tail: list[str]


def read_for_endings(
    job_ids: Collection[int], tail_lines: int
) -> tuple[dict[int, list[tuple[int, int]]], dict[tuple[int, int], str | None], dict[int, SeenJob]]:
    """Each job's replicas as (replica, node); the state each (node, replica) was reported in
    (None: never); the jobs. One query."""
    ordered = sorted(job_ids)
    marks = ", ".join(["%s"] * len(ordered))
    replicas: dict[int, list[tuple[int, int]]] = defaultdict(list)
    reports: dict[tuple[int, int], str | None] = {}
    jobs: dict[int, SeenJob] = {}
    with connection.cursor() as cursor:
        cursor.execute(_ENDING_SQL.format(marks=marks), [*ordered, *ordered])
        for kind, pk, job_id, node_id, reported, state, revision, reason_code, requeue, lines in cursor.fetchall():
            if kind == 0:
                replicas[job_id].append((pk, node_id))
                reports[(node_id, pk)] = reported
                continue
            if isinstance(lines, str):  # JSON as text: SQLite's, and PostgreSQL's jsonb as Django loads it
                lines = json.loads(lines)
            tail = [str(line) for line in (lines or [])[-tail_lines:]]
            jobs[pk] = SeenJob(pk, state, revision, reason_code, bool(requeue), tail)
    return replicas, reports, jobs


def has_free_device(node: Node, placements: Mapping[int, Mapping[str, Any]], ended: Collection[int]) -> bool:
    """Whether a device of this ready agent node holds no placement but those of `ended` jobs (a
    fraction counts as held): what a cycle could place there."""
    if node.executor != NodeExecutor.AGENT or node.state != NodeState.READY:
        return False
    held = {device for row in placements.values() if row["job_id"] not in ended for device in row["devices"] or ()}
    return len(held) < node.gpus


def replica_ranks(job_ids: Iterable[int]) -> dict[int, int]:
    """Each replica of these jobs with its rank (its position among its job's placements, from 0),
    by replica id, whichever executor runs it: one query."""
    ranks: dict[int, int] = {}
    position: dict[int, int] = defaultdict(int)
    for replica, job_id in (
        ReplicaPlacementRecord.objects.filter(job_id__in=set(job_ids)).order_by("id").values_list("id", "job_id")
    ):
        ranks[replica] = position[job_id]
        position[job_id] += 1
    return ranks


def _start_of(row: dict[str, Any]) -> DesiredStart:
    command = (
        row["command"] or f"exec sleep {int(row['duration'] if row['duration'] is not None else _FOREVER_SECONDS)}"
    )
    return DesiredStart(
        replica=row["id"],
        job=row["job_id"],
        rank=row["rank"],
        command=command,
        environment=replica_environment(
            row.get("environment", {}),
            job_id=row["job_id"],
            job_name=row["name"],
            quota=row["quota"],
            rank=row["rank"],
            replicas=row["replicas"],
        ),
        gpus=[int(device) for device in row["devices"]],
        fraction=float(row["fraction"]),
        image=row.get("image", ""),
    )


def replica_environment(
    own: Mapping[str, str], *, job_id: int, job_name: str, quota: str, rank: int, replicas: int
) -> dict[str, str]:
    """What a replica's process runs with, whichever executor starts it (agent or Slurm): the
    job's own variables first, the console's on top (scheduling.job_environment refuses those
    names at submit; an older row is overridden, never obeyed)."""
    return {
        **{str(name): str(value) for name, value in own.items()},
        "GQC_JOB_ID": str(job_id),
        "GQC_JOB_NAME": job_name,
        "GQC_QUOTA": quota,
        "GQC_REPLICA_RANK": str(rank),
        "GQC_REPLICAS": str(replicas),
    }
