"""Pages of the console itself: the dashboard and /healthz."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from console import health


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    report = health.check()
    healthy = all(state == "ok" for state in report.values())
    body = {"status": "ok" if healthy else "unhealthy", **report}
    if not healthy:
        body["missing"] = ", ".join(part for part, state in report.items() if state != "ok")
    return JsonResponse(body, status=200 if healthy else 503)


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "console/dashboard.html")
