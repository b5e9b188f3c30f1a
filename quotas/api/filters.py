"""Filters of the quotas API lists (`?name=&parent=&state=` …)."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.db import models
from drf_spectacular.utils import extend_schema_field

from quotas.models import AuditRecord, Node, Quota, ResourcePool


# A query string has no booleans: the schema names the two strings the filter takes.
@extend_schema_field({"type": "string", "enum": ["true", "false"]})
class StrictBooleanFilter(django_filters.BooleanFilter):  # type: ignore[misc]
    """`true` or `false`, as the schema says; django-filter's own reads `null` or `maybe` as
    "no filter" and answers the whole list, hiding the client's mistake."""

    field_class = forms.TypedChoiceField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("choices", [("true", "true"), ("false", "false")])
        kwargs.setdefault("coerce", lambda value: value == "true")
        kwargs.setdefault("empty_value", None)
        super().__init__(*args, **kwargs)


class IntegerFilter(django_filters.NumberFilter):  # type: ignore[misc]
    """A whole number, as the schema says (django-filter's NumberFilter takes 0.5)."""

    field_class = forms.IntegerField


class StrictFilterSet(django_filters.FilterSet):  # type: ignore[misc]
    """The base of every API filter: values the schema does not allow are a 400, not ignored."""

    FILTER_DEFAULTS = {
        **django_filters.FilterSet.FILTER_DEFAULTS,
        models.BooleanField: {"filter_class": StrictBooleanFilter},
        models.IntegerField: {"filter_class": IntegerFilter},
        models.PositiveIntegerField: {"filter_class": IntegerFilter},
        models.PositiveSmallIntegerField: {"filter_class": IntegerFilter},
        models.SmallIntegerField: {"filter_class": IntegerFilter},
        models.BigIntegerField: {"filter_class": IntegerFilter},
    }

    def is_valid(self) -> bool:
        # django-filter reads `?state=` as "no filter"; for a choice, a number or a boolean the
        # empty string is outside the schema, so it is the client's mistake to name.
        errors = self.form.errors
        for name, query_filter in self.filters.items():
            if self.data.get(name) == "" and type(query_filter) is not django_filters.CharFilter:
                self.form.add_error(name, f"{name} must not be empty; leave it out to list everything.")
        return bool(self.is_bound and not errors)


class QuotaFilter(StrictFilterSet):
    parent = django_filters.CharFilter(field_name="parent__name", help_text="The parent's name.")
    root = StrictBooleanFilter(field_name="parent", lookup_expr="isnull", help_text="Only roots (true).")
    pool = django_filters.CharFilter(field_name="pool__name", help_text="The pool's name.")

    class Meta:
        model = Quota
        fields = [
            "name",
            "pool",
            "parent",
            "root",
            "queue_policy",
            "child_preemption",
            "same_level_preemption",
            "rank",
        ]


class NodeFilter(StrictFilterSet):
    pool = django_filters.CharFilter(field_name="pool__name", help_text="The pool's name.")

    class Meta:
        model = Node
        fields = ["name", "pool", "state", "gpu_model"]


class PoolFilter(StrictFilterSet):
    class Meta:
        model = ResourcePool
        fields = ["name", "placement"]


class AuditRecordFilter(StrictFilterSet):
    actor = django_filters.CharFilter(field_name="actor__username", help_text="The actor's username.")
    object = django_filters.CharFilter(field_name="object_repr", help_text="The object's name.")

    class Meta:
        model = AuditRecord
        fields = ["action", "object_type", "actor", "object"]
