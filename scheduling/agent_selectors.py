"""Reads of the agent layer: which jobs run on agent nodes, and a job's shipped log tail."""

from __future__ import annotations

from collections.abc import Sequence

from quotas.models import NodeExecutor
from scheduling.models import Job, JobLog, ReplicaPlacementRecord


def jobs_on_agent_nodes(job_ids: Sequence[int]) -> set[int]:
    """Which of these jobs have a replica on an agent node: one query."""
    return set(
        ReplicaPlacementRecord.objects.filter(job_id__in=list(job_ids), node__executor=NodeExecutor.AGENT).values_list(
            "job_id", flat=True
        )
    )


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
