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
# Only platform admins see these, after the rest (pages for operators, not for teams).
PLATFORM_ADMIN_NAVIGATION = [
    ("Admin", "admin:index"),
]


def navigation(request: HttpRequest) -> dict[str, Any]:
    items = []
    user = getattr(request, "user", None)
    entries = [*NAVIGATION, *(PLATFORM_ADMIN_NAVIGATION if user is not None and user.is_superuser else [])]
    for label, url_name in entries:
        try:
            url = reverse(url_name)
        except NoReverseMatch:
            continue
        items.append({"label": label, "url": url, "active": request.path == url})
    return {"navigation": items}
