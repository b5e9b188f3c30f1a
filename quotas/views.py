"""Pages of the quotas app: the Resource Quotas page (the tree with its live figures)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from quotas import selectors


@login_required
def resource_quotas(request: HttpRequest) -> HttpResponse:
    """Guaranteed, fair share, allocated and pending per quota, as a tree of what the user may see."""
    return render(request, "quotas/resource_quotas.html", {"rows": selectors.quota_tree_rows(user=request.user)})
