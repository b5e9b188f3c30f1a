"""The Nodes page's actions (Add, Edit, Cordon, Drain, Uncordon, Create or Rotate token) through
the page kit's Preview and Confirm; the page itself is node_views.py."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from quotas import bounds, node_agents, node_forms, selectors, services
from quotas.models import Node, NodeAgent, Quota
from quotas.services import DryRunResult
from scheduling import selectors as scheduling_selectors
from scheduling.node_views import _admins_only, _agent_of, _node_action
from utilities.pagekit import PreviewAction, PreviewSummary, ShareMove, run_preview_action
from utilities.validation import error_messages

_TOLERANCE = 1e-9


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
    fields = {
        field: cleaned[field] for field in ("name", "gpus", "gpu_model", "cpu", "memory_gib", "executor", "labels")
    }
    if cleaned.get("pool") is not None:  # none chosen: the default pool (create) or where it is (edit)
        fields["pool"] = cleaned["pool"]
    return fields


@_admins_only
def node_new(request: HttpRequest) -> HttpResponse:
    pool = selectors.default_pool()

    action = PreviewAction(
        title="Add node",
        intro="A node of the pool you choose (the default pool unless you pick another), with one GPU device "
        "per GPU; it takes jobs of that pool's quotas at once.",
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
        "pool": node.pool.name,
        "gpus": node.gpus,
        "gpu_model": node.gpu_model,
        "cpu": node.cpu,
        "memory_gib": node.memory_gib,
        "executor": node.executor,
        "labels": node_forms.labels_text(node.labels),
    }
    action = PreviewAction(
        title=f"Edit {node.name}",
        intro="Fewer GPUs are refused while the quotas' guarantees need them; a move to another pool is refused "
        "while jobs run on it; cordon, drain and uncordon change its state.",
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
    template = "scheduling/nodes/token_issued.html" if partial else "scheduling/nodes/token_page.html"
    shown = render(request, template, context)
    add_never_cache_headers(shown)
    return shown


@_admins_only
def pool_new(request: HttpRequest) -> HttpResponse:
    """Add pool: nothing to preview (an empty pool moves no share), so one step, then the Nodes page."""
    form = node_forms.PoolForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            pool = services.create_pool(actor=request.user, **form.cleaned_data)
        except ValidationError as refused:
            for field, field_messages in error_messages(refused).items():
                for message in field_messages:
                    form.add_error(field if field in form.fields else None, message)
        else:
            messages.success(
                request, f"Added the pool {pool.name}. Move nodes into it with Edit node; root quotas name it."
            )
            return redirect(f"{reverse('nodes-page')}#pool-{pool.pk}")
    return render(request, "scheduling/nodes/pool_new.html", {"form": form})
