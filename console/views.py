"""Pages of the console itself: the dashboard, /healthz and sign-out-everywhere."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from console import health, selectors, services
from workspaces.permissions import submittable_workspaces


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    report = health.check()
    healthy = all(state == "ok" for state in report.values())
    body = {"status": "ok" if healthy else "unhealthy", **report}
    if not healthy:
        body["missing"] = ", ".join(part for part, state in report.items() if state != "ok")
    return JsonResponse(body, status=200 if healthy else 503)


def favicon(request: HttpRequest) -> HttpResponse:
    """Pages link the SVG icon; this answers clients that ask for /favicon.ico anyway (the admin,
    the API docs, feed readers), which would otherwise fill the log with 404s."""
    return redirect(static("console/favicon.svg"), permanent=True)


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """Numbers per role: the cluster for platform admins, their own jobs and quotas for the rest.
    Live (docs/live.md): the quotas' cells follow their topics; the cluster's figures and the
    member's jobs are read again (`?part=cluster`, `?part=my-jobs`) when their topics change."""
    user = request.user
    if not isinstance(user, AbstractBaseUser):  # login_required lets no anonymous user through
        raise PermissionDenied
    part = request.GET.get("part")
    live_topics = selectors.dashboard_topics(user)
    context: dict[str, object]
    if user.is_superuser:
        context = {"cluster": selectors.cluster_figures(), "live_topics": live_topics}
        if part == "cluster":
            return render(request, "console/dashboard_cluster.html", context)
    else:
        if part == "my-jobs":
            by_state = selectors.member_jobs_by_state(user)
            mine = {"jobs_by_state": by_state, "jobs_total": sum(count for _label, count in by_state)}
            return render(request, "console/dashboard_my_jobs.html", {"mine": mine, "live_topics": live_topics})
        context = {"mine": selectors.member_figures(user), "live_topics": live_topics}
    # Submit job for anyone whose roles let them submit somewhere (the Jobs page asks the same).
    context["may_submit"] = submittable_workspaces(user).exists()
    return render(request, "console/dashboard.html", context)


@require_POST
@login_required
def sign_out_everywhere(request: HttpRequest) -> HttpResponse:
    """The user menu's "Sign out everywhere": every token and session of the user, this one too."""
    user = request.user
    if not isinstance(user, AbstractBaseUser):  # login_required lets no anonymous user through
        raise PermissionDenied
    revoked = services.sign_out_everywhere(actor=user, user=user)
    logout(request)
    messages.success(
        request,
        f"Signed out everywhere: {revoked.sessions} session(s) ended and {revoked.tokens} API token(s) revoked.",
    )
    return redirect("login")
