"""At an agent's registration: whose its state directory is, and which of the processes it
holds are this console's (AGENT.md, "The state directory"); the decision is audited.
agent_services re-exports `claim_state`."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from quotas import audit
from quotas.models import NodeAgent
from quotas.node_agents import installation_identity
from scheduling.agent_beat import Claim, HeldProcess
from scheduling.models import (
    AgentProcess,
    AgentProcessState,
)

logger = logging.getLogger(__name__)


def claim_state(
    *, agent: NodeAgent, state_console: str, state_node_id: int | None, held: Sequence[HeldProcess]
) -> Claim:
    """At registration: the agent says whose its state directory was (the identity it recorded,
    blank when none) and the processes it holds; the console decides which are its own.

    Its own identity: all of them, as a restart's adoption (AGENT.md). Another console's: none, for
    that console's replica ids mean other replicas here. No identity recorded (a state directory
    older than identities) or this console's for another node: those that this node's rows show
    running with the same pid. Anything else is stopped; the decision is audited."""
    console = installation_identity()
    node = agent.node
    replicas = sorted(process.replica for process in held)
    if state_console == console and state_node_id == node.pk:
        return Claim(console=console, node_id=node.pk, adopt=replicas, stop=[])
    adopt: list[int] = []
    if held and state_console in ("", console):
        running = dict(
            AgentProcess.objects.filter(
                node_id=node.pk, replica__in=replicas, state=AgentProcessState.RUNNING
            ).values_list("replica", "pid")
        )
        adopt = sorted(process.replica for process in held if running.get(process.replica, -1) == process.pid)
    stop = sorted(set(replicas) - set(adopt))
    if held or state_console:
        audit.record(
            actor=None,
            action="node.agent_state",
            object_type="node",
            object_id=node.pk,
            object_repr=node.name,
            before={
                "console": state_console or None,
                "node_id": state_node_id,
                "processes": [{"replica": p.replica, "job": p.job, "pid": p.pid} for p in held],
            },
            after={"console": console, "node_id": node.pk, "adopted": adopt, "stopped": stop},
        )
        if stop:
            logger.warning(
                "the agent on %s holds %s processes of another console (%s): told to stop them",
                node.name,
                len(stop),
                state_console or "none recorded",
            )
    return Claim(console=console, node_id=node.pk, adopt=adopt, stop=stop)
