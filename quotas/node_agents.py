"""Node agents' side of the inventory (AGENT.md): node tokens, registration, cordoning on a mismatch.

A node token authenticates one node's agent and nothing else. It is random, shown once, and
stored as its SHA-256 only: a leaked database does not leak working tokens. Tokens are long random
strings, so one fast hash is enough (no password stretching needed), and the lookup stays one
indexed query per request, which a thousand agents beating every few seconds need.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from quotas import audit, hooks
from quotas.models import AuditRecord, GpuDevice, Installation, Node, NodeAgent, NodeState
from quotas.services import Actor, _require_platform_admin

# Every node token starts with this, so a node token pasted where a user token goes is recognised
# (and refused) at a glance, in logs and by the user-token authentication.
NODE_TOKEN_PREFIX = "gqn_"


def hash_node_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_node_token(*, actor: Actor, node: Node) -> str:
    """A new token for the node's agent; the old one, if any, stops working in the same commit."""
    _require_platform_admin(actor, "issue node tokens")
    token = NODE_TOKEN_PREFIX + secrets.token_urlsafe(32)
    now = timezone.now()
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        existing = NodeAgent.objects.filter(node=locked).first()
        fields = {"token_hash": hash_node_token(token), "token_prefix": token[:12], "token_issued_at": now}
        if existing is None:
            # A node the lost-node check took out before it had an agent row (made, then its
            # token issued more than NODE_LOST_SECONDS later: 64 agents set up one by one on a
            # busy machine) had nowhere to keep `lost_at`, and its agent's beats never made it
            # ready again. Its first row keeps it, so they do.
            lost_at = now if _taken_out_by_the_lost_check(locked) else None
            NodeAgent.objects.create(node=locked, lost_at=lost_at, **fields)
        else:
            NodeAgent.objects.filter(pk=existing.pk).update(**fields)
        audit.record(
            actor=actor,
            action="node.token",
            object_type="node",
            object_id=locked.pk,
            object_repr=locked.name,
            before={"token": existing.token_prefix + "…"} if existing else None,
            after={"token": token[:12] + "…"},
        )
    return token


def _taken_out_by_the_lost_check(node: Node) -> bool:
    """Whether the node is not ready because the lost-node check made it so (its last change of
    readiness is that check's `node.down`, by no one), not because an admin did."""
    if node.state != NodeState.NOT_READY:
        return False
    last = (
        AuditRecord.objects.filter(object_type="node", object_id=str(node.pk), action__in=("node.down", "node.up"))
        .order_by("-id")
        .values_list("action", "actor_id", "after")
        .first()
    )
    if last is None:
        return False
    action, actor_id, after = last
    return action == "node.down" and actor_id is None and str((after or {}).get("why", "")).startswith("no heartbeat")


# The 401's sentence, for a token never issued and for one rotated away alike.
REVOKED = "Unknown or revoked node token; a platform admin issues a new one."


class NodeTokenRevoked(Exception):
    """The token this process remembered was rotated since: the request is refused (401)."""


# token hash -> its agent (with its node), as this process last read it. A thousand agents beating
# every few seconds would otherwise build the same two model instances from the same row on every
# beat. Nothing is trusted from it for long: every endpoint that accepts a remembered agent
# checks, in its first statement, that the agent still has this hash (`verify_token` or the
# heartbeat's own read), so a token rotated from any process is refused at its next use, and
# forgotten here then.
_REMEMBERED: dict[str, NodeAgent] = {}
_REMEMBERED_MAX = 10_000
_REMEMBERED_LOCK = threading.Lock()


def agent_for_token(token: str) -> NodeAgent | None:
    """The agent a node token belongs to, with its node: remembered, else one indexed query.

    The caller must verify the token in its own first statement (`verify_token`), since a
    remembered agent may have been rotated away by another process."""
    if not token.startswith(NODE_TOKEN_PREFIX):
        return None
    token_hash = hash_node_token(token)
    remembered = _REMEMBERED.get(token_hash)
    if remembered is not None:
        return remembered
    agent = NodeAgent.objects.select_related("node").filter(token_hash=token_hash).first()
    if agent is not None:
        with _REMEMBERED_LOCK:
            if len(_REMEMBERED) >= _REMEMBERED_MAX:
                _REMEMBERED.clear()  # rotations leave dead entries; a rare full reload is cheaper than LRU bookkeeping
            _REMEMBERED[token_hash] = agent
    return agent


