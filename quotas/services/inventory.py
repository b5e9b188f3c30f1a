"""Inventory files: a `nodes:` list expanded to one spec per node, and loaded by name, all or nothing."""

from __future__ import annotations

from typing import Any, TypedDict

from django.core.exceptions import ValidationError
from django.db import transaction

from quotas.models import Node, NodeState, ResourcePool
from quotas.services.common import Actor, _require_platform_admin
from quotas.services.errors import _Errors, error_messages
from quotas.services.nodes import create_node, update_node


class InventoryResult(TypedDict):
    created: list[str]
    updated: list[str]
    unchanged: list[str]


NODE_ENTRY_KEYS = frozenset({"name", "count", "gpus", "cpu", "memory_gib", "gpu_model", "labels", "state"})


def expand_node_entries(entries: object) -> list[dict[str, Any]]:
    """The `nodes:` list of a scenario or inventory file as one spec per node.

    `count: N` (N > 1) expands `name` into name-1 … name-N. Errors name the entry and the field.
    """
    if not isinstance(entries, list):
        raise ValidationError({"nodes": f"nodes must be a list of entries, got {type(entries).__name__}."})
    specs: list[dict[str, Any]] = []
    errors = _Errors()
    seen: dict[str, str] = {}
    for position, entry in enumerate(entries):
        where = f"nodes[{position}]"
        if not isinstance(entry, dict):
            errors.add(where, f"{where} must be a mapping like {{name: gpu, gpus: 8}}, got {entry!r}.")
            continue
        label = f"{where} ({entry.get('name', 'no name')})"
        unknown = sorted(set(entry) - NODE_ENTRY_KEYS)
        if unknown:
            errors.add(
                where,
                f"{label}: unknown field(s) {', '.join(map(str, unknown))}; "
                f"known: {', '.join(sorted(NODE_ENTRY_KEYS))}.",
            )
        for required in ("name", "gpus"):
            if required not in entry:
                errors.add(where, f"{label}: {required} is required.")
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            errors.add(where, f"{label}: count must be a whole number ≥ 1, got {count!r}.")
            continue
        if "name" not in entry or "gpus" not in entry or unknown:
            continue
        base = str(entry["name"])
        names = [base] if count == 1 else [f"{base}-{index}" for index in range(1, count + 1)]
        for node_name in names:
            if node_name in seen:
                errors.add(where, f"{label}: node {node_name} is already defined by {seen[node_name]}.")
                continue
            seen[node_name] = where
            spec = {key: value for key, value in entry.items() if key != "count"}
            if spec.get("state") == "down":
                # Inventory files written before the agent's states say `down` for not ready.
                spec["state"] = NodeState.NOT_READY
            spec["name"] = node_name
            spec["_entry"] = label
            specs.append(spec)
    errors.raise_if_any()
    return specs


def load_inventory(*, actor: Actor, nodes: object, pool: ResourcePool | None = None) -> InventoryResult:
    """Create or update the nodes of an inventory file, by name, all or nothing; other nodes stay."""
    _require_platform_admin(actor, "change the inventory")
    specs = expand_node_entries(nodes)
    result = InventoryResult(created=[], updated=[], unchanged=[])
    with transaction.atomic():
        for spec in specs:
            entry = spec.pop("_entry")
            existing = Node.objects.filter(name=spec["name"]).first()
            try:
                if existing is None:
                    create_node(actor=actor, pool=pool, **spec)
                    result["created"].append(spec["name"])
                    continue
                # Only the fields the file names are set; what it leaves out stays as it is.
                changes = {field: value for field, value in spec.items() if getattr(existing, field) != value}
                if not changes:
                    result["unchanged"].append(spec["name"])
                    continue
                update_node(actor=actor, node=existing, **changes)
                result["updated"].append(spec["name"])
            except ValidationError as error:
                raise ValidationError(
                    {
                        field: [f"{entry}: {message}" for message in messages]
                        for field, messages in error_messages(error).items()
                    }
                ) from None
    return result
