"""Pages of the scheduling app: Submit job with its live estimate, the jobs a user may see, one
job with its history, cancel (through the page kit's Preview and Confirm).

A job or workspace the user may not see is a 404; an action they see but may not take is a 403
with the reason (the services raise PermissionDenied with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from quotas import bounds
from quotas.models import Quota
from quotas.services import DryRunResult, error_messages
from scheduling import estimates, mentions, selectors, services
from scheduling.engine.types import EXCEEDS_CLUSTER
from scheduling.estimates import Estimate
from scheduling.forms import CANNOT_START, ESTIMATE_NAME, CancelForm, JobFilterForm, SubmitJobForm
from scheduling.models import Job, JobState
from utilities.pagekit import PreviewAction, PreviewSummary, run_preview_action
from workspaces.models import Workspace
from workspaces.permissions import (
    can,
    denial_reason,
    restrict,
    submission_caps,
    submittable_workspaces,
)

JOBS_PER_PAGE = 50
# Workspace topics the Jobs list follows at most: with a page's job topics, well inside a socket's
# LIVE_MAX_SUBSCRIPTIONS (250).
WATCHED_WORKSPACES = 100
NO_WORKSPACE = (
    "You may not submit jobs: you are not a member of a workspace, and no workspace's Scheduling "
    "Configurations authorize you."
)


# ---------------------------------------------------------------------------------------------
# Submit job
# ---------------------------------------------------------------------------------------------


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


def _pk(raw: Any) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def _form_workspaces(request: HttpRequest) -> QuerySet[Workspace]:
    """Workspaces the user may pick: those where submitting is possible at all, and those where
    they are members (a visitor sees why no quota is theirs rather than no workspace)."""
    return restrict(Workspace.objects.all(), request.user, "submit").order_by("name")


def _chosen_workspace(request: HttpRequest, data: Mapping[str, Any], workspaces: QuerySet[Workspace]) -> Workspace:
    """The workspace asked for (a foreign one is a 404), else the first where the user may submit."""
    raw = data.get("workspace")
    if raw not in (None, ""):
        pk = _pk(raw)
        if pk is None:
            raise Http404("No such workspace.")
        return get_object_or_404(workspaces, pk=pk)
    first: Workspace | None = submittable_workspaces(request.user).order_by("name").first() or workspaces.first()
    if first is None:
        raise PermissionDenied(NO_WORKSPACE)
    return first


def _check_posted_quota(request: HttpRequest, data: Mapping[str, Any]) -> None:
    """A quota the user may not even see is a 404, as everywhere; a visible one the service judges."""
    raw = data.get("quota")
    if raw in (None, ""):
        return
    pk = _pk(raw)
    if pk is None or not restrict(Quota.objects.filter(pk=pk), request.user, "view").exists():
        raise Http404("No such quota.")


def _build_form(request: HttpRequest, data: Mapping[str, Any] | None, initial: dict[str, Any]) -> dict[str, Any]:
    workspaces = _form_workspaces(request)
    if not workspaces.exists():
        raise PermissionDenied(NO_WORKSPACE)
    workspace = _chosen_workspace(request, data if data is not None else initial, workspaces)
    if data is not None:
        _check_posted_quota(request, data)
    choices = selectors.submission_quota_choices(user=request.user, workspace=workspace)
    form = SubmitJobForm(
        data, initial={**initial, "workspace": workspace.pk}, workspaces=workspaces, quota_choices=choices
    )
    if data is not None:
        # The posted quota is judged by the service (its refusal names the role and the quota),
        # so every bound quota validates; the list offers only the usable ones.
        quota_field = form.fields["quota"]
        assert isinstance(quota_field, forms.ModelChoiceField)
        quota_field.queryset = Quota.objects.filter(bindings__workspace=workspace)
        quota_field.widget.choices = [(c.quota.pk, c.quota.name) for c in choices if c.usable]
    return {"form": form, "workspace": workspace, "choices": choices, "usable": [c for c in choices if c.usable]}


def _caps(
    request: HttpRequest, workspace: Workspace, quota: Quota | None, priority: int | None
) -> dict[str, Any] | None:
    """The user's caps on this quota at this priority and what is left of them."""
    if quota is None or priority is None or not 1 <= priority <= 9:
        return None
    caps = submission_caps(user=request.user, workspace=workspace, quota=quota, priority=priority)
    in_use = selectors.user_gpus_in_use(user_id=int(request.user.pk or 0), workspace_id=workspace.pk, quota_id=quota.pk)
    return {
        "quota": quota.name,
        "priority": priority,
        "per_job": caps.per_job,
        "per_user": caps.per_user,
        "in_use": in_use,
        "left": None if caps.per_user is None else max(0.0, caps.per_user - in_use),
    }


