"""The Submit job form and the Jobs page's filters. The form checks shape only (numbers within
quotas/bounds.py); whether this user may use the quota, its caps and what the cluster would do
are the service's answers (`submit_job`), which the page puts beside the same fields."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.db.models import QuerySet

from quotas import bounds
from quotas.models import Quota
from scheduling import job_environment
from scheduling.models import KIND_DEFAULTS, JobKind, JobState
from scheduling.selectors import QuotaChoice
from workspaces.models import Workspace

# The Jobs page's State filter "Cannot start": pending jobs the engine says ask more than the
# cluster has (EXCEEDS_CLUSTER), which no cycle would admit as asked.
CANNOT_START = "cannot_start"

# The name a dry run uses while the person has not named the job yet: the estimate should not
# wait for a name, and the name changes nothing about where the job would go.
ESTIMATE_NAME = "estimate"


def _number_messages(label: str, minimum: float | None, maximum: float | None) -> dict[str, str]:
    messages = {
        "required": f"{label} is required.",
        "invalid": f"{label} must be a number.",
    }
    if minimum is not None:
        messages["min_value"] = f"{label} must be at least {bounds.readable(minimum)}."
    if maximum is not None:
        messages["max_value"] = f"{label} must be at most {bounds.readable(maximum)}."
    return messages


class SubmitJobForm(forms.Form):
    """Every field `submit_job` takes that a person sets. The service has no per-job minimum
    runtime (a quota's `min_runtime_seconds` protects jobs instead), so the form offers none
    rather than accept a value that would be dropped."""

    workspace = forms.ModelChoiceField(
        label="Workspace",
        queryset=Workspace.objects.none(),
        empty_label="Choose a workspace",
        error_messages={"invalid_choice": "Choose one of the workspaces listed.", "required": "Choose a workspace."},
    )
    quota = forms.ModelChoiceField(
        label="Quota",
        queryset=Quota.objects.none(),
        empty_label=None,
        error_messages={
            "invalid_choice": "Choose one of the quotas listed for this workspace.",
            "required": "No quota of this workspace is yours to use.",
        },
    )
    name = forms.CharField(label="Job name", max_length=bounds.JOB_NAME_MAX_LENGTH, required=False)
    kind = forms.ChoiceField(label="Kind", choices=JobKind.choices, initial=JobKind.TRAINING)
    gpus = forms.DecimalField(
        label="GPUs per replica",
        min_value=0.001,
        max_value=bounds.JOB_GPUS_MAX,
        decimal_places=bounds.JOB_GPU_DECIMALS,
        initial=1,
        help_text="Below 1: a share of one GPU, to 3 decimals (0.5, 0.125).",
        error_messages={
            **_number_messages("GPUs per replica", 0.001, bounds.JOB_GPUS_MAX),
            "max_decimal_places": f"GPUs per replica has at most {bounds.JOB_GPU_DECIMALS} decimals (0.001 is "
            "the finest share).",
        },
        widget=forms.NumberInput(attrs={"step": "any", "inputmode": "decimal"}),
    )
    replicas = forms.IntegerField(
        label="Replicas",
        min_value=1,
        max_value=bounds.JOB_REPLICAS_MAX,
        initial=1,
        error_messages=_number_messages("Replicas", 1, bounds.JOB_REPLICAS_MAX),
    )
    priority = forms.IntegerField(
        label="Priority",
        min_value=1,
        max_value=9,
        initial=KIND_DEFAULTS[JobKind.TRAINING][0],
        help_text="1 (lowest) to 9. The kind sets a default: training 3, notebook 5, inference 7.",
        error_messages=_number_messages("Priority", 1, 9),
    )
    preemptible = forms.BooleanField(
        label="Preemptible (may be evicted for others, and may borrow idle GPUs beyond the guarantee)",
        required=False,
        initial=KIND_DEFAULTS[JobKind.TRAINING][1],
    )
    min_replicas = forms.IntegerField(
        label="Elastic: at least this many replicas",
        required=False,
        min_value=1,
        max_value=bounds.JOB_REPLICAS_MAX,
        help_text="Empty: not elastic. The most is Replicas; it starts with this many and grows.",
        error_messages=_number_messages("Elastic minimum", 1, bounds.JOB_REPLICAS_MAX),
    )
    grace_seconds = forms.FloatField(
        label="Grace seconds when evicted",
        min_value=0,
        max_value=bounds.GRACE_SECONDS_MAX,
        initial=0,
        required=False,
        error_messages=_number_messages("Grace seconds", 0, bounds.GRACE_SECONDS_MAX),
    )
    duration = forms.FloatField(
        label="Runs for (seconds)",
        min_value=0,
        max_value=bounds.JOB_DURATION_MAX,
        required=False,
        help_text="Empty: runs until it ends by itself or is cancelled.",
        error_messages=_number_messages("Run time", 0, bounds.JOB_DURATION_MAX),
    )
    command = forms.CharField(
        label="Command",
        required=False,
        max_length=bounds.COMMAND_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    environment = forms.CharField(
        label="Environment",
        required=False,
        strip=False,
        # Each line NAME=value: the most lines of the longest names and values, and their breaks.
        max_length=bounds.JOB_ENV_VARIABLES_MAX
        * (bounds.JOB_ENV_NAME_MAX_LENGTH + bounds.JOB_ENV_VALUE_MAX_LENGTH + 2),
        help_text=f"One NAME=value a line, at most {bounds.JOB_ENV_VARIABLES_MAX}; set in every replica's process. "
        "Anyone who may see the job sees them: no secrets.",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "autocapitalize": "off"}),
    )
    image = forms.CharField(
        label="Container image",
        required=False,
        max_length=bounds.JOB_IMAGE_MAX_LENGTH,
        help_text="For executors that run containers (registry/name:tag); the node agent runs the command "
        "on the host and ignores it.",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocapitalize": "off"}),
    )

    def __init__(
        self,
        *args: Any,
        workspaces: QuerySet[Workspace],
        quota_choices: list[QuotaChoice],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        workspace_field = self.fields["workspace"]
        assert isinstance(workspace_field, forms.ModelChoiceField)
        workspace_field.queryset = workspaces
        quota_field = self.fields["quota"]
        assert isinstance(quota_field, forms.ModelChoiceField)
        usable = [choice.quota.pk for choice in quota_choices if choice.usable]
        quota_field.queryset = Quota.objects.filter(pk__in=usable).order_by("name")
        # Each pool has its own nodes (SCHEDULING.md "Pool"): the job runs on its quota's pool only.
        pools = [f"{choice.quota.name} in {choice.quota.pool.name}" for choice in quota_choices if choice.usable]
        if pools:
            quota_field.help_text = f"Runs on its quota's pool: {', '.join(pools)}."
        # The kind's presets, for static/console/jobs.js to fill in when the kind changes.
        self.fields["kind"].widget.attrs["data-presets"] = json.dumps(
            {
                kind: {"priority": priority, "preemptible": preemptible}
                for kind, (priority, preemptible) in KIND_DEFAULTS.items()
            }
        )

    def clean_environment(self) -> dict[str, str]:
        """The box's lines as NAME: value; the service judges the names and sizes (its sentences)."""
        environment, errors = job_environment.parse_assignments(self.cleaned_data.get("environment", "").splitlines())
        if errors:
            raise forms.ValidationError([error[:1].upper() + error[1:] + "." for error in errors])
        return environment

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        replicas, minimum = cleaned.get("replicas"), cleaned.get("min_replicas")
        if replicas is not None and minimum is not None and minimum > replicas:
            self.add_error("min_replicas", f"At least {minimum} replicas is more than Replicas ({replicas}).")
        return cleaned

    def submission(self) -> dict[str, Any]:
        """The cleaned values as `submit_job` takes them."""
        data = self.cleaned_data
        return {
            "workspace": data["workspace"],
            "quota": data["quota"],
            "name": data.get("name") or "",
            "kind": data["kind"],
            "gpus": float(data["gpus"]),
            "replicas": data["replicas"],
            "min_replicas": data.get("min_replicas"),
            "priority": data["priority"],
            "preemptible": bool(data.get("preemptible")),
            "grace_seconds": data.get("grace_seconds") or 0.0,
            "duration": data.get("duration"),
            "command": data.get("command") or "",
            "environment": data.get("environment") or {},
            "image": (data.get("image") or "").strip(),
        }


class JobFilterForm(forms.Form):
    """The Jobs page's filters; they travel in the URL so a filtered list can be shared."""

    workspace = forms.ModelChoiceField(
        label="Workspace", queryset=Workspace.objects.none(), required=False, empty_label="all"
    )
    quota = forms.ModelChoiceField(label="Quota", queryset=Quota.objects.none(), required=False, empty_label="all")
    state = forms.ChoiceField(
        label="State",
        choices=[("", "all"), *JobState.choices, (CANNOT_START, "Cannot start")],
        required=False,
    )
    kind = forms.ChoiceField(label="Kind", choices=[("", "all"), *JobKind.choices], required=False)
    user = forms.CharField(label="User", required=False, max_length=150)

    def __init__(self, *args: Any, workspaces: QuerySet[Workspace], quotas: QuerySet[Quota], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, queryset in (("workspace", workspaces), ("quota", quotas)):
            field = self.fields[name]
            assert isinstance(field, forms.ModelChoiceField)
            field.queryset = queryset
        # console.js submits these on change (no inline handler under the Content-Security-Policy).
        for name in ("workspace", "quota", "state", "kind"):
            self.fields[name].widget.attrs["data-autosubmit"] = ""


class CancelForm(forms.Form):
    """Nothing to fill in: Preview says what the freed GPUs would admit, Confirm cancels."""
