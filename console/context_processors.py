"""Template context every page needs: the navigation of the base layout."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse

# (label, url name): pages register here as they arrive; missing ones are skipped.
NAVIGATION = [
    ("Dashboard", "dashboard"),
    ("Resource Quotas", "resource-quotas"),
    ("Workspaces", "workspace-list"),
    ("Jobs", "jobs-page"),
    ("API", "api-docs"),
]
# Pages for platform admins only (others get a 404 there): Nodes after Resource Quotas, and
# the Django admin last (a tool for operators, not a page of the console).
ADMIN_PAGES = [("Nodes", "nodes-page")]
ADMIN_TOOLS = [("Admin", "admin:index")]


def navigation(request: HttpRequest) -> dict[str, Any]:
    items = []
    entries = list(NAVIGATION)
    user = getattr(request, "user", None)
    if user is not None and user.is_superuser:
        after = next((i + 1 for i, (_label, name) in enumerate(entries) if name == "resource-quotas"), len(entries))
        entries[after:after] = ADMIN_PAGES
        entries += ADMIN_TOOLS
    for label, url_name in entries:
        try:
            url = reverse(url_name)
        except NoReverseMatch:
            continue
        items.append({"label": label, "url": url, "active": request.path == url})
    return {"navigation": items}