def forget_token(token_hash: str) -> None:
    with _REMEMBERED_LOCK:
        _REMEMBERED.pop(token_hash, None)


def verify_token(agent: NodeAgent) -> None:
    """Raise NodeTokenRevoked when `agent`'s token is no longer its node's (rotated meanwhile);
    else refresh what another process may have changed on it (lost_at)."""
    current = NodeAgent.objects.filter(pk=agent.pk, token_hash=agent.token_hash).values_list("lost_at").first()
    if current is None:
        forget_token(agent.token_hash)
        raise NodeTokenRevoked(agent.token_hash)
    agent.lost_at = current[0]


def installation_identity() -> str:
    """This console's identity (a UUID), made at its first use and kept in the database.

    What an agent's state directory remembers is keyed by it and the node's id (the registration
    answer carries both); an executor that adopts its own work after a restart (Slurm's jobs)
    can mark that work with it in the same way, so that only the console that started it adopts it."""
    existing = Installation.objects.values_list("identity", flat=True).first()
    if existing is not None:
        return str(existing)
    try:
        with transaction.atomic():
            Installation.objects.create(pk=1, identity=uuid.uuid4())
    except IntegrityError:
        pass  # another process made it first: theirs is the one
    return str(Installation.objects.values_list("identity", flat=True).get(pk=1))


@dataclass(frozen=True, slots=True)
class ReportedDevice:
    """One GPU as the agent's NVML (or its fake GPUs) sees it."""

    index: int
    uuid: str
    model: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Registration:
    node: Node
    mismatch: list[str]
    cordoned: bool


def _mismatch(known: dict[int, str], reported: Sequence[ReportedDevice]) -> list[str]:
    """What differs between the node's devices and the host's, one sentence each."""
    seen = {device.index: device.model for device in reported}
    problems = [
        f"GPU {index} is in the inventory but the host does not have it" for index in sorted(set(known) - set(seen))
    ]
    problems += [f"GPU {index} is on the host but not in the inventory" for index in sorted(set(seen) - set(known))]
    for index in sorted(set(known) & set(seen)):
        if known[index] and seen[index] and known[index] != seen[index]:
            problems.append(f"GPU {index} is a {seen[index]} on the host, a {known[index]} in the inventory")
    return problems


def register_agent(
    *, agent: NodeAgent, devices: Sequence[ReportedDevice], version: str = "", now: datetime | None = None
) -> Registration:
    """Reconcile the host's GPUs with the node's devices. A mismatch is audited and cordons the node:
    the scheduler must not place on devices that are not there, and an admin decides what is right."""
    now = now or timezone.now()
    with transaction.atomic():
        verify_token(agent)
        node = Node.objects.select_for_update().get(pk=agent.node_id)
        agent.node = node  # a remembered agent's node may be stale; the locked row is the truth
        known = dict(GpuDevice.objects.filter(node=node).values_list("index", "model"))
        problems = _mismatch(known, devices)
        reported: list[dict[str, Any]] = [
            {"index": d.index, "uuid": d.uuid, "model": d.model, "memory_mib": d.memory_mib} for d in devices
        ]
        NodeAgent.objects.filter(pk=agent.pk).update(registered_at=now, registered_devices=reported, version=version)
        agent.registered_at, agent.registered_devices, agent.version = now, reported, version
        cordoned = False
        if problems:
            audit.record(
                actor=None,
                action="node.agent_mismatch",
                object_type="node",
                object_id=node.pk,
                object_repr=node.name,
                before={"devices": [{"index": i, "model": m} for i, m in sorted(known.items())]},
                after={"devices": reported, "problems": problems},
            )
            cordoned = cordon_node(node=node, why="registration mismatch")
        else:
            mark_seen(agent=agent, node=node, now=now)
    return Registration(node=node, mismatch=problems, cordoned=cordoned)


def cordon_node(*, node: Node, why: str) -> bool:
    """The node keeps its jobs and takes no new ones, through the inventory's own cordon (audited
    as `node.cordon`; `why` is in the caller's audit record). False when it was cordoned or
    draining already: a draining node stays draining."""
    from quotas.services import cordon_node as cordon

    if node.state in (NodeState.CORDONED, NodeState.DRAINING):
        return False
    cordoned = cordon(actor=None, node=node)
    node.state = cordoned.state
    return True


