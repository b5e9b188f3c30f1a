"""Filters of the quotas API lists (`?name=&parent=&state=` …)."""

from __future__ import annotations

import django_filters

from quotas.models import AuditRecord, Node, Quota


class QuotaFilter(django_filters.FilterSet):  # type: ignore[misc]
    parent = django_filters.CharFilter(field_name="parent__name", help_text="The parent's name.")
    root = django_filters.BooleanFilter(field_name="parent", lookup_expr="isnull", help_text="Only roots (true).")

    class Meta:
        model = Quota
        fields = ["name", "parent", "root", "queue_policy", "child_preemption", "same_level_preemption", "rank"]


class NodeFilter(django_filters.FilterSet):  # type: ignore[misc]
    class Meta:
        model = Node
        fields = ["name", "state", "gpu_model"]


class AuditRecordFilter(django_filters.FilterSet):  # type: ignore[misc]
    actor = django_filters.CharFilter(field_name="actor__username", help_text="The actor's username.")
    object = django_filters.CharFilter(field_name="object_repr", help_text="The object's name.")

    class Meta:
        model = AuditRecord
        fields = ["action", "object_type", "actor", "object"]
