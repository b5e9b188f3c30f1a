"""The Nodes page (platform admins): each node's state, executor, agent and GPU grid; and the
Quota page's Nodes tab, the GPUs that a quota's subtree holds. The actions are node_actions.py.

In scheduling, not quotas, because they compose apps: the inventory comes from quotas, who holds
each GPU from scheduling, each GPU's latest reading from telemetry (through page_figures, which
telemetry fills in); imports point down only (docs/console.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from quotas import bounds, selectors
from quotas.models import Node, NodeAgent, NodeExecutor, NodeState, Quota, ResourcePool
from scheduling import mentions, page_figures
from scheduling import selectors as scheduling_selectors
from scheduling.clock import get_clock
from scheduling.page_figures import GpuReading
from scheduling.selectors import GpuHolder

NodeAction = Callable[..., HttpResponse]


def _is_platform_admin(request: HttpRequest) -> bool:
    return bool(request.user.is_authenticated and getattr(request.user, "is_superuser", False))


def _admins_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The Nodes page and its actions exist for platform admins only: anyone else gets a 404,
    a GET or a POST alike, as for any object a user may not see."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not _is_platform_admin(request):
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapped


def _node_action(view: NodeAction) -> Callable[..., HttpResponse]:
    @_admins_only
    @wraps(view)
    def wrapped(request: HttpRequest, node_id: int) -> HttpResponse:
        node = get_object_or_404(selectors.node_list(user=request.user), pk=node_id)
        return view(request, node)

    return wrapped


# ---------------------------------------------------------------------------------------------
# The GPU grid
# ---------------------------------------------------------------------------------------------


def _shown(holder: GpuHolder) -> dict[str, Any]:
    return {**holder, "fraction_text": bounds.readable(round(holder["fraction"], 3))}


@dataclass
class GpuCell:
    index: int
    holders: list[GpuHolder] = field(default_factory=list)
    # The GPU's latest telemetry sample; none when its node has not reported lately.
    reading: GpuReading | None = None

    @property
    def util_text(self) -> str:
        return f"{self.reading.utilisation:.0f} %" if self.reading else "—"

    @property
    def used(self) -> float:
        return min(1.0, sum(holder["fraction"] for holder in self.holders))

    @property
    def used_text(self) -> str:
        return bounds.readable(round(self.used, 3))

    @property
    def shown(self) -> list[dict[str, Any]]:
        """The holders with their fraction as a person reads it: 0.5, not 0.500."""
        return [_shown(holder) for holder in self.holders]

    @property
    def shared(self) -> bool:
        """Fractional replicas share the device."""
        return any(holder["fraction"] < 1 for holder in self.holders)


def seconds_ago(then: datetime, now: datetime) -> str:
    """'12 s ago', '4 min ago', '3 h ago', '2 days ago': how long since an agent last beat."""
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 2 * 3600:
        return f"{seconds // 60} min ago"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} days ago"


def _agent_of(node: Node) -> NodeAgent | None:
    try:
        return node.agent
    except NodeAgent.DoesNotExist:
        return None


# Slurm's own state of a Slurm node ("IDLE", "MIXED", "IDLE+DRAIN"…), which the Slurm sync
# (slurm.inventory) keeps in the node's labels; the page shows it beside the console's state.
SLURM_STATE_LABEL = "slurm.state"


@dataclass
class NodeRow:
    node: Node
    cells: list[GpuCell]
    # The node's agent row (its token's hash and registration), none before a token was issued.
    agent: NodeAgent | None = None
    # "12 s ago" since the agent's last beat; empty when none came yet.
    heartbeat: str = ""
    # "5 min ago" since its agent last missed a start (AGENT_START_BEATS); empty while it takes them up.
    start_missed: str = ""

    @property
    def jobs(self) -> list[str]:
        return sorted({holder["job"] for cell in self.cells for holder in cell.holders})

    @property
    def slurm_state(self) -> str:
        """Slurm's state of a Slurm node; empty for other nodes."""
        if self.node.executor != NodeExecutor.SLURM:
            return ""
        return str(self.node.labels.get(SLURM_STATE_LABEL) or "")

    @property
    def gpus_held(self) -> float:
        return sum(cell.used for cell in self.cells)


def node_rows(
    nodes: list[Node],
    holders: list[GpuHolder],
    readings: Sequence[GpuReading] | None = None,
    now: datetime | None = None,
) -> list[NodeRow]:
    """Each node with one cell per GPU, naming who holds it and how busy it is; nothing here queries
    (the nodes come with their agent row)."""
    now = now or timezone.now()
    by_device: dict[tuple[int, int], list[GpuHolder]] = defaultdict(list)
    for holder in holders:
        by_device[(holder["node_id"], holder["device"])].append(holder)
    latest = {(reading.node_id, reading.gpu): reading for reading in readings or []}
    return [
        NodeRow(
            node=node,
            cells=[
                GpuCell(index, by_device.get((node.pk, index), []), latest.get((node.pk, index)))
                for index in range(node.gpus)
            ],
            agent=(agent := _agent_of(node)),
            heartbeat=seconds_ago(node.last_heartbeat, now) if node.last_heartbeat else "",
            start_missed=seconds_ago(agent.start_missed_at, now) if agent and agent.start_missed_at else "",
        )
        for node in nodes
    ]


