"""The Scheduling Configurations tab as a plain formset: one form per rule."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError

from quotas.models import Quota
from workspaces.models import (
    JOB_MANAGE_ALL,
    JOB_SUBMIT,
    ROLE_PERMISSIONS,
    WORKSPACE_MANAGE,
    BasicRole,
    Workspace,
)
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


# The usable-roles select offers PAI's "Non-Workspace Members" beside the roles; the service
# keeps it as the rule's `non_members` flag.
NON_MEMBERS = "__non_members__"
NON_MEMBERS_LABEL = "Non-Workspace Members"


def open_roles(workspace: Workspace) -> list[str]:
    """The roles that may use a bound quota without rules: every role that may submit."""
    basic = [role.value for role in BasicRole if JOB_SUBMIT in ROLE_PERMISSIONS[role]]
    custom = [
        name for name, granted in workspace.custom_roles.values_list("name", "permissions") if JOB_SUBMIT in granted
    ]
    return [*basic, *custom]


class RuleForm(forms.Form):
    """One row of PAI's Resource Usage table: a quota, who may use it, and the caps."""

    quota = forms.ChoiceField(label="Quota", required=False, help_text="Leave empty to drop the row.")
    roles = forms.MultipleChoiceField(label="Usable roles", required=False, widget=forms.SelectMultiple())
    authorized_users = forms.CharField(
        label="Authorized users", required=False, help_text="Usernames of non-members, separated by commas."
    )
    caps = forms.CharField(
        label="Caps by priority range",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 22}),
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
        roles_field.choices = [
            ("Basic roles", basic),
            *([("Custom roles", custom)] if custom else []),
            ("Others", [(NON_MEMBERS, NON_MEMBERS_LABEL)]),
        ]
        # Tall enough to show every group and option without scrolling inside the control.
        roles_field.widget.attrs["size"] = len(basic) + len(custom) + 1 + (3 if custom else 2)

    def clean_caps(self) -> list[CapSpec]:
        return parse_caps(self.cleaned_data.get("caps", ""))

    def clean_authorized_users(self) -> list[str]:
        return [name.strip() for name in self.cleaned_data.get("authorized_users", "").split(",") if name.strip()]

    def as_rule(self) -> RuleSpec | None:
        if not self.cleaned_data.get("quota") or self.cleaned_data.get("DELETE"):
            return None
        chosen = list(self.cleaned_data["roles"])
        return RuleSpec(
            quota=self.cleaned_data["quota"],
            roles=[role for role in chosen if role != NON_MEMBERS],
            non_members=NON_MEMBERS in chosen,
            authorized_users=self.cleaned_data["authorized_users"],
            caps=self.cleaned_data["caps"],
        )


RuleFormSet = forms.formset_factory(RuleForm, extra=0, can_delete=True)


def initial_rules(config: list[dict[str, Any]], workspace: Workspace) -> list[dict[str, Any]]:
    """One row per rule, then one per bound quota without rules, showing who may use it now
    (every role that may submit); `rules_to_save` leaves such a row rule-less if it is unchanged."""
    rows = [
        {
            "quota": rule["quota"],
            "roles": [*rule["roles"], *([NON_MEMBERS] if rule["non_members"] else [])],
            "authorized_users": ", ".join(rule["authorized_users"]),
            "caps": format_caps(rule["caps"]),
        }
        for rule in config
    ]
    with_rules = {rule["quota"] for rule in config}
    defaults = open_roles(workspace)
    for name in workspace.quotas.order_by("name").values_list("name", flat=True):
        if name not in with_rules:
            rows.append({"quota": name, "roles": defaults, "authorized_users": "", "caps": ""})
    return rows


