"""The page kit: every change a page makes runs as form → Preview → Confirm.

Preview calls the service's `preview_…` function and shows, in numbers, what would move;
Confirm calls the service itself: both run the same change (see quotas/services/preview.py).
One template (`kit/action.html`) and one helper (`run_preview_action`) serve every
action form: as a dialog when htmx is there (the partial is swapped into the page's
`<dialog>`), and as a plain page without JavaScript (the same partial inside the base layout).
Errors from the form or from the service land beside their field.
See docs/console.md, "Adding an action form".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django_htmx.http import HttpResponseClientRedirect

from utilities.validation import error_messages

PREVIEW = "preview"
CONFIRM = "confirm"


class ShareMove(TypedDict):
    """One quota whose guarantee or fair share the change moves."""

    quota: str
    guaranteed_before: float | None
    guaranteed_after: float | None
    fair_share_before: float
    fair_share_after: float


class Reclaimable(TypedDict):
    """GPUs a quota holds beyond its new guarantee: others may take them back, from these jobs."""

    quota: str
    allocated: float
    guaranteed: float
    gpus: float
    jobs: list[str]


class PreviewSummary(TypedDict):
    moves: list[ShareMove]
    reclaimable: list[Reclaimable]
    evictions: list[dict[str, Any]]
    admissions: list[dict[str, Any]]


class PreviewAnswer(TypedDict):
    """What a service's `preview_…` answers (quotas.services.DryRunResult has these keys); the kit
    reads `valid` and `errors` and hands the answer to the action's `summarise`."""

    valid: bool
    errors: dict[str, list[str]]
    preview: Any


# cleaned form data → `{valid, errors, preview}`: a DryRunResult, or the same keys from a service
# of another app (cancelling a job), which may also raise ValidationError instead of answering invalid.
Preview = Callable[[Mapping[str, Any]], Any]
# cleaned form data → the change made for real (what it returns is not read).
Apply = Callable[[Mapping[str, Any]], object]


@dataclass
class PreviewAction:
    """What one action form needs: its words, its form, the service's preview and write, and how to
    read the preview."""

    title: str
    url: str
    done_url: str
    form: forms.Form
    preview: Preview
    apply: Apply
    # Takes the preview's answer (a DryRunResult where the service is the quotas').
    summarise: Callable[[Any], PreviewSummary]
    done_message: Callable[[Mapping[str, Any]], str]
    intro: str = ""
    confirm_label: str = "Confirm"
    # Fields the service names that mean the same as one of the form's (the API's `to` is `target`).
    field_aliases: Mapping[str, str] = field(default_factory=dict)
    # False where no guarantee can move (cancelling a job): the preview then names only evictions
    # and admissions.
    moves_shares: bool = True


def _fingerprint(cleaned: Mapping[str, Any]) -> str:
    """What was previewed, so a Confirm of values that changed since shows a fresh preview instead."""
    text = json.dumps({key: str(value) for key, value in sorted(cleaned.items())})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _attach_errors(action: PreviewAction, errors: Mapping[str, list[str]]) -> None:
    """Put the service's messages beside the field they name; the rest above the form."""
    for name, field_messages in errors.items():
        target = action.field_aliases.get(name, name)
        for message in field_messages:
            action.form.add_error(target if target in action.form.fields else None, message)


def run_preview_action(request: HttpRequest, action: PreviewAction) -> HttpResponse:
    """GET shows the form; POST `step=preview` runs the dry run; POST `step=confirm` performs."""
    summary: PreviewSummary | None = None
    previewed = ""
    if request.method == "POST" and action.form.is_valid():
        cleaned = action.form.cleaned_data
        fingerprint = _fingerprint(cleaned)
        wants_confirm = request.POST.get("step") == CONFIRM and request.POST.get("previewed") == fingerprint
        if wants_confirm:
            try:
                action.apply(cleaned)
            except ValidationError as refused:
                _attach_errors(action, error_messages(refused))
            else:
                messages.success(request, action.done_message(cleaned))
                if getattr(request, "htmx", False):
                    return HttpResponseClientRedirect(action.done_url)
                return HttpResponseRedirect(action.done_url)
        else:
            try:
                result: PreviewAnswer = action.preview(cleaned)
            except ValidationError as refused:
                _attach_errors(action, error_messages(refused))
            else:
                if result["valid"]:
                    summary = action.summarise(result)
                    previewed = fingerprint
                else:
                    _attach_errors(action, result["errors"])
    context = {"action": action, "form": action.form, "summary": summary, "previewed": previewed}
    template = "kit/action.html" if getattr(request, "htmx", False) else "kit/action_page.html"
    # Errors answer 200: htmx swaps only successful answers, and the form with its errors is the answer.
    return render(request, template, context)
