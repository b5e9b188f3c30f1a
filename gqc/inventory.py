"""What `gqc pools` and `gqc nodes` print: the pools with what each holds, and the nodes by pool.

The API's pool answers name, placement and description only; what a pool holds is counted here
from the nodes and quotas the same user may read, so a member sees the nodes and the quotas of
the pools their quotas are in, and a platform admin every one.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gqc.output import Column, gpus


def pool_rows(pools: list[dict[str, Any]], nodes: list[dict[str, Any]], quotas: list[dict[str, Any]]) -> list[Any]:
    """Each pool as the API gave it, plus `nodes`, `gpus`, `gpu_models`, `quotas` (how many),
    `roots` (its root quotas' names) and `guaranteed` (what its roots guarantee together)."""
    nodes_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for node in nodes:
        nodes_of[node["pool"]].append(node)
    quotas_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for quota in quotas:
        quotas_of[quota["pool"]].append(quota)
    rows: list[Any] = []
    for pool in pools:
        held = nodes_of[pool["name"]]
        members = quotas_of[pool["name"]]
        roots = [quota for quota in members if not quota.get("parent")]
        rows.append(
            {
                **pool,
                "nodes": len(held),
                "gpus": sum(node["gpus"] for node in held),
                "gpu_models": sorted({node["gpu_model"] for node in held if node.get("gpu_model")}),
                "quotas": len(members),
                "roots": [quota["name"] for quota in roots],
                "guaranteed": sum(quota["gpus"] for quota in roots),
            }
        )
    return rows


POOL_COLUMNS = (
    Column("NAME", lambda pool: pool["name"]),
    Column("NODES", lambda pool: pool["nodes"]),
    Column("GPUS", lambda pool: gpus(pool["gpus"])),
    Column("QUOTAS", lambda pool: pool["quotas"]),
    Column("GUARANTEED", lambda pool: gpus(pool["guaranteed"])),
    Column("ROOTS", lambda pool: pool["roots"]),
    Column("PLACEMENT", lambda pool: pool["placement"]),
    Column("GPU-MODELS", lambda pool: pool["gpu_models"], wide_only=True),
    Column("DESCRIPTION", lambda pool: pool.get("description"), wide_only=True),
)
NODE_COLUMNS = (
    Column("NAME", lambda node: node["name"]),
    Column("POOL", lambda node: node["pool"]),
    Column("STATE", lambda node: node["state"]),
    Column("GPUS", lambda node: node["gpus"]),
    Column("GPU-MODEL", lambda node: node.get("gpu_model")),
    Column("EXECUTOR", lambda node: node.get("executor"), wide_only=True),
    Column("CPU", lambda node: node.get("cpu"), wide_only=True),
    Column("MEMORY-GIB", lambda node: node.get("memory_gib"), wide_only=True),
)