def _estimate(request: HttpRequest, form: SubmitJobForm) -> Estimate:
    """The dry-run submit, in words; a form that does not yet make a job says what is missing."""
    if not form.is_valid():
        first = next(iter(form.errors.items()), None)
        if first is None:
            return Estimate("incomplete", "Fill in the form to see what would happen.")
        name, errors = first
        label = form.fields[name].label if name in form.fields else ""
        return Estimate("incomplete", f"{label}: {errors[0]}" if label else str(errors[0]), field_name=name)
    submission = form.submission()
    if not submission["name"].strip():
        submission["name"] = ESTIMATE_NAME
    try:
        preview = services.preview_submit_job(actor=request.user, **submission)
    except ValidationError as refused:
        field_name, texts = next(iter(error_messages(refused).items()))
        return estimates.refused(texts[0], field_name)
    except PermissionDenied as refused:
        return estimates.refused(str(refused), "quota")
    return estimates.from_preview(preview)


def _as_posted(form: SubmitJobForm, usable: list[selectors.QuotaChoice]) -> dict[str, Any]:
    """An unbound form's initial values as the browser would post them (the select shows the
    first usable quota; an unticked box is left out), so the page opens with an estimate."""
    values = {name: form[name].value() for name in form.fields}
    if values.get("quota") in (None, "") and usable:
        values["quota"] = usable[0].quota.pk
    return {name: "on" if value is True else value for name, value in values.items() if value not in (None, False)}


def _estimate_context(request: HttpRequest, built: dict[str, Any]) -> dict[str, Any]:
    shown: SubmitJobForm = built["form"]
    # A form of its own: the page's may carry a refused submit's errors (a missing name), and
    # the estimate still says what the cluster would do with the rest.
    form = SubmitJobForm(
        shown.data if shown.is_bound else _as_posted(shown, built["usable"]),
        workspaces=shown.fields["workspace"].queryset,  # type: ignore[attr-defined]
        quota_choices=built["choices"],
    )
    if shown.is_bound:
        quota_field = form.fields["quota"]
        assert isinstance(quota_field, forms.ModelChoiceField)
        quota_field.queryset = shown.fields["quota"].queryset  # type: ignore[attr-defined]
    estimate = _estimate(request, form)
    data = form.cleaned_data if hasattr(form, "cleaned_data") else {}
    return {"estimate": estimate, "caps": _caps(request, built["workspace"], data.get("quota"), data.get("priority"))}


def _initial_from_job(request: HttpRequest) -> dict[str, Any]:
    """ "Submit again": the form filled from a job the user may see (a foreign one is a 404)."""
    pk = _pk(request.GET.get("from"))
    if pk is None:
        return {"workspace": request.GET.get("workspace")} if request.GET.get("workspace") else {}
    job = get_object_or_404(restrict(Job.objects.all(), request.user, "view"), pk=pk)
    return {
        "workspace": job.workspace_id,
        "quota": job.quota_id,
        "name": f"{job.name}-again",
        "kind": job.kind,
        "gpus": job.gpus,
        "replicas": job.replicas,
        "min_replicas": job.min_replicas,
        "priority": job.priority,
        "preemptible": job.preemptible,
        "grace_seconds": job.grace_seconds,
        "duration": job.duration,
        "command": job.command,
        # By name: PostgreSQL's jsonb keeps no order of its own.
        "environment": "\n".join(f"{name}={value}" for name, value in sorted(job.environment.items())),
        "image": job.image,
    }


