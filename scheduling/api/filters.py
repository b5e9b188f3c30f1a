"""Filters of the jobs list (`?state=&kind=&quota=&workspace=&owner=&reason=`)."""

from __future__ import annotations

import django_filters

from quotas.api.filters import StrictFilterSet
from scheduling.engine.types import REASON_CODES
from scheduling.models import Job


class JobFilter(StrictFilterSet):
    quota = django_filters.CharFilter(field_name="quota__name", help_text="The quota's name.")
    workspace = django_filters.CharFilter(field_name="workspace__name", help_text="The workspace's name.")
    owner = django_filters.CharFilter(field_name="owner__username", help_text="The owner's username.")
    reason = django_filters.ChoiceFilter(
        field_name="reason_code",
        choices=[(code, code) for code in REASON_CODES],
        help_text="A waiting job's reason code; exceeds_cluster: jobs that cannot start as asked (larger than "
        "every node, or than the pool).",
    )

    class Meta:
        model = Job
        fields = ["name", "state", "kind", "quota", "workspace", "owner", "priority", "preemptible"]
