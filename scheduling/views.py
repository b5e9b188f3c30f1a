"""Pages of the scheduling app: the jobs a user may see, one job with its history, cancel.

A job the user may not see is a 404; cancelling one they see but may not manage is a 403
with the reason (the service raises PermissionDenied)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from scheduling import selectors, services
from scheduling.models import Job, JobState
from workspaces.permissions import can, restrict

JOBS_PER_PAGE = 200


@login_required
def job_list_page(request: HttpRequest) -> HttpResponse:
    """The user's visible jobs, newest first, optionally of one state; pending ones say why they wait."""
    state = request.GET.get("state", "")
    jobs = restrict(selectors.job_list(), request.user, "view").order_by("-submitted_at", "-id")
    if state in JobState.values:
        jobs = jobs.filter(state=state)
    context = {"jobs": jobs[:JOBS_PER_PAGE], "states": JobState.choices, "state": state, "limit": JOBS_PER_PAGE}
    return render(request, "scheduling/job_list.html", context)


@login_required
def job_detail_page(request: HttpRequest, pk: int) -> HttpResponse:
    job: Job = get_object_or_404(restrict(selectors.job_list(), request.user, "view"), pk=pk)
    context = {
        "job": job,
        "events": selectors.job_events(job=job),
        "may_cancel": job.is_active and can(request.user, "manage", job),
    }
    return render(request, "scheduling/job_detail.html", context)


@login_required
@require_POST
def job_cancel_page(request: HttpRequest, pk: int) -> HttpResponse:
    job: Job = get_object_or_404(restrict(Job.objects.all(), request.user, "view"), pk=pk)
    try:
        services.cancel_job(actor=request.user, job=job)
    except ValidationError as refused:
        messages.error(request, " ".join(text for texts in refused.message_dict.values() for text in texts))
    else:
        messages.success(request, f"Job {job.name} cancelled; its GPUs are free.")
    return redirect("job-page", pk=job.pk)
