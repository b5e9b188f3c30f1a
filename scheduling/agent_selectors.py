"""Reads of the agent layer: which jobs run on agent nodes, and a job's shipped log tail."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from django.db import connection

from quotas.models import Node, NodeAgent, NodeExecutor
from scheduling.models import Job, JobLog, ReplicaPlacementRecord


def jobs_on_agent_nodes(job_ids: Sequence[int]) -> set[int]:
    """Which of these jobs have a replica on an agent node: one query."""
    return set(
        ReplicaPlacementRecord.objects.filter(job_id__in=list(job_ids), node__executor=NodeExecutor.AGENT).values_list(
            "job_id", flat=True
        )
    )


@cache
def _real_nodes_sql() -> str:
    qn = connection.ops.quote_name
    return f"SELECT 1 FROM {qn(Node._meta.db_table)} WHERE {qn('executor')} <> %s LIMIT 1"


@cache
def _agents_sql() -> str:
    qn = connection.ops.quote_name
    node, agent = qn(Node._meta.db_table), qn(NodeAgent._meta.db_table)
    return (
        f"SELECT 1 FROM {node} WHERE {qn('executor')} = %s "
        f"UNION ALL SELECT 1 FROM {agent} WHERE {qn('lost_at')} IS NOT NULL LIMIT 1"
    )


def real_nodes_exist() -> bool:
    """Whether any node is run by something other than the simulation (an agent, Slurm): where
    none is, every job is the simulated executor's and `node_executors_of_jobs` need not be asked.
    A plain statement: the ORM's compiling cost more than the read (a simulated cluster of 1,000
    nodes: tens of µs), and the executor asks at every cycle."""
    with connection.cursor() as cursor:
        cursor.execute(_real_nodes_sql(), [NodeExecutor.SIMULATED.value])
        return cursor.fetchone() is not None


def agents_to_watch() -> bool:
    """Whether the lost-node check (executors.agent) has anything to look at: a node run by an
    agent, or an agent marked lost, whose node may still hold jobs to free whatever its executor
    is now. Without either, both of the check's queries find nothing."""
    with connection.cursor() as cursor:
        cursor.execute(_agents_sql(), [NodeExecutor.AGENT.value])
        return cursor.fetchone() is not None


def node_executors_of_jobs(job_ids: Sequence[int]) -> dict[int, str]:
    """The executor of the nodes each of these jobs is placed on (a job on simulated nodes only
    is left out; a job on a real node goes to that node's executor): one query."""
    return dict(
        ReplicaPlacementRecord.objects.filter(job_id__in=list(job_ids))
        .exclude(node__executor=NodeExecutor.SIMULATED)
        .values_list("job_id", "node__executor")
    )


def job_log(*, job: Job) -> tuple[list[str], bool]:
    """The job's last lines as its agents shipped them, and whether earlier ones were dropped."""
    log = JobLog.objects.filter(job=job).values_list("lines", "truncated").first()
    if log is None:
        return [], False
    lines, truncated = log
    return [str(line) for line in lines], bool(truncated)