def _render_submit(request: HttpRequest, built: dict[str, Any], status: int = 200) -> HttpResponse:
    context = {**built, **_estimate_context(request, built), "quotas_for": built["workspace"].pk}
    return render(request, "scheduling/job_submit.html", context, status=status)


@login_required
def job_submit_page(request: HttpRequest) -> HttpResponse:
    """GET shows the form (filled from a job with `?from=`); POST submits, or with
    `step=estimate` (the button browsers without JavaScript get) only estimates."""
    if request.method != "POST":
        return _render_submit(request, _build_form(request, None, _initial_from_job(request)))
    built = _build_form(request, request.POST, {})
    form: SubmitJobForm = built["form"]
    if request.POST.get("step") == "estimate" or not form.is_valid():
        return _render_submit(request, built)
    try:
        job = services.submit_job(actor=request.user, **form.submission())
    except ValidationError as refused:
        for name, texts in error_messages(refused).items():
            for text in texts:
                form.add_error(name if name in form.fields else None, _sentence(text))
        return _render_submit(request, built)
    except PermissionDenied as refused:
        # A forbidden action is a 403; the page still says why, beside the quota.
        form.add_error("quota", _sentence(str(refused)) + ".")
        return _render_submit(request, built, status=403)
    assert isinstance(job, Job)
    messages.success(
        request, f"Submitted {job.name}: {job.replicas} × {bounds.readable(job.gpus)} GPUs to {job.quota.name}."
    )
    return redirect("job-page", pk=job.pk)


@login_required
@require_POST
def job_estimate(request: HttpRequest) -> HttpResponse:
    """The live estimate's htmx answer. A new workspace also brings its quota list (out of band)."""
    built = _build_form(request, request.POST, {})
    refresh = str(built["workspace"].pk) != request.POST.get("quotas_for", "")
    if refresh and request.POST.get("quota") not in {str(choice.quota.pk) for choice in built["usable"]}:
        # The quota chosen belonged to the workspace before: estimate with the new one's first.
        data = request.POST.copy()
        data["quota"] = str(built["usable"][0].quota.pk) if built["usable"] else ""
        built = _build_form(request, data, {})
    context = {**built, **_estimate_context(request, built), "refresh_quotas": refresh}
    context["quotas_for"] = built["workspace"].pk
    return render(request, "scheduling/partials/estimate_answer.html", context)


# ---------------------------------------------------------------------------------------------
# Jobs and Job
# ---------------------------------------------------------------------------------------------


