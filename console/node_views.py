"""The Nodes page (platform admins): each node's state, executor, agent and GPU grid, and its
actions (Add, Edit, Cordon, Drain, Uncordon, Create or Rotate token) through the page kit's
Preview and Confirm; and the Quota page's Nodes tab, the GPUs that a quota's subtree holds.

In the console because they compose apps: the inventory comes from quotas, who holds each GPU
from scheduling (docs/console.md).
"""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from console import node_forms
from console.pagekit import PreviewAction, PreviewSummary, ShareMove, run_preview_action
from quotas import bounds, node_agents, selectors, services
from quotas.models import Node, NodeAgent, NodeState, Quota
from quotas.services import DryRunResult
from scheduling import selectors as scheduling_selectors
from scheduling.clock import get_clock
from scheduling.models import HOLDING_STATES, Job
from scheduling.selectors import GpuHolder
from telemetry import selectors as telemetry_selectors
from telemetry.selectors import GpuLatest
from workspaces.permissions import restrict

_TOLERANCE = 1e-9
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
    reading: GpuLatest | None = None

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


@dataclass
class NodeRow:
    node: Node
    cells: list[GpuCell]
    # The node's agent row (its token's hash and registration), none before a token was issued.
    agent: NodeAgent | None = None
    # "12 s ago" since the agent's last beat; empty when none came yet.
    heartbeat: str = ""

    @property
    def jobs(self) -> list[str]:
        return sorted({holder["job"] for cell in self.cells for holder in cell.holders})

    @property
    def gpus_held(self) -> float:
        return sum(cell.used for cell in self.cells)


def node_rows(
    nodes: list[Node],
    holders: list[GpuHolder],
    readings: list[GpuLatest] | None = None,
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
            agent=_agent_of(node),
            heartbeat=seconds_ago(node.last_heartbeat, now) if node.last_heartbeat else "",
        )
        for node in nodes
    ]


@_admins_only
def nodes_page(request: HttpRequest) -> HttpResponse:
    """Three queries whatever the number of nodes: the inventory, who holds which GPU, and each
    GPU's latest utilisation."""
    # The agent row rides along in the inventory's query: whether a token exists costs nothing.
    nodes = list(selectors.node_list(user=request.user).select_related("agent"))
    readings = telemetry_selectors.latest_gpu_readings(now=get_clock().now(), node_ids=[node.pk for node in nodes])
    rows = node_rows(nodes, scheduling_selectors.gpu_holders(), readings)
    states = {state: sum(1 for node in nodes if node.state == state) for state in NodeState.values}
    return render(
        request,
        "console/nodes/nodes.html",
        {
            "rows": rows,
            "states": states,
            "total_gpus": sum(node.gpus for node in nodes),
            "held_gpus": bounds.readable(round(sum(row.gpus_held for row in rows), 3)),
        },
    )


def quota_nodes_context(request: HttpRequest, quota: Quota) -> dict[str, Any]:
    """The Quota page's Nodes tab: per node, the GPUs the jobs of the quota's subtree hold.

    Every GPU counts, but a job is named only to those who may see it (as on the Jobs tab);
    others read "a job of another workspace". Three queries whatever the size of the subtree.
    """
    subtree = selectors.subtree_ids(quota=quota)
    holders = scheduling_selectors.gpu_holders(quota_ids=subtree)
    visible = set(
        restrict(Job.objects.filter(quota_id__in=subtree, state__in=HOLDING_STATES), request.user, "view").values_list(
            "pk", flat=True
        )
    )
    by_node: dict[str, list[GpuHolder]] = defaultdict(list)
    for holder in holders:
        if holder["job_id"] not in visible:
            holder = holder.copy()
            holder["job"], holder["job_id"] = "a job of another workspace", 0
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


# ---------------------------------------------------------------------------------------------
# Actions
# ---------------------------------------------------------------------------------------------


