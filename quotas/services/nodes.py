"""Inventory: nodes and their GPU devices; create, change (down or up included), delete."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from quotas import audit, bounds, hooks, signals
from quotas.models import GpuDevice, Node, NodeExecutor, NodeState, ResourcePool
from quotas.services.common import (
    _NODE_MAXIMA,
    NODE_FIELDS,
    Actor,
    _delete_audited,
    _is_number,
    _lock_pool,
    _on_commit_send,
    _pool_or_default,
    _require_platform_admin,
)
from quotas.services.errors import _amount, _Errors, _number
from quotas.services.preview import DryRunResult, _dry_run
from quotas.services.rules import _Capacity, _Tree


class NodeChanges(TypedDict, total=False):
    name: str
    gpus: int
    cpu: float
    memory_gib: float
    gpu_model: str
    labels: dict[str, Any]
    state: str
    executor: str
    pool: ResourcePool


# A Slurm node is the Slurm sync's (slurm.inventory, actor None): made by hand, nothing would run
# the jobs placed on it.
SLURM_BY_HAND = (
    "Runs jobs with Slurm is for the nodes of the console's Slurm cluster, which it adds itself "
    "(docs/slurm.md); choose Simulated or Node agent."
)


def node_snapshot(node: Node) -> dict[str, Any]:
    return {field: getattr(node, field) for field in NODE_FIELDS}


def _check_node(node: Node, errors: _Errors) -> None:
    name = node.name
    if not isinstance(name, str) or not name.strip():
        errors.add("name", "A node needs a name.")
    elif len(name) > bounds.NAME_MAX_LENGTH:
        errors.add(
            "name", f"A node name has at most {bounds.NAME_MAX_LENGTH} characters; {name[:20]}… has {len(name)}."
        )
    label = name if isinstance(name, str) and name.strip() else "the node"
    if isinstance(node.gpus, bool) or not isinstance(node.gpus, int) or node.gpus < 0:
        errors.add("gpus", f"gpus of {label} must be a whole number of devices ≥ 0, got {node.gpus!r}.")
    elif node.gpus > bounds.NODE_GPUS_MAX:
        # Checked before any device is built: one row per GPU is what made 10^9 GPUs take 23 GB.
        errors.add(
            "gpus",
            f"gpus of {label} must be at most {bounds.NODE_GPUS_MAX} (the most a node holds), "
            f"got {bounds.readable(node.gpus)}.",
        )
    for field in ("cpu", "memory_gib"):
        amount = getattr(node, field)
        if not _is_number(amount):
            errors.add(field, f"{field} of {label} must be a number, got {amount!r}.")
        elif amount < 0:
            errors.add(field, f"{field} of {label} must be at least 0, got {_number(amount)}.")
        elif amount > _NODE_MAXIMA[field]:
            errors.add(
                field,
                f"{field} of {label} must be at most {bounds.readable(_NODE_MAXIMA[field])}, "
                f"got {bounds.readable(amount)}.",
            )
    if not isinstance(node.gpu_model, str):
        errors.add("gpu_model", f"gpu_model of {label} must be text, got {node.gpu_model!r}.")
    elif len(node.gpu_model) > bounds.GPU_MODEL_MAX_LENGTH:
        errors.add(
            "gpu_model",
            f"gpu_model of {label} has at most {bounds.GPU_MODEL_MAX_LENGTH} characters, got {len(node.gpu_model)}.",
        )
    if not isinstance(node.labels, dict):
        errors.add("labels", f"labels of {label} must be a mapping of names to values, got {node.labels!r}.")
    else:
        _check_labels(node.labels, label, errors)
    if node.state not in NodeState.values:
        errors.add("state", f"state {node.state!r} of {label} is not one of {', '.join(NodeState.values)}.")


def _check_labels(labels: dict[str, Any], label: str, errors: _Errors) -> None:
    if len(labels) > bounds.NODE_LABELS_MAX:
        errors.add("labels", f"labels of {label} hold at most {bounds.NODE_LABELS_MAX} entries, got {len(labels)}.")
        return
    for key, value in labels.items():
        if len(key) > bounds.LABEL_KEY_MAX_LENGTH:
            errors.add(
                "labels",
                f"a label name of {label} has at most {bounds.LABEL_KEY_MAX_LENGTH} characters; "
                f"{key[:20]}… has {len(key)}.",
            )
        elif len(str(value)) > bounds.LABEL_VALUE_MAX_LENGTH:
            errors.add(
                "labels",
                f"the label {key!r} of {label} has at most {bounds.LABEL_VALUE_MAX_LENGTH} characters, "
                f"got {len(str(value))}.",
            )


def _sync_devices(node: Node) -> None:
    """One GpuDevice per GPU, indices 0..gpus-1, each of the node's model (new nodes get theirs
    in _create_nodes)."""
    node.devices.filter(index__gte=node.gpus).delete()
    existing = set(node.devices.values_list("index", flat=True))
    GpuDevice.objects.bulk_create(
        [GpuDevice(node=node, index=index, model=node.gpu_model) for index in range(node.gpus) if index not in existing]
    )
    node.devices.exclude(model=node.gpu_model).update(model=node.gpu_model)


def _capacity_after(tree: _Tree, before: Mapping[str, Any], replacement: Node | None) -> _Capacity:
    """The pool's capacity once the node stored as `before` is replaced (or removed, with None)."""
    capacity = _Capacity(tree.capacity.gpus, tree.capacity.cpu, tree.capacity.memory_gib)
    for field in ("gpus", "cpu", "memory_gib"):
        new = getattr(replacement, field) if replacement is not None else 0
        setattr(capacity, field, getattr(capacity, field) - before[field] + new)
    return capacity


