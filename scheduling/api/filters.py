"""Filters of the jobs list (`?state=&kind=&quota=&workspace=&owner=&reason=`)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from quotas.api.filters import StrictFilterSet
from scheduling.engine.types import REASON_CODES
from scheduling.models import Job
from scheduling.pending_reasons import with_shown_reason


class JobFilter(StrictFilterSet):
    quota = django_filters.CharFilter(field_name="quota__name", help_text="The quota's name.")
    workspace = django_filters.CharFilter(field_name="workspace__name", help_text="The workspace's name.")
    owner = django_filters.CharFilter(field_name="owner__username", help_text="The owner's username.")
    reason = django_filters.ChoiceFilter(
        method="by_reason",
        choices=[(code, code) for code in REASON_CODES],
        help_text="A waiting job's reason code; exceeds_cluster: jobs that cannot start as asked (larger than "
        "every node, or than the pool).",
    )

    def by_reason(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        """The code the job shows: its pending reason's, kept in a table of its own (scheduling.pending_reasons)."""
        return with_shown_reason(queryset).filter(shown_reason_code=value)

    class Meta:
        model = Job
        fields = ["name", "state", "kind", "quota", "workspace", "owner", "priority", "preemptible"]