def _summariser(pool_id: int | None) -> Callable[[DryRunResult], PreviewSummary]:
    """Fair shares now, to say which ones the change moves (a cordon shrinks what is divided)."""
    quotas = list(Quota.objects.filter(pool_id=pool_id).order_by("id")) if pool_id else []
    statuses = selectors.quota_statuses(quotas)
    before = {quota.name: (quota.gpus, statuses[quota.pk]["fair_share"]) for quota in quotas}

    def summarise(result: DryRunResult) -> PreviewSummary:
        preview = result["preview"]
        assert preview is not None
        moves = [
            ShareMove(
                quota=share["name"],
                guaranteed_before=before[share["name"]][0],
                guaranteed_after=before[share["name"]][0],
                fair_share_before=before[share["name"]][1],
                fair_share_after=share["fair_share"],
            )
            for share in preview["shares"]
            if share["name"] in before and abs(before[share["name"]][1] - share["fair_share"]) > _TOLERANCE
        ]
        return PreviewSummary(moves=moves, reclaimable=[], evictions=preview["evict"], admissions=preview["admit"])

    return summarise


def _holding(node: Node) -> list[str]:
    held = scheduling_selectors.gpu_holders(node_ids=[node.pk])
    return sorted({f"{holder['job']} ({holder['quota']})" for holder in held})


STATE_CHANGES: Mapping[str, tuple[Callable[..., DryRunResult], Callable[..., Node], str, str]] = {
    # verb: (its preview, the service, what the intro says, the done message's ending)
    "cordon": (
        services.preview_cordon_node,
        services.cordon_node,
        "No new job is placed on {node}; the jobs on it keep running. Its idle GPUs leave the capacity that "
        "fair share divides.",
        "is cordoned",
    ),
    "drain": (
        services.preview_drain_node,
        services.drain_node,
        "Cordons {node} and evicts every job on it, whatever its priority, each after its grace period, back to "
        "the queue to run elsewhere.",
        "is draining",
    ),
    "uncordon": (services.preview_uncordon_node, services.uncordon_node, "{node} takes new jobs again.", "is ready"),
}


def _state_change(request: HttpRequest, node: Node, verb: str) -> HttpResponse:
    preview, service, intro, done = STATE_CHANGES[verb]
    running = _holding(node)
    holding = f" Jobs on it now: {', '.join(running)}." if running else " No job runs on it now."

    action = PreviewAction(
        title=f"{verb.capitalize()} {node.name}",
        intro=intro.format(node=node.name) + holding,
        url=reverse(f"node-{verb}", args=[node.pk]),
        done_url=reverse("nodes-page"),
        form=node_forms.StateChangeForm(request.POST or None),
        preview=lambda cleaned: preview(actor=request.user, node=node),
        apply=lambda cleaned: service(actor=request.user, node=node),
        summarise=_summariser(node.pool_id),
        done_message=lambda cleaned: f"{node.name} {done}.",
        confirm_label=f"Confirm: {verb}",
    )
    return run_preview_action(request, action)


@_node_action
def node_cordon(request: HttpRequest, node: Node) -> HttpResponse:
    return _state_change(request, node, "cordon")


@_node_action
def node_drain(request: HttpRequest, node: Node) -> HttpResponse:
    return _state_change(request, node, "drain")


@_node_action
def node_uncordon(request: HttpRequest, node: Node) -> HttpResponse:
    return _state_change(request, node, "uncordon")


def _node_fields(cleaned: Mapping[str, Any]) -> dict[str, Any]:
    return {field: cleaned[field] for field in ("name", "gpus", "gpu_model", "cpu", "memory_gib", "executor", "labels")}


@_admins_only
def node_new(request: HttpRequest) -> HttpResponse:
    pool = selectors.default_pool()

    action = PreviewAction(
        title="Add node",
        intro="A node of the default pool, with one GPU device per GPU; it takes jobs at once.",
        url=reverse("node-new"),
        done_url=reverse("nodes-page"),
        form=node_forms.NodeForm(request.POST or None),
        preview=lambda cleaned: services.preview_create_node(actor=request.user, **_node_fields(cleaned)),
        apply=lambda cleaned: services.create_node(actor=request.user, **_node_fields(cleaned)),
        summarise=_summariser(pool.pk if pool else None),
        done_message=lambda cleaned: f"Added {cleaned['name']} with {bounds.readable(cleaned['gpus'])} GPUs.",
        confirm_label="Confirm: add",
    )
    return run_preview_action(request, action)


