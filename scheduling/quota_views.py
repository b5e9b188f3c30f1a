"""The Resource Quotas page and the Quota page; their actions are quota_actions.py.

They live in scheduling, not quotas, because they compose apps: the tree comes from quotas, the
jobs that a smaller guarantee exposes and the allocation charts from scheduling, the bound
workspaces from workspaces, the utilisation chart from telemetry (through page_figures); the lower
apps never import upwards (docs/console.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.template import engines
from django.urls import reverse
from django.utils.safestring import mark_safe

from quotas import selectors
from quotas.models import Quota
from scheduling import allocation_history, mentions, node_views, page_figures, quota_charts, quota_in_view
from scheduling import selectors as scheduling_selectors
from scheduling.clock import get_clock
from scheduling.models import ACTIVE_STATES, Job, JobState
from workspaces import selectors as workspace_selectors
from workspaces.permissions import restrict


def _is_platform_admin(request: HttpRequest) -> bool:
    return bool(request.user.is_authenticated and getattr(request.user, "is_superuser", False))


def _visible_quota(request: HttpRequest, quota_id: int) -> Quota:
    """A quota the user may not see is a 404: its existence is not revealed."""
    return get_object_or_404(selectors.visible_quotas(request.user), pk=quota_id)


# ---------------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------------


QUOTA_VIEWS = (("list", "List"), ("overview", "Overview"))
# The managed resources besides GPUs (SCHEDULING.md "Managed resources") and their columns' heads.
MANAGED_COLUMNS = (("cpu", "CPU cores"), ("memory_gib", "Memory (GiB)"))


@login_required
def resource_quotas(request: HttpRequest) -> HttpResponse:
    """The tree of what the user may see, as a table (`?view=list`, where `?q=` filters by name
    without JavaScript) or as charts (`?view=overview`, over `&range=1h|24h|7d`, stacking the
    children of `&quota=<id>`)."""
    rows = selectors.quota_tree_rows(user=request.user)
    # Each pool has its own tree (SCHEDULING.md "Pool"): `?pool=NAME` shows one pool's tree alone.
    pool_of = {row["quota"].pk: str(getattr(row["quota"], "pool_name", "")) for row in rows}  # quota_list's join
    pools = sorted(set(pool_of.values()))
    pool = request.GET.get("pool", "")
    if pool in pools:
        rows = [row for row in rows if pool_of[row["quota"].pk] == pool]
    else:
        pool = ""
    view = request.GET.get("view", "list")
    if view not in dict(QUOTA_VIEWS):
        view = "list"
    context: dict[str, Any] = {
        "view": view,
        "views": QUOTA_VIEWS,
        "may_change": _is_platform_admin(request),
        # /quotas/: each row's links are this, its id and the action (scheduling/urls.py).
        "quota_base": reverse("resource-quotas"),
        "pools": pools,
        "pool": pool,
    }
    if view == "overview":
        span = allocation_history.chart_range(request.GET.get("range"))
        asked = quota_in_view.asked_quota(request.GET.get("quota", ""), rows)
        # A quota of another pool than the chosen one is not among `rows`: a 404, as a missing one.
        overview = quota_charts.quota_overview(rows=rows, now=get_clock().now(), span=span, asked=asked, pool=pool)
        context.update(rows=rows, overview=overview, ranges=allocation_history.CHART_RANGES)
        if request.headers.get("HX-Target") == "allocation-section":  # a treemap box, the picker
            return render(request, "scheduling/quotas/allocation.html", context)
    else:
        query = request.GET.get("q", "").strip()
        if query:
            rows = [row for row in rows if query.casefold() in row["quota"].name.casefold()]
        # Running and pending count every workspace's jobs; a member is also told how many of
        # them she may see (issue 11: the counts did not match her Jobs page).
        yours = {} if _is_platform_admin(request) else _visible_live_counts(request, rows)
        live = quota_charts.LIVE_MAX_TOPICS  # rows that follow their topic (a socket takes 250)
        shown = [{**row, "yours": yours.get(row["quota"].pk), "live": at < live} for at, row in enumerate(rows)]
        # A column per managed resource besides GPUs, where any quota shown is in a pool that manages it.
        resources = [(key, label) for key, label in MANAGED_COLUMNS if any(key in row["status"] for row in rows)]
        tree_rows = (
            engines["jinja2"]
            .get_template("scheduling/quotas/tree_rows.html")
            .render(
                {
                    "rows": shown,
                    "parents": {row["quota"].parent_id for row in rows},
                    "may_change": context["may_change"],
                    "quota_base": context["quota_base"],
                    "resources": resources,
                }
            )
        )
        # Jinja2 escaped every value as it rendered (autoescape is on in Django's backend).
        more = live if len(shown) > live else None
        context.update(rows=shown, query=query, tree_rows=mark_safe(tree_rows), live_rows=more, resources=resources)
    return render(request, "scheduling/quotas/resource_quotas.html", context)


def _resource_settings(quota: Quota, status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The quota page's CPU and memory lines: each resource the quota sets or its pool manages."""
    shown = []
    for key, label, unit in (("cpu", "CPU", "cores"), ("memory_gib", "Memory", "GiB")):
        guaranteed, limit = getattr(quota, key), getattr(quota, f"{key}_limit")
        if guaranteed is None and limit is None and key not in status:
            continue
        shown.append({"key": key, "label": label, "unit": unit, "guaranteed": guaranteed, "limit": limit})
        shown[-1]["figures"] = status.get(key)
    return shown


