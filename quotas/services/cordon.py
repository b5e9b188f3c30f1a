"""Cordon, drain and uncordon: whether a node takes new jobs, and whether it keeps the ones it has."""

from __future__ import annotations

from typing import Literal, overload

from django.core.exceptions import ValidationError
from django.db import transaction

from quotas import audit, signals
from quotas.models import Node, NodeState
from quotas.services.common import Actor, _lock_pool, _on_commit_send, _require_platform_admin
from quotas.services.preview import DryRunResult, _dry_run


def _change_schedulability(*, actor: Actor, node: Node, state: str, verb: str, dry_run: bool) -> Node | DryRunResult:
    """Cordon, drain or uncordon: the node's state alone, audited as `node.<verb>`.

    A node that is not ready is refused: it is down, so it takes nothing new and its jobs have
    gone already; `up` (set_node_state) brings it back. Asking for the state the node is in
    changes nothing and writes no audit record (a second click is harmless).
    """
    _require_platform_admin(actor, f"{verb} nodes")

    def apply() -> Node:
        with transaction.atomic():
            _lock_pool(node.pool_id)
            current = Node.objects.select_for_update().get(pk=node.pk)
            if current.state == NodeState.NOT_READY:
                raise ValidationError(
                    {
                        "state": f"{current.name} is not ready (down), so it cannot be {verb}ed; "
                        "mark it up first, or leave it down: it takes no new jobs either way."
                    }
                )
            if current.state == state:
                return current
            before = current.state
            current.state = state
            current.save(update_fields=["state"])
            action = f"node.{verb}"
            audit.record(
                actor=actor,
                action=action,
                object_type="node",
                object_id=current.pk,
                object_repr=current.name,
                before={"state": before},
                after={"state": state},
            )
            # The scheduling app answers this with a cycle, which evicts what a drain asks to.
            _on_commit_send(signals.inventory_changed, Node, action=action, node_ids=[current.pk])
            return current

    if dry_run:
        return _dry_run(apply, pool_id=node.pool_id)
    return apply()


@overload
def cordon_node(*, actor: Actor, node: Node, dry_run: Literal[False] = ...) -> Node: ...
@overload
def cordon_node(*, actor: Actor, node: Node, dry_run: Literal[True]) -> DryRunResult: ...
@overload
def cordon_node(*, actor: Actor, node: Node, dry_run: bool) -> Node | DryRunResult: ...
def cordon_node(*, actor: Actor, node: Node, dry_run: bool = False) -> Node | DryRunResult:
    """No new job is placed on the node; the jobs on it run on (maintenance ahead, a flaky GPU).

    Its idle GPUs leave the capacity fair share divides; what its jobs hold still counts
    (docs/scheduling.md, "Node states"). A draining node that is cordoned stops draining.
    """
    return _change_schedulability(actor=actor, node=node, state=NodeState.CORDONED, verb="cordon", dry_run=dry_run)


@overload
def drain_node(*, actor: Actor, node: Node, dry_run: Literal[False] = ...) -> Node: ...
@overload
def drain_node(*, actor: Actor, node: Node, dry_run: Literal[True]) -> DryRunResult: ...
@overload
def drain_node(*, actor: Actor, node: Node, dry_run: bool) -> Node | DryRunResult: ...
def drain_node(*, actor: Actor, node: Node, dry_run: bool = False) -> Node | DryRunResult:
    """Cordon the node and evict every job on it, each after its grace period, to run elsewhere.

    The dry run's preview lists the jobs the next cycle evicts (rule `drain`). The node stays
    draining, and empty, until it is uncordoned.
    """
    return _change_schedulability(actor=actor, node=node, state=NodeState.DRAINING, verb="drain", dry_run=dry_run)


@overload
def uncordon_node(*, actor: Actor, node: Node, dry_run: Literal[False] = ...) -> Node: ...
@overload
def uncordon_node(*, actor: Actor, node: Node, dry_run: Literal[True]) -> DryRunResult: ...
@overload
def uncordon_node(*, actor: Actor, node: Node, dry_run: bool) -> Node | DryRunResult: ...
def uncordon_node(*, actor: Actor, node: Node, dry_run: bool = False) -> Node | DryRunResult:
    """A cordoned or draining node takes new placements again (ready)."""
    return _change_schedulability(actor=actor, node=node, state=NodeState.READY, verb="uncordon", dry_run=dry_run)