def _save_node(node: Node) -> None:
    try:
        with transaction.atomic():
            node.save()
    except IntegrityError:
        raise ValidationError({"name": f"A node named {node.name!r} already exists; node names are unique."}) from None


def preview_create_node(
    *,
    actor: Actor,
    name: str,
    gpus: int,
    cpu: float = 0,
    memory_gib: float = 0,
    gpu_model: str = "",
    labels: dict[str, Any] | None = None,
    state: str = NodeState.READY,
    pool: ResourcePool | None = None,
    executor: str = NodeExecutor.SIMULATED,
) -> DryRunResult:
    """`create_node` in a rolled-back transaction: whether it is valid, and what the next cycle would do."""
    spec = NewNode(name, gpus, cpu, memory_gib, gpu_model, labels, state, executor)
    return _dry_run(_create_node_change(actor=actor, spec=spec, pool=pool), pool_id=None)


def create_node(
    *,
    actor: Actor,
    name: str,
    gpus: int,
    cpu: float = 0,
    memory_gib: float = 0,
    gpu_model: str = "",
    labels: dict[str, Any] | None = None,
    state: str = NodeState.READY,
    pool: ResourcePool | None = None,
    executor: str = NodeExecutor.SIMULATED,
) -> Node:
    """A node of `pool` (the default pool when None) with its GPU devices 0..gpus-1."""
    spec = NewNode(name, gpus, cpu, memory_gib, gpu_model, labels, state, executor)
    return _create_node_change(actor=actor, spec=spec, pool=pool)()


def _create_node_change(*, actor: Actor, spec: NewNode, pool: ResourcePool | None) -> Callable[[], Node]:
    _require_platform_admin(actor, "change the inventory")

    def apply() -> Node:
        (node,) = _create_nodes(actor=actor, pool=pool, nodes=[spec], name_nodes=False)
        return node

    return apply


@dataclass(frozen=True, slots=True)
class NewNode:
    """One node of `create_nodes`; the defaults are create_node's."""

    name: str
    gpus: int
    cpu: float = 0
    memory_gib: float = 0
    gpu_model: str = ""
    labels: dict[str, Any] | None = None
    state: str = NodeState.READY
    executor: str = NodeExecutor.SIMULATED


def create_nodes(*, actor: Actor, nodes: Sequence[NewNode], pool: ResourcePool | None = None) -> list[Node]:
    """Many nodes of `pool` at once (a cluster's inventory), all or nothing.

    The same rules, messages and audit records (one `node.create` per node) as `create_node`,
    each message prefixed with the node's position (`nodes[3]: ...`); names must also differ
    within the set. Then one insert of the nodes and one of their devices, and one
    `inventory_changed` after commit naming them all. Returns the nodes in the order given.
    """
    _require_platform_admin(actor, "change the inventory")
    return _create_nodes(actor=actor, pool=pool, nodes=nodes, name_nodes=True)