def rules_to_save(
    rule_forms: list[RuleForm], workspace: Workspace, config: list[dict[str, Any]]
) -> list[tuple[RuleForm, RuleSpec]]:
    """The rows as rules, except a row left as shown for a quota that had no rule: saving the
    table must not turn "open to every member who may submit" into a rule that a new custom
    role would then be missing from."""
    with_rules = {rule["quota"] for rule in config}
    defaults = sorted(open_roles(workspace))
    rules: list[tuple[RuleForm, RuleSpec]] = []
    for form in rule_forms:
        rule = form.as_rule()
        if rule is None:
            continue
        unchanged_default = (
            rule["quota"] not in with_rules
            and sorted(rule["roles"]) == defaults
            and not rule["non_members"]
            and not rule["authorized_users"]
            and not rule["caps"]
        )
        if not unchanged_default:
            rules.append((form, rule))
    return rules


# The service names a refused value by its path in the request (`rules[0].caps[1].priority_min`),
# which suits the API; the page says it in words, numbered as the rows the person sees.
REFUSAL_PATH = re.compile(r"^rules\[(?P<rule>\d+)\]\.(?P<field>\w+)(?:\[(?P<cap>\d+)\]\.(?P<cap_field>\w+))?$")
FIELD_WORDS = {
    "quota": "quota",
    "roles": "usable roles",
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


# --- Members tab and Quotas tab ----------------------------------------------------------------

CAPABILITY_WORDS = {
    JOB_SUBMIT: "Submit jobs",
    JOB_MANAGE_ALL: "Manage every job of the workspace",
    WORKSPACE_MANAGE: "Manage the workspace (members, roles, rules)",
}


def role_choices(workspace: Workspace) -> list[tuple[str, str]]:
    """Basic roles first, then the workspace's custom roles, as the role selects offer them."""
    custom = [(name, f"{name} (custom)") for name in workspace.custom_roles.values_list("name", flat=True)]
    return [*BasicRole.choices, *custom]


class AddMemberForm(forms.Form):
    username = forms.CharField(label="Username", max_length=150)
    role = forms.ChoiceField(label="Role")

    def __init__(self, *args: Any, workspace: Workspace, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workspace = workspace
        role_field = self.fields["role"]
        assert isinstance(role_field, forms.ChoiceField)
        role_field.choices = role_choices(workspace)
        role_field.initial = BasicRole.DEVELOPER

    def clean_username(self) -> AbstractBaseUser:
        name = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=name).first()
        if user is None:
            raise forms.ValidationError(f"No user is called {name!r}; they sign in once or an admin creates them.")
        return user


class ChangeRoleForm(forms.Form):
    role = forms.ChoiceField(label="Role")

    def __init__(self, *args: Any, workspace: Workspace, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        role_field = self.fields["role"]
        assert isinstance(role_field, forms.ChoiceField)
        role_field.choices = role_choices(workspace)


class CustomRoleForm(forms.Form):
    name = forms.CharField(label="Role name", max_length=100)
    based_on = forms.ChoiceField(
        label="Start from basic role",
        required=False,
        help_text="Its permissions are granted, plus any ticked below.",
    )
    permissions = forms.MultipleChoiceField(
        label="Permissions",
        required=False,
        choices=list(CAPABILITY_WORDS.items()),
        widget=forms.CheckboxSelectMultiple,
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        based_on = self.fields["based_on"]
        assert isinstance(based_on, forms.ChoiceField)
        based_on.choices = [("", "— none —"), *BasicRole.choices]

    def granted(self) -> list[str]:
        """The basic role's permissions and the ticked ones, in the capabilities' order."""
        chosen = set(self.cleaned_data.get("permissions", []))
        chosen |= set(ROLE_PERMISSIONS.get(self.cleaned_data.get("based_on") or "", frozenset()))
        return [capability for capability in CAPABILITY_WORDS if capability in chosen]


class BindQuotaForm(forms.Form):
    quota = forms.ModelChoiceField(
        label="Quota to bind",
        queryset=Quota.objects.none(),
        empty_label=None,
        error_messages={"invalid_choice": "Choose a quota that is not bound to this workspace yet."},
    )

    def __init__(self, *args: Any, workspace: Workspace, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        quota_field = self.fields["quota"]
        assert isinstance(quota_field, forms.ModelChoiceField)
        quota_field.queryset = Quota.objects.exclude(bindings__workspace=workspace).order_by("name")
