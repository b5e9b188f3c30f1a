"""Forms of the Resource Quotas page's actions (the pages are scheduling's, scheduling/quota_views.py,
since they show jobs). They check shape only (a number, within the bounds of quotas/bounds.py); the
tree's rules (room in the parent, in the pool) are the service's, whose refusals the page kit puts
beside the same fields."""

from __future__ import annotations

from typing import Any

from django import forms

from quotas import bounds
from quotas.models import QueuePolicy, Quota, ResourcePool


def _amount_field(label: str, *, maximum: float, required: bool = True, help_text: str = "") -> forms.FloatField:
    """A non-negative amount whose refusals say the bound and the number written."""
    return forms.FloatField(
        label=label,
        required=required,
        min_value=0,
        max_value=maximum,
        help_text=help_text,
        error_messages={
            "required": f"{label} is required.",
            "invalid": f"{label} must be a number, such as 48 or 0.5.",
            "min_value": f"{label} must be at least 0.",
            "max_value": f"{label} must be at most {bounds.readable(maximum)}.",
        },
        widget=forms.NumberInput(attrs={"step": "any", "inputmode": "decimal"}),
    )


class _AmountsForm(forms.Form):
    def _post_clean(self) -> None:
        # The field bounds' messages say the limit; add what was typed so both numbers show.
        for name in list(self.errors):
            if name in self.fields and isinstance(self.fields[name], forms.FloatField):
                messages = self.errors[name]
                raw = self.data.get(self.add_prefix(name))
                if raw not in (None, "") and messages and "got" not in str(messages[0]):
                    messages[0] = f"{str(messages[0]).rstrip('.')}, got {raw}."


# The weight defaults to the guarantee (SCHEDULING.md), so a guarantee of 0 with no weight is
# weight 0: Run:ai's "Lowest". Said where a person sets the guarantee, since 0 is allowed.
NO_GUARANTEE = "0 is allowed: with no guarantee and no weight this quota only gets GPUs that nobody else wants."


# CPU and memory are managed in a pool whose root quotas set them (SCHEDULING.md "Managed resources").
MANAGED_HELP = "Empty: none. Setting it on a root quota makes its pool manage {what}; a child needs its parent's."
LIMIT_HELP = "Empty: no limit. Only in a pool that manages {what}."


def _cpu_memory_guarantees() -> dict[str, forms.FloatField]:
    return {
        "cpu": _amount_field(
            "Guaranteed CPU cores",
            maximum=bounds.QUOTA_CPU_MAX,
            required=False,
            help_text=MANAGED_HELP.format(what="CPU"),
        ),
        "memory_gib": _amount_field(
            "Guaranteed memory (GiB)",
            maximum=bounds.QUOTA_MEMORY_GIB_MAX,
            required=False,
            help_text=MANAGED_HELP.format(what="memory"),
        ),
    }


def _cpu_memory_limits() -> dict[str, forms.FloatField]:
    return {
        "cpu_limit": _amount_field(
            "CPU limit (cores)", maximum=bounds.QUOTA_CPU_MAX, required=False, help_text=LIMIT_HELP.format(what="CPU")
        ),
        "memory_gib_limit": _amount_field(
            "Memory limit (GiB)",
            maximum=bounds.QUOTA_MEMORY_GIB_MAX,
            required=False,
            help_text=LIMIT_HELP.format(what="memory"),
        ),
    }


class QuotaSettingsForm(_AmountsForm):
    """The settings of New quota, New child quota and Edit (Edit leaves the guarantees to Scale)."""

    name = forms.CharField(label="Name", max_length=bounds.NAME_MAX_LENGTH)
    gpus = _amount_field("Guaranteed GPUs", maximum=bounds.QUOTA_GPUS_MAX, help_text=NO_GUARANTEE)
    limit = _amount_field(
        "GPU limit", maximum=bounds.QUOTA_GPUS_MAX, required=False, help_text="Empty: no limit beyond the pool."
    )
    cpu, memory_gib = _cpu_memory_guarantees().values()
    cpu_limit, memory_gib_limit = _cpu_memory_limits().values()
    weight = _amount_field(
        "Over-quota weight",
        maximum=bounds.QUOTA_WEIGHT_MAX,
        required=False,
        help_text="Empty: idle GPUs are lent in proportion to the guarantee.",
    )
    child_preemption = forms.BooleanField(label="Child-level Preemption", required=False)
    same_level_preemption = forms.BooleanField(label="Same-level Preemption", required=False)
    queue_policy = forms.ChoiceField(
        label="Queue policy", choices=QueuePolicy.choices, initial=QueuePolicy.BEST_EFFORT, required=False
    )

    def clean_queue_policy(self) -> str:
        # A form posted without the field (a script, an old page) keeps the model's default.
        return str(self.cleaned_data.get("queue_policy") or QueuePolicy.BEST_EFFORT)


class EditQuotaForm(QuotaSettingsForm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for guarantee in ("gpus", "cpu", "memory_gib"):
            del self.fields[guarantee]


class ScaleForm(_AmountsForm):
    """New guarantees, and the CPU and memory limits beside them, so that both move in one step
    (a guarantee above its limit is refused)."""

    gpus = _amount_field("New guaranteed GPUs", maximum=bounds.QUOTA_GPUS_MAX, help_text=NO_GUARANTEE)
    cpu, memory_gib = _cpu_memory_guarantees().values()
    cpu_limit, memory_gib_limit = _cpu_memory_limits().values()


class TransferForm(_AmountsForm):
    target = forms.ModelChoiceField(
        label="To sibling",
        queryset=Quota.objects.none(),
        empty_label=None,
        error_messages={"invalid_choice": "Choose a sibling of this quota to transfer to."},
    )
    gpus = _amount_field("GPUs to move", maximum=bounds.QUOTA_GPUS_MAX)

    def __init__(self, *args: Any, siblings: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        target = self.fields["target"]
        assert isinstance(target, forms.ModelChoiceField)
        target.queryset = siblings


class DeleteForm(forms.Form):
    """Nothing to fill in: Preview says whether the quota may go, Confirm deletes it."""


class RootQuotaForm(QuotaSettingsForm):
    """New quota (a root): its settings and the pool whose capacity it guarantees from."""

    field_order = ["name", "pool"]
    pool = forms.ModelChoiceField(
        label="Pool",
        queryset=ResourcePool.objects.order_by("name"),
        to_field_name="name",
        required=False,
        empty_label="default",
        help_text="A root guarantees GPUs of this pool's nodes; its children and their jobs stay in it.",
        error_messages={"invalid_choice": "There is no such pool; choose one of the list."},
    )
