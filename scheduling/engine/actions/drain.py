"""Drain: evict every running job with a replica on a draining node (docs/scheduling.md, "Node
states"). SCHEDULING.md is silent on drains; this follows `kubectl drain`.

Runs first, before allocate, so that nothing is placed for or against a job that is leaving.
"""

from __future__ import annotations

from scheduling.engine.session import Session
from scheduling.engine.types import DRAIN, RELEASING, RUNNING, Evict


def drain(session: Session) -> None:
    """Evict every running job with a replica on a draining node.

    A drain is an admin's decision about the node, not a contest between jobs: priority,
    preemptibility and min_runtime_seconds do not protect a job from it (as `kubectl
    drain`), but the grace period does. The victim is treated as releasing for the rest of
    this cycle whatever its grace: its GPUs are on a node that takes no new placement, so
    freeing them in the simulation would give nobody anything, and the job itself goes back
    to the queue only once the runtime has let go of it (placed again by the next cycle).
    """
    cluster = session.cluster
    draining = {index for index, node in enumerate(session.snapshot.nodes) if node.draining}
    if not draining:
        return
    for job, spec in enumerate(session.jobs):
        if session.state[job] != RUNNING:
            continue
        on = sorted({cluster.names[node] for node, _devices, _milli in session.placements[job] if node in draining})
        if not on:
            continue
        where = ", ".join(on)
        grace = f" after its grace period of {spec.grace_seconds:g} s" if spec.grace_seconds > 0 else ""
        reason = f"node {where} is draining: the job is evicted{grace} and goes back to the queue to run elsewhere"
        session.decide(Evict(spec.id, DRAIN, None, reason))
        session.state[job] = RELEASING
        session.held[job] = session.placements[job]
        session.placements[job] = ()
        session.touched[job] = True
