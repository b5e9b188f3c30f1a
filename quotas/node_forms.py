"""Forms of the Nodes page's actions. Shape only, within quotas/bounds.py; the inventory's rules
(unique names, the roots' guarantees still covered by fewer GPUs) are the service's, and the page
kit puts its refusals beside the same fields."""

from __future__ import annotations

from typing import Any

from django import forms

from quotas import bounds
from quotas.forms import _amount_field, _AmountsForm
from quotas.models import Node, NodeAgent, NodeExecutor, PlacementPolicy, ResourcePool


def labels_text(labels: dict[str, Any]) -> str:
    """A node's labels as the form shows them: one `name=value` a line."""
    return "\n".join(f"{key}={value}" for key, value in sorted(labels.items()))


class NodeForm(_AmountsForm):
    """Add node and Edit node: what the inventory says of a machine (its state has its own actions)."""

    name = forms.CharField(label="Name", max_length=bounds.NAME_MAX_LENGTH)
    pool = forms.ModelChoiceField(
        label="Pool",
        queryset=ResourcePool.objects.order_by("name"),
        to_field_name="name",
        required=False,
        empty_label="default",
        help_text="Its jobs come from this pool's quotas only. A node moves to another pool only while no job "
        "runs on it.",
        error_messages={"invalid_choice": "There is no such pool; choose one of the list."},
    )
    gpus = forms.IntegerField(
        label="GPUs",
        min_value=0,
        max_value=bounds.NODE_GPUS_MAX,
        error_messages={
            "required": "GPUs is required.",
            "invalid": "GPUs must be a whole number of devices, such as 8.",
            "min_value": "GPUs must be at least 0.",
            "max_value": f"GPUs must be at most {bounds.NODE_GPUS_MAX} (the most a node holds).",
        },
    )
    gpu_model = forms.CharField(
        label="GPU model", max_length=bounds.GPU_MODEL_MAX_LENGTH, required=False, help_text="Such as H100-80GB."
    )
    cpu = _amount_field("CPU cores", maximum=bounds.NODE_CPU_MAX, required=False, help_text="Empty or 0: not tracked.")
    memory_gib = _amount_field(
        "Memory (GiB)", maximum=bounds.NODE_MEMORY_GIB_MAX, required=False, help_text="Empty or 0: not tracked."
    )
    executor = forms.ChoiceField(
        label="Runs jobs with",
        choices=NodeExecutor.choices,
        initial=NodeExecutor.SIMULATED,
        help_text="Node agent: real processes, started by the agent on the host (it needs a token). "
        "Simulated: the console plays the jobs out itself.",
        error_messages={
            "required": "Runs jobs with is required.",
            # Slurm is a choice only for the nodes the Slurm sync made (docs/slurm.md), so the sentence
            # says why it is not among the ones a node may be given by hand.
            "invalid_choice": "Runs jobs with must be Simulated or Node agent, not %(value)s. Slurm nodes "
            "are not added by hand: they come from the Slurm cluster's inventory (SLURM_CONF, docs/slurm.md).",
        },
    )
    labels = forms.CharField(
        label="Labels",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="One name=value a line, such as zone=eu-1.",
    )

    def clean_cpu(self) -> float:
        return float(self.cleaned_data.get("cpu") or 0)

    def clean_memory_gib(self) -> float:
        return float(self.cleaned_data.get("memory_gib") or 0)

    def clean_labels(self) -> dict[str, str]:
        labels: dict[str, str] = {}
        text = str(self.cleaned_data.get("labels") or "")
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            key, equals, value = line.partition("=")
            if not equals or not key.strip():
                raise forms.ValidationError(f"Line {number} must read name=value, got {line.strip()[:40]!r}.")
            labels[key.strip()] = value.strip()
        if len(labels) > bounds.NODE_LABELS_MAX:
            raise forms.ValidationError(f"At most {bounds.NODE_LABELS_MAX} labels, got {len(labels)}.")
        return labels


class StateChangeForm(forms.Form):
    """Nothing to fill in: Preview shows what the next cycle would do, Confirm does it."""


def token_state(agent: NodeAgent | None) -> str:
    """Which token a node has now, as the token form carries it from its Preview to its Confirm."""
    return agent.token_issued_at.isoformat() if agent else "none"


class NodeTokenForm(forms.Form):
    """Create or rotate a node's token. Its one (hidden) field is the token the form was opened
    for: a Confirm sent again (a reload) or after another admin rotated it is refused in words,
    rather than rotating once more the token that was just shown."""

    issued = forms.CharField(widget=forms.HiddenInput, required=False, max_length=64)

    def __init__(self, data: Any = None, *, node: Node, current: str) -> None:
        super().__init__(data, initial={"issued": current})
        self.node = node
        self.current = current

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("issued", "") != self.current:
            raise forms.ValidationError(
                f"The token of {self.node.name} changed since this form was opened, and the token shown then "
                "is not shown again. Close this and open the token action again to issue another."
            )
        return cleaned


class PoolForm(forms.Form):
    """Add pool: a new, empty pool; nodes move into it (Edit node) and root quotas name it (New quota)."""

    name = forms.CharField(label="Name", max_length=bounds.NAME_MAX_LENGTH, help_text="Such as a100 or lingjun.")
    placement = forms.ChoiceField(
        label="Placement",
        choices=PlacementPolicy.choices,
        initial=PlacementPolicy.PACK,
        help_text="Pack fills the fullest node that fits (whole nodes stay free); spread uses the emptiest.",
        error_messages={"invalid_choice": "Placement must be Pack or Spread."},
    )
    description = forms.CharField(
        label="Description",
        required=False,
        max_length=bounds.DESCRIPTION_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Such as the GPU model of its nodes.",
    )