@login_required
def job_list_page(request: HttpRequest) -> HttpResponse:
    """The user's visible jobs, newest first, filtered by what the URL says; pending ones say why they wait."""
    workspaces = restrict(Workspace.objects.all(), request.user, "view").order_by("name")
    quotas = restrict(Quota.objects.all(), request.user, "view").order_by("name")
    filters = JobFilterForm(request.GET or None, workspaces=workspaces, quotas=quotas)
    jobs = restrict(Job.objects.all(), request.user, "view")
    if filters.is_bound and filters.is_valid():
        chosen = filters.cleaned_data
        if chosen.get("workspace"):
            jobs = jobs.filter(workspace=chosen["workspace"])
        if chosen.get("quota"):
            jobs = jobs.filter(quota=chosen["quota"])
        if chosen.get("state") == CANNOT_START:
            jobs = selectors.with_shown_reason(jobs).filter(state=JobState.PENDING, shown_reason_code=EXCEEDS_CLUSTER)
        elif chosen.get("state"):
            jobs = jobs.filter(state=chosen["state"])
        if chosen.get("kind"):
            jobs = jobs.filter(kind=chosen["kind"])
        if chosen.get("user"):
            jobs = jobs.filter(owner__username=chosen["user"].strip())
    ordered = selectors.job_page_list(queryset=jobs).order_by("-submitted_at", "-id")
    page = Paginator(ordered, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    mentions.show_reasons_to(request.user, page.object_list)
    kept = {key: value for key, value in request.GET.items() if key != "page" and value}
    chosen_workspace = filters.cleaned_data.get("workspace") if filters.is_bound and filters.is_valid() else None
    followed = (
        [chosen_workspace.pk]
        if chosen_workspace
        else list(workspaces.values_list("pk", flat=True)[:WATCHED_WORKSPACES])
    )
    context = {
        "page": page,
        "filters": filters,
        "kept": urlencode(kept),
        # A job submitted or changed in these workspaces refreshes the rows while the socket is
        # live (its timed poll is skipped then), so a new job shows without a reload (docs/live.md).
        "workspace_topics": " ".join(f"workspace:{pk}" for pk in followed),
        "may_submit": submittable_workspaces(request.user).exists(),
    }
    template = "scheduling/partials/job_rows.html" if request.GET.get("part") == "rows" else "scheduling/job_list.html"
    return render(request, template, context)


@login_required
def job_detail_page(request: HttpRequest, pk: int) -> HttpResponse:
    job: Job = get_object_or_404(restrict(selectors.job_list(), request.user, "view"), pk=pk)
    mentions.show_reasons_to(request.user, [job])
    context = {"job": job, "may_cancel": job.is_active and can(request.user, "manage", job)}
    context["events"] = mentions.job_history(request.user, job)
    if request.GET.get("part") == "live":
        # The block read again (every 2 s, or on a live change): state, reason and placement, and
        # the History out of band, which moves with them (an admission, an eviction).
        return render(request, "scheduling/partials/job_live.html", {**context, "history_out_of_band": True})
    context.update(
        may_submit_again=submittable_workspaces(request.user).filter(pk=job.workspace_id).exists(),
    )
    return render(request, "scheduling/job_detail.html", context)


def _cancel_summary(result: DryRunResult) -> PreviewSummary:
    preview: Any = result["preview"] or {}
    return PreviewSummary(
        moves=[],
        reclaimable=[],
        evictions=[_named(entry) for entry in preview.get("evict", [])],
        admissions=[_named(entry) for entry in preview.get("admit", [])],
    )


def _named(entry: dict[str, Any]) -> dict[str, Any]:
    """A preview entry as the page kit prints it (`job`, `beneficiary`): a job the user may not see
    (the service left its name out) is a job of its workspace, with its quota and GPUs beside."""
    named = {**entry}
    if not entry.get("visible", True):
        named["job"] = f"a job of {entry['workspace']}"
    beneficiary = entry.get("beneficiary_job")
    if beneficiary is not None and not beneficiary["visible"]:
        named["beneficiary"] = beneficiary["description"]
    return named


@login_required
def job_cancel_page(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel through Preview (what the next cycle would admit into the freed GPUs) and Confirm."""
    job: Job = get_object_or_404(restrict(Job.objects.select_related("workspace"), request.user, "view"), pk=pk)
    if not can(request.user, "manage", job):
        raise PermissionDenied(denial_reason(request.user, "manage", job))

    held = (
        f"It holds {bounds.readable(job.allocated_gpus)} GPUs; they are free at once."
        if job.allocated_gpus
        else ("It holds no GPUs yet; it leaves the queue.")
    )
    action = PreviewAction(
        title=f"Cancel {job.name}",
        intro=f"{held} The preview shows what the next cycle would then admit.",
        url=reverse("job-cancel-page", args=[job.pk]),
        done_url=reverse("job-page", args=[job.pk]),
        form=CancelForm(request.POST or None),
        # A job no longer live is refused with ValidationError; the page kit shows it on the form.
        preview=lambda _cleaned: services.preview_cancel_job(actor=request.user, job=job).as_dict(),
        apply=lambda _cleaned: services.cancel_job(actor=request.user, job=job),
        summarise=_cancel_summary,
        done_message=lambda _cleaned: f"Job {job.name} cancelled; its GPUs are free.",
        confirm_label="Confirm: cancel job",
        moves_shares=False,
    )
    return run_preview_action(request, action)