def heartbeat_record_seconds() -> float:
    """How old the node's stored last beat may grow before a beat rewrites it.

    Writing the node's row on every beat of a thousand agents was most of their writes, and the
    row is what every page and cycle reads. The lost-node check allows for this lag (it waits
    NODE_LOST_SECONDS plus this), so a node is never taken out before NODE_LOST_SECONDS of real
    silence."""
    return float(settings.NODE_LOST_SECONDS) / 4


def mark_seen(*, agent: NodeAgent, node: Node, now: datetime) -> bool:
    """The agent is alive: record the beat (when the stored one is older than
    `heartbeat_record_seconds`); a node the lost-node check took out is ready again.

    Returns True when the node came back (the caller asks for a cycle)."""
    recent = node.last_heartbeat is not None and now - node.last_heartbeat < timedelta(
        seconds=heartbeat_record_seconds()
    )
    if agent.lost_at is None and recent:
        return False
    Node.objects.filter(pk=node.pk).update(last_heartbeat=now)
    node.last_heartbeat = now
    if agent.lost_at is None:
        return False
    back = Node.objects.filter(pk=node.pk, state=NodeState.NOT_READY).update(state=NodeState.READY)
    NodeAgent.objects.filter(pk=agent.pk).update(lost_at=None)
    agent.lost_at = None
    if back:
        audit.record(
            actor=None,
            action="node.up",
            object_type="node",
            object_id=node.pk,
            object_repr=node.name,
            before={"state": NodeState.NOT_READY},
            after={"state": NodeState.READY, "why": "its agent beats again"},
        )
    return bool(back)


def mark_lost(
    *, node_ids: Sequence[int], now: datetime, silent_seconds: float, silent_since: datetime | None = None
) -> list[Node]:
    """Ready agent nodes silent for `silent_seconds` go not ready: no new placements on them.

    With `silent_since`, a node whose last beat (or, never beaten, its creation) is not older than
    that, read under the row lock, is left ready: its agent registered or beat after the caller
    read it as silent (agents registering one by one while the lost-node check runs)."""
    with transaction.atomic():
        candidates = Node.objects.select_for_update().filter(pk__in=list(node_ids), state=NodeState.READY)
        lost = [
            node
            for node in candidates
            if silent_since is None or (node.last_heartbeat or node.created_at) < silent_since
        ]
        if not lost:
            return []
        Node.objects.filter(pk__in=[n.pk for n in lost]).update(state=NodeState.NOT_READY)
        hooks.record_change("node.lost")
        NodeAgent.objects.filter(node_id__in=[n.pk for n in lost]).update(lost_at=now)
        audit.record_all(
            [
                audit.build(
                    actor=None,
                    action="node.down",
                    object_type="node",
                    object_id=node.pk,
                    object_repr=node.name,
                    before={"state": NodeState.READY},
                    after={"state": NodeState.NOT_READY, "why": f"no heartbeat for {silent_seconds:g} s"},
                )
                for node in lost
            ]
        )
    return lost


def prepare_local_agent(*, name: str, gpus: int, gpu_model: str = "") -> str:
    """The embedded default's local agent (CONSOLE_LOCAL_AGENT): its node, an agent node with
    `gpus` devices of `gpu_model`, created when missing and otherwise brought to that (executor,
    size, model), since the agent about to register will report exactly those; and a fresh token
    for the agent the launcher starts. Returns the token; the launcher keeps it in a 0600 file.
    A size that the quotas' guarantees or the jobs on its GPUs forbid is update_node's ValidationError."""
    from quotas.services import create_node, update_node

    with transaction.atomic():
        node = Node.objects.filter(name=name).first()
        if node is None:
            created = create_node(actor=None, name=name, gpus=gpus, executor="agent", gpu_model=gpu_model)
            assert isinstance(created, Node)
            node = created
        elif (node.executor, node.gpus, node.gpu_model) != ("agent", gpus, gpu_model):
            node = update_node(actor=None, node=node, executor="agent", gpus=gpus, gpu_model=gpu_model)
        return issue_node_token(actor=None, node=node)