@_node_action
def node_edit(request: HttpRequest, node: Node) -> HttpResponse:
    initial = {
        "name": node.name,
        "gpus": node.gpus,
        "gpu_model": node.gpu_model,
        "cpu": node.cpu,
        "memory_gib": node.memory_gib,
        "executor": node.executor,
        "labels": node_forms.labels_text(node.labels),
    }
    action = PreviewAction(
        title=f"Edit {node.name}",
        intro="Fewer GPUs are refused while the quotas' guarantees need them; cordon, drain and uncordon "
        "change its state.",
        url=reverse("node-edit", args=[node.pk]),
        done_url=reverse("nodes-page"),
        form=node_forms.NodeForm(request.POST or None, initial=initial),
        preview=lambda cleaned: services.preview_update_node(actor=request.user, node=node, **_node_fields(cleaned)),
        apply=lambda cleaned: services.update_node(actor=request.user, node=node, **_node_fields(cleaned)),
        summarise=_summariser(node.pool_id),
        done_message=lambda cleaned: f"Saved {cleaned['name']}.",
        confirm_label="Confirm: save",
    )
    return run_preview_action(request, action)


# ---------------------------------------------------------------------------------------------
# Node tokens
# ---------------------------------------------------------------------------------------------

# Where the page suggests keeping the token on the host (docs/agent.md says the same).
TOKEN_FILE = "/etc/gqc/node.token"


def _token_words(agent: NodeAgent | None) -> str:
    if agent is None:
        return "none yet"
    return f"{agent.token_prefix}…, issued {timezone.localtime(agent.token_issued_at):%Y-%m-%d %H:%M %Z}"


def agent_command(request: HttpRequest, node: Node) -> str:
    """The command line that starts the node's agent against this console."""
    server = request.build_absolute_uri("/").rstrip("/")
    return f"python manage.py agent --server {server} --node {shlex.quote(node.name)} --token-file {TOKEN_FILE}"


@_node_action
def node_token(request: HttpRequest, node: Node) -> HttpResponse:
    """Create or rotate the node's agent token through Preview and Confirm. Confirm answers the
    token itself, this once, with no-store: the console keeps only its hash, and a reload (a
    re-sent Confirm) is refused by the form, because the token it previewed is gone."""
    agent = _agent_of(node)
    verb = "Rotate" if agent else "Create"
    issued: list[str] = []

    def preview(cleaned: Mapping[str, Any]) -> DryRunResult:
        # Nothing to simulate: a token moves no GPU, no share and no job.
        return DryRunResult(valid=True, errors={}, preview=None)

    def apply(cleaned: Mapping[str, Any]) -> str:
        token = node_agents.issue_node_token(actor=request.user, node=node)
        issued.append(token)
        return token

    if agent:
        intro = (
            f"A new token for {node.name}'s agent. The current one ({_token_words(agent)}) stops working at once: "
            "the agent is refused until it is restarted with the new token."
        )
    else:
        intro = f"A token for {node.name}'s agent, which it sends with every report."
    if node.executor != "agent":
        intro += (
            f" {node.name} runs on the simulated executor: the agent takes over once Edit node sets "
            "Runs jobs with to Node agent."
        )
    intro += " The token is shown once, after Confirm; the console keeps only its hash."
    action = PreviewAction(
        title=f"{verb} token of {node.name}",
        intro=intro,
        url=reverse("node-token", args=[node.pk]),
        done_url=reverse("nodes-page"),
        form=node_forms.NodeTokenForm(request.POST or None, node=node, current=node_forms.token_state(agent)),
        preview=preview,
        apply=apply,
        summarise=lambda result: PreviewSummary(moves=[], reclaimable=[], evictions=[], admissions=[]),
        done_message=lambda cleaned: f"{node.name} has a new agent token; the previous one no longer works.",
        confirm_label=f"Confirm: {verb.lower()} token",
        moves_shares=False,
    )
    answer = run_preview_action(request, action)
    if not issued:
        return answer
    context = {"node": node, "token": issued[0], "command": agent_command(request, node), "token_file": TOKEN_FILE}
    partial = getattr(request, "htmx", False)
    shown = render(request, "console/nodes/token_issued.html" if partial else "console/nodes/token_page.html", context)
    add_never_cache_headers(shown)
    return shown
