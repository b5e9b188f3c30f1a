"""The Scheduling Configurations tab as a plain formset: one form per rule."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from workspaces.models import BasicRole, Workspace
from workspaces.services import CapSpec, RuleSpec

CAP_LINE = re.compile(
    r"^\s*(?P<low>\d+)\s*-\s*(?P<high>\d+)"
    r"(?:\s+job\s*=\s*(?P<job>\d+(?:\.\d+)?))?"
    r"(?:\s+user\s*=\s*(?P<user>\d+(?:\.\d+)?))?\s*$"
)


def parse_caps(text: str) -> list[CapSpec]:
    """One cap a line, `PRIORITY_MIN-PRIORITY_MAX job=GPUS user=GPUS` (either amount optional)."""
    caps: list[CapSpec] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = CAP_LINE.match(line)
        if match is None:
            raise forms.ValidationError(f"line {number} ({line.strip()!r}): write it as '7-9 job=10 user=20'")
        caps.append(
            CapSpec(
                priority_min=int(match["low"]),
                priority_max=int(match["high"]),
                max_gpus_per_job=float(match["job"]) if match["job"] else None,
                max_gpus_per_user=float(match["user"]) if match["user"] else None,
            )
        )
    return caps


def format_caps(caps: list[dict[str, Any]]) -> str:
    lines = []
    for cap in caps:
        line = f"{cap['priority_min']}-{cap['priority_max']}"
        if cap["max_gpus_per_job"] is not None:
            line += f" job={cap['max_gpus_per_job']:g}"
        if cap["max_gpus_per_user"] is not None:
            line += f" user={cap['max_gpus_per_user']:g}"
        lines.append(line)
    return "\n".join(lines)


class RuleForm(forms.Form):
    quota = forms.ChoiceField(required=False, help_text="Leave empty to drop the rule.")
    roles = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    non_members = forms.BooleanField(required=False, label="Non-workspace members")
    authorized_users = forms.CharField(required=False, help_text="Usernames, separated by commas.")
    caps = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 28}),
        help_text="One per line: '7-9 job=10 user=20' (priorities 7 to 9: 10 GPUs per job, 20 per user).",
    )

    def __init__(self, *args: Any, workspace: Workspace, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quota_field = self.fields["quota"]
        assert isinstance(quota_field, forms.ChoiceField)
        quota_field.choices = [("", "—"), *((name, name) for name in workspace.quotas.values_list("name", flat=True))]
        roles_field = self.fields["roles"]
        assert isinstance(roles_field, forms.MultipleChoiceField)
        basic = [(role.value, role.label) for role in BasicRole if role != BasicRole.VISITOR]
        custom = [(name, name) for name in workspace.custom_roles.values_list("name", flat=True)]
        roles_field.choices = [*basic, *custom]

    def clean_caps(self) -> list[CapSpec]:
        return parse_caps(self.cleaned_data.get("caps", ""))

    def clean_authorized_users(self) -> list[str]:
        return [name.strip() for name in self.cleaned_data.get("authorized_users", "").split(",") if name.strip()]

    def as_rule(self) -> RuleSpec | None:
        if not self.cleaned_data.get("quota"):
            return None
        return RuleSpec(
            quota=self.cleaned_data["quota"],
            roles=list(self.cleaned_data["roles"]),
            non_members=self.cleaned_data["non_members"],
            authorized_users=self.cleaned_data["authorized_users"],
            caps=self.cleaned_data["caps"],
        )


RuleFormSet = forms.formset_factory(RuleForm, extra=1)


def initial_rules(config: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "quota": rule["quota"],
            "roles": rule["roles"],
            "non_members": rule["non_members"],
            "authorized_users": ", ".join(rule["authorized_users"]),
            "caps": format_caps(rule["caps"]),
        }
        for rule in config
    ]


# The service names a refused value by its path in the request (`rules[0].caps[1].priority_min`),
# which suits the API; the page says it in words, numbered as the rows the person sees.
REFUSAL_PATH = re.compile(r"^rules\[(?P<rule>\d+)\]\.(?P<field>\w+)(?:\[(?P<cap>\d+)\]\.(?P<cap_field>\w+))?$")
FIELD_WORDS = {
    "quota": "quota",
    "roles": "roles",
    "non_members": "non-workspace members",
    "authorized_users": "authorized users",
    "caps": "caps",
    "priority_min": "lowest priority",
    "priority_max": "highest priority",
    "max_gpus_per_job": "GPUs per job",
    "max_gpus_per_user": "GPUs per user",
}


def refusals_in_words(refused: ValidationError, rule_forms: list[RuleForm]) -> list[str]:
    """Sentences for the top of the form, each error also put beside its field in its row.

    `rule_forms` are the rows that became rules, in the order the service numbered them (empty
    rows are dropped before saving, so rule 0 need not be the first row).
    """
    sentences: list[str] = []
    for path, messages in refused.message_dict.items():
        match = REFUSAL_PATH.match(path)
        for message in messages:
            if match is None or int(match["rule"]) >= len(rule_forms):
                named = FIELD_WORDS.get(path, path.replace("_", " ")).capitalize()
                sentences.append(message if path == "__all__" else f"{named}: {message}")
                continue
            form = rule_forms[int(match["rule"])]
            row = int(form.prefix.rsplit("-", 1)[-1]) + 1 if form.prefix else 1
            where = f"Rule {row}, {FIELD_WORDS.get(match['field'], match['field'])}"
            if match["cap"] is not None:
                cap_field = FIELD_WORDS.get(match["cap_field"], match["cap_field"])
                where = f"Rule {row}, cap {int(match['cap']) + 1}, {cap_field}"
            sentences.append(f"{where}: {message}")
            if match["field"] in form.fields:
                form.add_error(match["field"], message)
    return sentences
