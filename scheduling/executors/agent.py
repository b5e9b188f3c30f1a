"""The `agent` executor: jobs on nodes whose `executor` is "agent" run as processes on the host.

Nothing is pushed to the hosts. A committed admission is already the desired state (its
placements); the node's agent reads it at its next beat, starts the replicas and reports them
(`scheduling.agent_services.heartbeat`). An eviction likewise: the releasing job's replicas are
answered as stops with the job's grace, and its devices are freed when the agent reports the
processes gone, not when a clock says so. What is left for `tick` is the silence of lost nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from scheduling.models import Job


class AgentExecutor:
    name = "agent"

    def on_admitted(self, job: Job) -> None:
        self.on_admitted_many([job])

    def on_admitted_many(self, jobs: Sequence[Job]) -> None:
        # The `started` event is written when the agent reports the process, not before.
        return None

    def on_evicted(self, job: Job) -> None:
        # The next beat of each of its nodes answers a stop (SIGTERM, SIGKILL after the grace).
        return None

    def tick(self, now: datetime) -> int:
        from scheduling.agent_services import check_lost_nodes

        return check_lost_nodes(now)


__all__ = ["AgentExecutor"]