def _create_nodes(*, actor: Actor, pool: ResourcePool | None, nodes: Sequence[NewNode], name_nodes: bool) -> list[Node]:
    if not nodes:
        return []
    with transaction.atomic():
        pool_id = _pool_or_default(pool).pk
        _lock_pool(pool_id)
        new = [
            Node(
                pool_id=pool_id,
                name=spec.name,
                gpus=spec.gpus,
                cpu=spec.cpu,
                memory_gib=spec.memory_gib,
                gpu_model=spec.gpu_model,
                labels={} if spec.labels is None else spec.labels,
                state=spec.state,
                executor=spec.executor,
            )
            for spec in nodes
        ]
        names = [node.name for node in new if isinstance(node.name, str)]
        taken = set(Node.objects.filter(name__in=names).values_list("name", flat=True))
        errors = _Errors()
        seen: dict[str, int] = {}
        for position, node in enumerate(new):
            node_errors = _Errors()
            _check_node(node, node_errors)
            if actor is not None and node.executor == NodeExecutor.SLURM:
                node_errors.add("executor", SLURM_BY_HAND)
            if isinstance(node.name, str):
                if node.name in taken:
                    node_errors.add("name", f"A node named {node.name!r} already exists; node names are unique.")
                elif node.name in seen:
                    node_errors.add(
                        "name", f"A node named {node.name!r} is also nodes[{seen[node.name]}]; node names are unique."
                    )
                seen.setdefault(node.name, position)
            for field, messages in node_errors.by_field.items():
                for message in messages:
                    errors.add(field, f"nodes[{position}]: {message}" if name_nodes else message)
        errors.raise_if_any()
        try:
            with transaction.atomic():
                Node.objects.bulk_create(new)
        except IntegrityError:
            # The names were free when checked; a concurrent writer took one meanwhile.
            raise ValidationError(
                {"name": f"A node named {new[0].name!r} already exists; node names are unique."}
                if len(new) == 1
                else {"name": "A node of this set already exists (created meanwhile); node names are unique."}
            ) from None
        GpuDevice.objects.bulk_create(
            [GpuDevice(node=node, index=index, model=node.gpu_model) for node in new for index in range(node.gpus)]
        )
        audit.record_all(
            [
                audit.build(
                    actor=actor,
                    action="node.create",
                    object_type="node",
                    object_id=node.pk,
                    object_repr=node.name,
                    after=node_snapshot(node),
                )
                for node in new
            ]
        )
        _on_commit_send(signals.inventory_changed, Node, action="node.create", node_ids=[node.pk for node in new])
        return new


def preview_update_node(*, actor: Actor, node: Node, **changes: Unpack[NodeChanges]) -> DryRunResult:
    """`update_node` in a rolled-back transaction: whether it is valid, and what the next cycle would do."""
    return _dry_run(_update_node_change(actor=actor, node=node, changes=changes), pool_id=node.pool_id)


def update_node(*, actor: Actor, node: Node, **changes: Unpack[NodeChanges]) -> Node:
    """Change a node; fewer GPUs (or CPU, memory) is refused while the roots' guarantees need them."""
    return _update_node_change(actor=actor, node=node, changes=changes)()