def _visible_live_counts(request: HttpRequest, rows: list[Any]) -> dict[int, dict[str, int]]:
    """Per quota (its subtree, as the status counts), the running and pending jobs the user may see."""
    parent_of = dict(Quota.objects.values_list("pk", "parent_id"))
    counts: dict[int, dict[str, int]] = {row["quota"].pk: {"running": 0, "pending": 0} for row in rows}
    live = restrict(Job.objects.filter(state__in=ACTIVE_STATES), request.user, "view")
    for quota_id, state, number in live.values_list("quota_id", "state").annotate(number=Count("pk")).order_by():
        key = "pending" if state == JobState.PENDING else "running"
        current: int | None = quota_id
        while current is not None:
            if current in counts:
                counts[current][key] += number
            current = parent_of.get(current)
    return counts


QUOTA_TABS = (
    ("overview", "Overview"),
    ("jobs", "Jobs"),
    ("nodes", "Nodes"),
    ("monitoring", "Monitoring"),
    ("audit", "Audit"),
)
JOBS_PER_PAGE = 50


@login_required
def quota_detail(request: HttpRequest, quota_id: int) -> HttpResponse:
    quota = _visible_quota(request, quota_id)
    tab = request.GET.get("tab", "overview")
    if tab not in dict(QUOTA_TABS):
        tab = "overview"
    context: dict[str, Any] = {
        "quota": quota,
        "tab": tab,
        "tabs": QUOTA_TABS,
        "may_change": _is_platform_admin(request),
    }
    if tab == "overview":
        status = selectors.quota_statuses([quota])[quota.pk]
        context.update(
            status=status,
            idle_share=status["fair_share"] - quota.gpus,
            asked=scheduling_selectors.asked_gpus(quota_ids=selectors.subtree_ids(quota=quota)),
            children=list(selectors.visible_quotas(request.user).filter(parent=quota).order_by("id")),
            workspaces=workspace_selectors.bound_workspace_names(quota=quota),
            resources=_resource_settings(quota, status),
        )
    elif tab == "jobs":
        # Its own jobs and its subtree's, live ones only, as far as the user may see them;
        # pending first, by queue position.
        live = Job.objects.filter(quota_id__in=selectors.subtree_ids(quota=quota), state__in=ACTIVE_STATES)
        jobs = restrict(scheduling_selectors.job_list(queryset=live), request.user, "view")
        ordered = scheduling_selectors.with_shown_reason(jobs).order_by(
            "state", "shown_reason_position", "submitted_at", "id"
        )
        page = Paginator(ordered, JOBS_PER_PAGE).get_page(request.GET.get("page"))
        # A waiting job's reason may name the job it waits behind: as this user may see it.
        page.object_list = list(page.object_list)
        mentions.show_reasons_to(request.user, page.object_list)
        context["page"] = page
    elif tab == "nodes":
        context.update(node_views.quota_nodes_context(request, quota))
    elif tab == "monitoring":
        span = allocation_history.chart_range(request.GET.get("range"))
        context.update(
            allocation=quota_charts.quota_monitoring(quota_id=quota.pk, now=get_clock().now(), span=span),
            utilisation=page_figures.quota_utilisation(
                quota_ids=selectors.subtree_ids(quota=quota), now=get_clock().now(), span=span
            ),
            span=span,
            ranges=allocation_history.CHART_RANGES,
        )
    elif _is_platform_admin(request):
        context["records"] = selectors.quota_audit(quota=quota)
    else:
        # The audit log is the platform admins' (as in the API); others are told so.
        context["records"] = None
    partial = getattr(request, "htmx", False)
    template = f"scheduling/quotas/tab_{tab}.html" if partial else "scheduling/quotas/quota.html"
    return render(request, template, context)
