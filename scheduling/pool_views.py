"""A pool's page (platform admins): what it holds, rename it or change its placement, and delete
it once it holds no node and no quota. The Nodes page links each pool's heading here; Add pool is
node_actions.pool_new.

Nothing here previews: a name, a placement or a description moves no GPU and no share (the next
cycle places by the new placement), and an empty pool holds nothing to move.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from quotas import node_forms, selectors, services
from quotas.models import ResourcePool
from quotas.services.pools import pool_delete_blockers
from scheduling.node_views import _admins_only
from utilities.validation import error_messages


def _pool(request: HttpRequest, pool_id: int) -> ResourcePool:
    return get_object_or_404(selectors.visible_pools(request.user), pk=pool_id)


def _holdings(request: HttpRequest, pool: ResourcePool) -> dict[str, Any]:
    """What the page says the pool holds: its nodes and GPUs, its quotas and its roots."""
    quotas = list(
        selectors.visible_quotas(request.user).filter(pool=pool).order_by("id").values_list("name", "parent_id")
    )
    return {
        "capacity": selectors.pool_capacity(pool=pool),
        "quota_count": len(quotas),
        "roots": [name for name, parent in quotas if parent is None],
        "is_default": pool.name == ResourcePool.DEFAULT_NAME,
    }


@_admins_only
def pool_page(request: HttpRequest, pool_id: int) -> HttpResponse:
    """The pool's figures and its Save form: a rename is checked as Add pool checks a name (the
    same rules, unique), and a refusal is shown beside the name."""
    pool = _pool(request, pool_id)
    initial = {"name": pool.name, "placement": pool.placement, "description": pool.description}
    form = node_forms.PoolForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            saved = services.update_pool(actor=request.user, pool=pool, **form.cleaned_data)
        except ValidationError as refused:
            for field, field_messages in error_messages(refused).items():
                for message in field_messages:
                    form.add_error(field if field in form.fields else None, message)
        else:
            renamed = f" (was {pool.name})" if saved.name != pool.name else ""
            messages.success(request, f"Saved the pool {saved.name}{renamed}.")
            return redirect(f"{reverse('nodes-page')}#pool-{saved.pk}")
    # A refused rename shows the stored name in the heading, not the refused one.
    pool.refresh_from_db()
    context = {"pool": pool, "form": form, "blockers": pool_delete_blockers(pool), **_holdings(request, pool)}
    return render(request, "scheduling/nodes/pool_page.html", context)


@_admins_only
def pool_delete(request: HttpRequest, pool_id: int) -> HttpResponse:
    """Delete pool, asked once more: refused, naming its nodes and quotas, while it holds any
    (the service says why; the page shows its sentence and offers no Confirm)."""
    pool = _pool(request, pool_id)
    refusals: list[str] = []
    if request.method == "POST":
        try:
            services.delete_pool(actor=request.user, pool=pool)
        except ValidationError as refused:
            refusals = [message for messages_ in error_messages(refused).values() for message in messages_]
        else:
            messages.success(request, f"Deleted the pool {pool.name}.")
            return redirect("nodes-page")
    else:
        refusals = pool_delete_blockers(pool)
    return render(
        request,
        "scheduling/nodes/pool_delete.html",
        {"pool": pool, "refusals": refusals},
        status=409 if request.method == "POST" and refusals else 200,
    )