@dataclass
class PoolGroup:
    """The nodes of one pool, as the Nodes page groups them (with their GPUs and GPU models)."""

    pool: ResourcePool
    rows: list[NodeRow]

    @property
    def gpus(self) -> int:
        return sum(row.node.gpus for row in self.rows)

    @property
    def models(self) -> list[str]:
        return sorted({row.node.gpu_model for row in self.rows if row.node.gpu_model})


def pool_groups(rows: list[NodeRow], pools: Sequence[ResourcePool] = ()) -> list[PoolGroup]:
    """The rows by pool, pools in the order of their first node (the nodes come with their pool),
    then `pools` that hold no node, so that a pool just added (or emptied) can be found, renamed
    and deleted."""
    groups: dict[int, PoolGroup] = {}
    for row in rows:
        pool = row.node.pool
        groups.setdefault(pool.pk, PoolGroup(pool=pool, rows=[])).rows.append(row)
    for pool in pools:
        groups.setdefault(pool.pk, PoolGroup(pool=pool, rows=[]))
    return list(groups.values())


@_admins_only
def nodes_page(request: HttpRequest) -> HttpResponse:
    """Three queries whatever the number of nodes: the inventory, who holds which GPU, and each
    GPU's latest utilisation."""
    # The agent row rides along in the inventory's query: whether a token exists costs nothing.
    nodes = list(selectors.node_list(user=request.user).select_related("agent"))
    readings = page_figures.latest_gpu_readings(now=get_clock().now(), node_ids=[node.pk for node in nodes])
    rows = node_rows(nodes, scheduling_selectors.gpu_holders(), readings)
    states = {state: sum(1 for node in nodes if node.state == state) for state in NodeState.values}
    return render(
        request,
        "scheduling/nodes/nodes.html",
        {
            "rows": rows,
            "pool_groups": pool_groups(rows, list(selectors.visible_pools(request.user))),
            "states": states,
            "total_gpus": sum(node.gpus for node in nodes),
            "held_gpus": bounds.readable(round(sum(row.gpus_held for row in rows), 3)),
        },
    )


def quota_nodes_context(request: HttpRequest, quota: Quota) -> dict[str, Any]:
    """The Quota page's Nodes tab: per node, the GPUs the jobs of the quota's subtree hold.

    Every GPU counts, but a job is named only to those who may see it (as on the Jobs tab);
    others read whose it is, "a job of workspace-c" beside its quota (scheduling.mentions).
    Four queries whatever the size of the subtree.
    """
    subtree = selectors.subtree_ids(quota=quota)
    holders = scheduling_selectors.gpu_holders(quota_ids=subtree)
    mentioned = mentions.mention_jobs(request.user, {holder["job_id"] for holder in holders})
    by_node: dict[str, list[GpuHolder]] = defaultdict(list)
    for holder in holders:
        mention = mentioned.get(holder["job_id"])
        if mention is None or not mention.visible:
            holder = holder.copy()
            holder["job"] = f"a job of {mention.workspace}" if mention else "a job of another workspace"
            holder["job_id"] = 0
        by_node[holder["node"]].append(holder)
    nodes = [
        {
            "name": name,
            "jobs": _jobs_on_node(held),
            "gpus": bounds.readable(round(sum(holder["fraction"] for holder in held), 3)),
        }
        for name, held in sorted(by_node.items())
    ]
    held_gpus = sum(holder["fraction"] for holder in holders)
    return {"held_nodes": nodes, "held_gpus": bounds.readable(round(held_gpus, 3))}


def _jobs_on_node(held: list[GpuHolder]) -> list[dict[str, Any]]:
    """One line per job (and fraction) on a node, with the GPU indices it holds there."""
    grouped: dict[tuple[str, int, str, float], list[int]] = defaultdict(list)
    for holder in held:
        grouped[(holder["job"], holder["job_id"], holder["quota"], holder["fraction"])].append(holder["device"])
    return [
        {
            "job": job,
            "job_id": job_id,
            "quota": quota,
            "devices": ", ".join(str(device) for device in sorted(devices)),
            "count": len(devices),
            "fraction_text": bounds.readable(round(fraction, 3)) if fraction < 1 else "",
        }
        for (job, job_id, quota, fraction), devices in sorted(
            grouped.items(), key=lambda item: (item[0][0], item[0][1])
        )
    ]
