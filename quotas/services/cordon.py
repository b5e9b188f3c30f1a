"""Cordon, drain and uncordon: whether a node takes new jobs, and whether it keeps the ones it has."""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import ValidationError
from django.db import transaction

from quotas import audit, signals
from quotas.models import Node, NodeState
from quotas.services.common import Actor, _lock_pool, _on_commit_send, _require_platform_admin
from quotas.services.preview import DryRunResult, _dry_run


def _schedulability_change(*, actor: Actor, node: Node, state: str, verb: str) -> Callable[[], Node]:
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

    return apply


def preview_cordon_node(*, actor: Actor, node: Node) -> DryRunResult:
    """`cordon_node` in a rolled-back transaction: whether it is allowed, and what the next cycle would do."""
    return _dry_run(_cordon_change(actor=actor, node=node), pool_id=node.pool_id)


def cordon_node(*, actor: Actor, node: Node) -> Node:
    """No new job is placed on the node; the jobs on it run on (maintenance ahead, a flaky GPU).

    Its idle GPUs leave the capacity fair share divides; what its jobs hold still counts
    (docs/scheduling.md, "Node states"). A draining node that is cordoned stops draining.
    """
    return _cordon_change(actor=actor, node=node)()


def _cordon_change(*, actor: Actor, node: Node) -> Callable[[], Node]:
    return _schedulability_change(actor=actor, node=node, state=NodeState.CORDONED, verb="cordon")


def preview_drain_node(*, actor: Actor, node: Node) -> DryRunResult:
    """`drain_node` in a rolled-back transaction; the preview lists the jobs the next cycle evicts (rule `drain`)."""
    return _dry_run(_drain_change(actor=actor, node=node), pool_id=node.pool_id)


def drain_node(*, actor: Actor, node: Node) -> Node:
    """Cordon the node and evict every job on it, each after its grace period, to run elsewhere.

    The node stays draining, and empty, until it is uncordoned.
    """
    return _drain_change(actor=actor, node=node)()


def _drain_change(*, actor: Actor, node: Node) -> Callable[[], Node]:
    return _schedulability_change(actor=actor, node=node, state=NodeState.DRAINING, verb="drain")


def preview_uncordon_node(*, actor: Actor, node: Node) -> DryRunResult:
    """`uncordon_node` in a rolled-back transaction: whether it is allowed, and what the next cycle would do."""
    return _dry_run(_uncordon_change(actor=actor, node=node), pool_id=node.pool_id)


def uncordon_node(*, actor: Actor, node: Node) -> Node:
    """A cordoned or draining node takes new placements again (ready)."""
    return _uncordon_change(actor=actor, node=node)()


def _uncordon_change(*, actor: Actor, node: Node) -> Callable[[], Node]:
    return _schedulability_change(actor=actor, node=node, state=NodeState.READY, verb="uncordon")
