"""The `agent` executor: jobs on nodes whose `executor` is "agent" run as processes on the host.

Nothing is pushed to the hosts. A committed admission is already the desired state (its
placements); the node's agent reads it at its next beat, starts the replicas and reports them
(`scheduling.agent_services.heartbeat`). An eviction likewise: the releasing job's replicas are
answered as stops with the job's grace, and its devices are freed when the agent reports the
processes gone, not when a clock says so. What is left for `tick` is the silence of lost nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Coalesce

from quotas.models import Node, NodeExecutor, NodeState
from quotas.node_agents import heartbeat_record_seconds, mark_lost
from scheduling import lifecycle, triggers
from scheduling.agent_selectors import agents_to_watch
from scheduling.models import Job, JobState, ReplicaPlacementRecord


class AgentExecutor:
    name = "agent"
    # All that on_admitted_many reads of a job (`PerNodeExecutor.on_committed`): a cycle of the
    # drain through agents admits about 80 jobs, and their whole rows (some 40 columns each, made
    # into models) were most of what the worker did after a commit.
    job_fields = ("id",)

    def on_admitted(self, job: Job) -> None:
        self.on_admitted_many([job])

    def on_admitted_many(self, jobs: Sequence[Job]) -> None:
        # The `started` event is written when the agent reports the process, not before. A beat
        # held for this cycle (console.agent_holds) is answered now: its node's mark goes.
        if jobs and triggers.trigger_mode() == "celery":
            triggers.placed_on(
                set(
                    ReplicaPlacementRecord.objects.filter(job_id__in=[job.pk for job in jobs]).values_list(
                        "node_id", flat=True
                    )
                )
            )

    def on_evicted(self, job: Job) -> None:
        # The next beat of each of its nodes answers a stop (SIGTERM, SIGKILL after the grace).
        return None

    def tick(self, now: datetime) -> int:
        return check_lost_nodes(now)


def check_lost_nodes(now: datetime) -> int:
    """AGENT.md's lost node: silent for NODE_LOST_SECONDS → not ready (no new placements); after
    NODE_LOST_GRACE_SECONDS more, its jobs are requeued (or failed, when they asked not to be)
    with an event, and their devices freed. Returns how many nodes and jobs changed."""
    if not agents_to_watch():
        return 0  # A cluster without agents (simulated, Slurm) ticks every cycle: one cheap read.
    lost_after = float(settings.NODE_LOST_SECONDS)
    grace = float(settings.NODE_LOST_GRACE_SECONDS)
    # The stored beat may lag the last real one by up to heartbeat_record_seconds (beats do not
    # all rewrite it): waiting that much longer means a node is never lost before its time.
    recorded_lag = heartbeat_record_seconds()
    silent_since = now - timedelta(seconds=lost_after + recorded_lag)
    silent = list(
        Node.objects.filter(executor=NodeExecutor.AGENT, state=NodeState.READY)
        .annotate(seen=Coalesce("last_heartbeat", "created_at"))
        .filter(seen__lt=silent_since)
        .values_list("pk", flat=True)
    )
    changed = 0
    if silent:
        changed += len(mark_lost(node_ids=silent, now=now, silent_seconds=lost_after, silent_since=silent_since))
        if changed:
            triggers.request_cycle("node-lost")
    abandoned = Q(
        node__agent__lost_at__lt=now - timedelta(seconds=grace),
        node__state=NodeState.NOT_READY,
        job__state__in=(JobState.RUNNING, JobState.RELEASING),
    )
    holding = list(
        ReplicaPlacementRecord.objects.filter(abandoned)
        .values_list("job_id", "job__state", "job__revision", "job__requeue", "node__name", "job__reason_code")
        .order_by("job_id")
        .distinct()
    )
    if not holding:
        return changed
    with transaction.atomic():
        released = 0
        for job_id, state, revision, requeue, node_name, reason in _first_per_job(holding):
            if state == JobState.RELEASING and reason == lifecycle.CANCELLING:
                # Cancelled while its node went silent: cancelled, not requeued.
                released += lifecycle.finish_cancel(
                    job_id=job_id,
                    seen_revision=revision,
                    now=now,
                    why=f"devices freed with node {node_name} lost: no heartbeat for {lost_after + grace:g} s",
                )
                continue
            if lifecycle.release_job(
                job_id=job_id,
                seen_state=state,
                seen_revision=revision,
                requeue=requeue,
                now=now,
                message=f"lost with node {node_name}: no heartbeat for {lost_after + grace:g} s",
            ):
                released += 1
        if released:
            triggers.request_cycle_on_commit("node-lost")
    return changed + released


def _first_per_job(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    seen: set[int] = set()
    first = []
    for row in rows:
        if row[0] not in seen:
            seen.add(row[0])
            first.append(row)
    return first


__all__ = ["AgentExecutor", "check_lost_nodes"]