def _update_node_change(*, actor: Actor, node: Node, changes: NodeChanges) -> Callable[[], Node]:
    _require_platform_admin(actor, "change the inventory")
    unknown = set(changes) - {*NODE_FIELDS, "pool"}
    target = changes.pop("pool", None)
    moving = target is not None and target.pk != node.pool_id

    def apply() -> Node:
        if unknown:
            raise ValidationError({field: f"{field} is not a field of a node." for field in sorted(unknown)})
        with transaction.atomic():
            if "gpus" in changes or moving:  # fewer, perhaps: known only under the locks, which must come after
                hooks.take_commit_turn()
            # Both pools' locks in id order, as every writer takes them, when the node moves.
            if moving and target is not None and target.pk < node.pool_id:
                target_tree: _Tree | None = _Tree.locked(target.pk)
                tree = _Tree.locked(node.pool_id)
            else:
                tree = _Tree.locked(node.pool_id)
                target_tree = _Tree.locked(target.pk) if moving and target is not None else None
            current = Node.objects.select_for_update().get(pk=node.pk)
            before = node_snapshot(current)
            for field, value in changes.items():
                setattr(current, field, value)
            errors = _Errors()
            _check_node(current, errors)
            if actor is not None and current.executor == NodeExecutor.SLURM and before["executor"] != current.executor:
                errors.add("executor", SLURM_BY_HAND)
            if target_tree is not None:
                for reason in hooks.node_move_blockers(current):
                    errors.add("pool", reason)
                errors.raise_if_any()
                tree.check_capacity(
                    _capacity_after(tree, before, None),
                    errors,
                    {},
                    f"Moving {before['name']} to the pool {target_tree.pool.name}",
                )
                errors.raise_if_any()
                _move_node(actor=actor, node=current, source=tree.pool, target=target_tree.pool)
                # The rest of the change is checked against the pool it now belongs to.
                tree = target_tree
                tree.capacity = _Capacity(
                    tree.capacity.gpus + before["gpus"],
                    tree.capacity.cpu + before["cpu"],
                    tree.capacity.memory_gib + before["memory_gib"],
                )
            if current.gpus < before["gpus"]:
                for reason in hooks.node_shrink_blockers(current, current.gpus):
                    errors.add("gpus", reason)
            if "name" in changes and Node.objects.filter(name=current.name).exclude(pk=current.pk).exists():
                errors.add("name", f"A node named {current.name!r} already exists; node names are unique.")
            errors.raise_if_any()
            tree.check_capacity(
                _capacity_after(tree, before, current),
                errors,
                {},
                f"Changing {before['name']} from {_amount(before['gpus'], 'GPUs')} to {_amount(current.gpus, 'GPUs')}"
                if before["gpus"] != current.gpus
                else f"Changing {before['name']}",
            )
            errors.raise_if_any()
            after = node_snapshot(current)
            changed_fields = [field for field in NODE_FIELDS if before[field] != after[field]]
            if changed_fields:
                _save_node(current)
                _sync_devices(current)
                action = "node.update"
                if changed_fields == ["state"]:
                    action = {NodeState.NOT_READY: "node.down", NodeState.READY: "node.up"}.get(
                        NodeState(current.state), f"node.{current.state}"
                    )
                audit.record(
                    actor=actor,
                    action=action,
                    object_type="node",
                    object_id=current.pk,
                    object_repr=current.name,
                    before={field: before[field] for field in changed_fields},
                    after={field: after[field] for field in changed_fields},
                )
                _on_commit_send(signals.inventory_changed, Node, action=action, node_ids=[current.pk])
            return current

    return apply


def _move_node(*, actor: Actor, node: Node, source: ResourcePool, target: ResourcePool) -> None:
    """The node joins `target`: its GPUs leave `source`'s capacity and join `target`'s (checked by the caller)."""
    Node.objects.filter(pk=node.pk).update(pool=target)
    node.pool = target
    audit.record(
        actor=actor,
        action="node.move",
        object_type="node",
        object_id=node.pk,
        object_repr=node.name,
        before={"pool": source.name},
        after={"pool": target.name},
    )
    _on_commit_send(signals.inventory_changed, Node, action="node.move", node_ids=[node.pk])


def preview_set_node_state(*, actor: Actor, node: Node, state: str) -> DryRunResult:
    """`set_node_state` in a rolled-back transaction: whether it is allowed, and what the next cycle would do."""
    return preview_update_node(actor=actor, node=node, state=state)


def set_node_state(*, actor: Actor, node: Node, state: str) -> Node:
    """Mark a node `down` (its GPUs leave the cluster the scheduler places on) or `ready` again.

    Guarantees stay as they are: they count every node of the pool, ready or not.
    """
    return update_node(actor=actor, node=node, state=state)


def preview_delete_node(*, actor: Actor, node: Node) -> DryRunResult:
    """`delete_node` in a rolled-back transaction: whether it is allowed, and what the next cycle would do."""
    return _dry_run(_delete_node_change(actor=actor, node=node), pool_id=node.pool_id)


def delete_node(*, actor: Actor, node: Node) -> None:
    """Refused while the roots' guarantees need its capacity, or while something placed on it holds it."""
    _delete_node_change(actor=actor, node=node)()


def _delete_node_change(*, actor: Actor, node: Node) -> Callable[[], None]:
    _require_platform_admin(actor, "change the inventory")

    def apply() -> None:
        with transaction.atomic():
            hooks.take_commit_turn()  # before the inventory's locks: the commit takes it first too
            tree = _Tree.locked(node.pool_id)
            current = Node.objects.select_for_update().get(pk=node.pk)
            errors = _Errors()
            for reason in hooks.node_delete_blockers(current):
                errors.add("node", reason)
            capacity = _capacity_after(tree, node_snapshot(current), None)
            tree.check_capacity(capacity, errors, {}, f"Removing {current.name}")
            errors.raise_if_any()
            node_id = _delete_audited(actor=actor, row=current, field="node", before=node_snapshot(current))
            _on_commit_send(signals.inventory_changed, Node, action="node.delete", node_ids=[node_id])

    return apply
