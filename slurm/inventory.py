"""Slurm's nodes as console nodes (executor `slurm`), kept in step at every sync.

A Slurm node becomes a console node of the same name with its GPUs (`Gres=gpu[:type]:N`, the type
as the model), CPUs and memory, in the pool named after its partition (its first, when it is in
several; made when missing; the partition is also in its labels, `slurm.partition`). When Slurm
moves the node to another partition, the console moves it to that partition's pool, once no job
runs there (node.move's rule); a pool an admin gave the node stands until then. Slurm's availability follows
into the node's state when it changes: up → ready, DRAIN → draining (the console evicts its jobs
there), DOWN and the like → not ready, with Slurm's reason in the labels (`slurm.reason`). An
admin's cordon in the console stands until Slurm's availability changes again. The GPUs that
Slurm jobs outside the console hold are written there too (`slurm.gpus_outside`), and are not
free to the console (scheduling.snapshot).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from quotas import audit
from quotas.models import Node, NodeExecutor, NodeState, ResourcePool
from quotas.services.nodes import NewNode, create_nodes, node_snapshot, update_node
from quotas.services.pools import create_pool
from scheduling import triggers
from scheduling.node_views import SLURM_STATE_LABEL
from scheduling.snapshot_rows import GPUS_OUTSIDE_LABEL
from slurm.client import SlurmJob, SlurmNode

logger = logging.getLogger(__name__)

PARTITION = "slurm.partition"
AVAILABILITY = "slurm.availability"
REASON = "slurm.reason"
# Slurm's availability → the console's node state.
_STATE_OF = {"up": NodeState.READY, "drain": NodeState.DRAINING}
# Live job states in which a job holds no devices yet.
_WAITING_STATES = frozenset({"PENDING", "REQUEUED"})
# Warnings already logged (a node name clash, an unreachable Slurm): each once until it changes.
_warned: dict[str, str] = {}


def warn_once(key: str, message: str) -> None:
    """Log `message` as a warning, unless it is what was last said under `key`."""
    if _warned.get(key) != message:
        _warned[key] = message
        logger.warning("%s", message)


def forget_warnings() -> None:
    """Warn again about what was already said (tests; a console pointed at another cluster)."""
    _warned.clear()


def _labels(node: SlurmNode, kept: dict[str, Any]) -> dict[str, Any]:
    labels = {key: value for key, value in kept.items() if not key.startswith("slurm.")}
    labels[PARTITION] = node.partition
    labels[AVAILABILITY] = node.availability
    labels[SLURM_STATE_LABEL] = node.state
    if node.reason:
        labels[REASON] = node.reason[:200]
    return labels


def pool_of_partition(partition: str) -> ResourcePool:
    """The pool named after a Slurm partition, made when missing (a node in no partition: the
    default pool). A partition name that the pool rules refuse (too long, say) is said once and
    its nodes go to the default pool."""
    name = partition or ResourcePool.DEFAULT_NAME
    pool = ResourcePool.objects.filter(name=name).first()
    if pool is not None:
        return pool
    try:
        return create_pool(actor=None, name=name, description=f"Slurm partition {name}")
    except ValidationError as error:
        # Another process's sync made it first (the name is then taken), or the name is refused.
        pool = ResourcePool.objects.filter(name=name).first()
        if pool is not None:
            return pool
        warn_once(f"pool:{name}", f"Slurm partition {name}: no pool of its name ({'; '.join(error.messages)})")
        return ResourcePool.objects.get_or_create(name=ResourcePool.DEFAULT_NAME)[0]


def sync_nodes(nodes: Sequence[SlurmNode], now: datetime) -> int:
    """Create, change and mark the console's Slurm nodes as Slurm reports them; returns how many
    changed. (The GPUs that jobs outside the console hold: mark_held_outside, once squeue is read.)"""
    _warned.pop("unreachable", None)
    existing = {node.name: node for node in Node.objects.filter(name__in=[n.name for n in nodes])}
    # New nodes by partition: create_nodes makes one pool's nodes at a time.
    new: dict[str, list[NewNode]] = defaultdict(list)
    # Slurm's own state of each node whose state changed (IDLE, MIXED…), written together.
    slurm_states: dict[int, str] = {}
    changed = 0
    for slurm_node in nodes:
        node = existing.get(slurm_node.name)
        if node is None:
            new[slurm_node.partition].append(
                NewNode(
                    name=slurm_node.name,
                    gpus=slurm_node.gpus,
                    cpu=float(slurm_node.cpus),
                    memory_gib=round(slurm_node.memory_mib / 1024, 3),
                    gpu_model=slurm_node.gpu_model,
                    labels=_labels(slurm_node, {}),
                    state=_STATE_OF.get(slurm_node.availability, NodeState.NOT_READY),
                    executor=NodeExecutor.SLURM,
                )
            )
            continue
        if node.executor != NodeExecutor.SLURM:
            warn_once(
                f"clash:{node.name}",
                f"Slurm node {node.name} is not managed: the console has a {node.executor} node of that name",
            )
            continue
        changed += _follow(node, slurm_node, now)
        if node.labels.get(SLURM_STATE_LABEL) != slurm_node.state:
            slurm_states[node.pk] = slurm_node.state
    _set_slurm_states(slurm_states)
    for partition, specs in new.items():
        try:
            create_nodes(actor=None, nodes=specs, pool=pool_of_partition(partition))
            changed += len(specs)
        except ValidationError as error:
            warn_once(f"create:{partition}", f"Slurm nodes not added: {'; '.join(error.messages)}")
    seen = [n.name for n in nodes]
    gone = Node.objects.filter(executor=NodeExecutor.SLURM).exclude(name__in=seen)
    for node in gone:
        if node.labels.get(AVAILABILITY) != "gone":
            changed += _set_availability(node, "gone", "Slurm no longer lists this node", now)
    Node.objects.filter(executor=NodeExecutor.SLURM, name__in=seen).update(last_heartbeat=now)
    return changed


def _follow(node: Node, slurm_node: SlurmNode, now: datetime) -> int:
    """One known node: its resources through update_node (the shrink guard and the quotas' rules),
    its availability and reason by a direct write (see _set_availability)."""
    changes: dict[str, Any] = {}
    wanted: dict[str, Any] = {
        "gpus": slurm_node.gpus,
        "cpu": float(slurm_node.cpus),
        "memory_gib": round(slurm_node.memory_mib / 1024, 3),
        "gpu_model": slurm_node.gpu_model,
    }
    for field, value in wanted.items():
        if getattr(node, field) != value:
            changes[field] = value
    changed = 0
    if changes:
        try:
            update_node(actor=None, node=node, **changes)
            node.refresh_from_db()
            changed += 1
        except ValidationError as error:
            warn_once(f"resize:{node.name}", f"Slurm node {node.name} not updated: {'; '.join(error.messages)}")
    if node.labels.get(PARTITION) != slurm_node.partition:
        changed += _move_to_partition(node, slurm_node.partition)
    if (
        node.labels.get(AVAILABILITY) != slurm_node.availability
        or node.labels.get(REASON, "") != (slurm_node.reason[:200])
    ):
        changed += _set_availability(node, slurm_node.availability, slurm_node.reason, now)
    return changed


def _set_slurm_states(states: dict[int, str]) -> None:
    """Slurm's own state (IDLE, MIXED, ALLOCATED, IDLE+DRAIN…) in the labels, for the Nodes page.
    Not audited and no cycle: it changes with every job Slurm starts or ends there, and what the
    console acts on (up, drain, down) is the availability. One transaction and one write for every
    node whose state changed: a node at a time, a drain on many nodes wrote one per node per sync."""
    if not states:
        return
    with transaction.atomic():
        nodes = list(Node.objects.select_for_update().filter(pk__in=list(states)).only("pk", "labels"))
        for node in nodes:
            node.labels = {**node.labels, SLURM_STATE_LABEL: states[node.pk]}
        Node.objects.bulk_update(nodes, ["labels"])


def _move_to_partition(node: Node, partition: str) -> int:
    """Slurm put the node in another partition: into that partition's pool, with the label. The
    label changes with the move, so that a move refused (a job runs there, the old pool's
    guarantees need its GPUs) is said once and tried again at each sync."""
    pool = pool_of_partition(partition)
    changes: dict[str, Any] = {"labels": {**node.labels, PARTITION: partition}}
    if pool.pk != node.pool_id:
        changes["pool"] = pool
    try:
        update_node(actor=None, node=node, **changes)
    except ValidationError as error:
        warn_once(
            f"move:{node.name}",
            f"Slurm node {node.name} is in partition {partition} but stays in its pool for now: "
            f"{'; '.join(error.messages)}",
        )
        return 0
    node.refresh_from_db()
    _warned.pop(f"move:{node.name}", None)
    return 1


def _set_availability(node: Node, availability: str, reason: str, now: datetime) -> int:
    """Record Slurm's availability and reason; the node's state follows when the availability
    changed. Written directly, not through update_node: a node going down there releases its jobs
    at once, while Slurm may still run them (their Slurm jobs end them, or the console's stops)."""
    with transaction.atomic():
        current = Node.objects.select_for_update().get(pk=node.pk)
        before = node_snapshot(current)
        availability_changed = current.labels.get(AVAILABILITY) != availability
        labels = {key: value for key, value in current.labels.items() if key not in (AVAILABILITY, REASON)}
        labels[AVAILABILITY] = availability
        if reason:
            labels[REASON] = reason[:200]
        current.labels = labels
        if availability_changed:
            current.state = _STATE_OF.get(availability, NodeState.NOT_READY)
        Node.objects.filter(pk=current.pk).update(labels=current.labels, state=current.state)
        if availability_changed:
            audit.record(
                actor=None,
                action="node.slurm_state",
                object_type="node",
                object_id=current.pk,
                object_repr=current.name,
                before=before,
                after=node_snapshot(current),
            )
            triggers.request_cycle_on_commit(f"slurm-node-{availability}")
    node.labels, node.state = current.labels, current.state
    return 1


def holds_devices(job: SlurmJob) -> bool:
    """Whether a job holds its node's devices now (running, completing, suspended…), not waiting."""
    return job.live and job.state not in _WAITING_STATES


def held_outside(jobs: Iterable[SlurmJob]) -> dict[str, dict[int, int]]:
    """Each node's devices that running Slurm jobs outside the console (`jobs`) hold, with the job
    that holds each: a job over several nodes counts its share on each (SlurmJob.held)."""
    held: dict[str, dict[int, int]] = defaultdict(dict)
    for job in jobs:
        if holds_devices(job):
            for node, indices in job.held:
                held[node].update(dict.fromkeys(indices, job.slurm_id))
    return held


def mark_held_outside(jobs: Iterable[SlurmJob]) -> int:
    """Write on each Slurm node the devices that Slurm jobs outside the console (`jobs`: squeue's
    jobs less the console's own) hold there, as the label `slurm.gpus_outside` ("0,1"; absent
    when none), which the snapshot takes off the console's free GPUs. Returns how many nodes
    changed; a change asks for a cycle (GPUs freed outside may start a pending job).

    Each node counts the indices Slurm bound there (squeue's gres_detail, per node: a job over
    several nodes holds a share of each)."""
    held = held_outside(jobs)
    changed = 0
    # The name too: a deferred field read per node was one more query per node and call.
    for node in Node.objects.filter(executor=NodeExecutor.SLURM).only("pk", "name", "labels"):
        wanted = ",".join(map(str, sorted(held.get(node.name, ()))))
        if node.labels.get(GPUS_OUTSIDE_LABEL, "") == wanted:
            continue
        with transaction.atomic():
            current = Node.objects.select_for_update().only("pk", "labels").get(pk=node.pk)
            labels = {key: value for key, value in current.labels.items() if key != GPUS_OUTSIDE_LABEL}
            if wanted:
                labels[GPUS_OUTSIDE_LABEL] = wanted
            Node.objects.filter(pk=node.pk).update(labels=labels)
            triggers.request_cycle_on_commit("slurm-gpus-outside")
        changed += 1
    return changed


def mark_unreachable(why: str, now: datetime) -> int:
    """Slurm did not answer: one warning (again only when the sentence changes), and after
    NODE_LOST_SECONDS without an answer its nodes are not ready, the sentence as their reason."""
    warn_once("unreachable", f"Slurm did not answer: {why}")
    silent_since = now - timedelta(seconds=float(settings.NODE_LOST_SECONDS))
    changed = 0
    for node in Node.objects.filter(executor=NodeExecutor.SLURM):
        if node.labels.get(AVAILABILITY) == "unreachable":
            continue
        if node.last_heartbeat is not None and node.last_heartbeat > silent_since:
            continue
        changed += _set_availability(node, "unreachable", f"Slurm did not answer: {why}", now)
    return changed


__all__ = [
    "AVAILABILITY",
    "PARTITION",
    "REASON",
    "forget_warnings",
    "held_outside",
    "holds_devices",
    "mark_held_outside",
    "mark_unreachable",
    "pool_of_partition",
    "sync_nodes",
    "warn_once",
]
