"""Workspaces in Django's admin: read-only (utilities.admin.ReadOnlyAdmin says why).

Members, roles, rules and bindings change on the workspace pages and through the API, where
workspaces/services.py keeps guardian's object permissions in step with memberships, checks
rules against the bound quotas and records each change in the audit log. The admin is where an
operator looks them up across workspaces.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from utilities.admin import ReadOnlyAdmin, ReadOnlyInline
from workspaces.models import (
    Cap,
    CustomRole,
    Membership,
    QuotaBinding,
    SchedulingRule,
    Workspace,
    WorkspaceUserPermission,
)


class QuotaBindingInline(ReadOnlyInline):
    model = QuotaBinding
    fields = ["quota", "created_at"]
    readonly_fields = ["quota", "created_at"]


class MembershipInline(ReadOnlyInline):
    model = Membership
    fields = ["user", "role", "created_at"]
    readonly_fields = ["user", "role", "created_at"]


@admin.register(Workspace)
class WorkspaceAdmin(ReadOnlyAdmin):
    list_display = ["name", "description", "member_count", "created_at"]
    search_fields = ["name", "description"]
    list_filter = ["quotas"]
    inlines = [QuotaBindingInline, MembershipInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workspace]:
        workspaces: QuerySet[Workspace] = super().get_queryset(request)
        return workspaces.annotate(members=Count("memberships"))

    @admin.display(description="members", ordering="members")
    def member_count(self, workspace: Workspace) -> int:
        return int(getattr(workspace, "members", 0))


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ["user", "workspace", "role", "created_at"]
    list_select_related = ["user", "workspace"]
    list_filter = ["role", "workspace"]
    search_fields = ["user__username", "workspace__name", "role"]


@admin.register(CustomRole)
class CustomRoleAdmin(ReadOnlyAdmin):
    list_display = ["name", "workspace", "permissions", "created_at"]
    list_select_related = ["workspace"]
    list_filter = ["workspace"]
    search_fields = ["name", "workspace__name"]


class CapInline(ReadOnlyInline):
    model = Cap
    fields = ["priority_min", "priority_max", "max_gpus_per_job", "max_gpus_per_user"]
    readonly_fields = ["priority_min", "priority_max", "max_gpus_per_job", "max_gpus_per_user"]


@admin.register(SchedulingRule)
class SchedulingRuleAdmin(ReadOnlyAdmin):
    list_display = ["workspace", "quota", "position", "roles", "non_members"]
    list_select_related = ["workspace", "quota"]
    list_filter = ["non_members", "workspace", "quota"]
    search_fields = ["workspace__name", "quota__name", "authorized_users__username"]
    inlines = [CapInline]


@admin.register(Cap)
class CapAdmin(ReadOnlyAdmin):
    list_display = ["rule", "priority_min", "priority_max", "max_gpus_per_job", "max_gpus_per_user"]
    list_select_related = ["rule__workspace", "rule__quota"]
    list_filter = ["rule__workspace"]
    search_fields = ["rule__workspace__name", "rule__quota__name"]


@admin.register(QuotaBinding)
class QuotaBindingAdmin(ReadOnlyAdmin):
    list_display = ["workspace", "quota", "created_at"]
    list_select_related = ["workspace", "quota"]
    list_filter = ["quota"]
    search_fields = ["workspace__name", "quota__name"]


@admin.register(WorkspaceUserPermission)
class WorkspaceUserPermissionAdmin(ReadOnlyAdmin):
    """Guardian's rows, derived from memberships by the services: shown to answer "why may she?"."""

    list_display = ["user", "permission", "content_object"]
    list_select_related = ["user", "permission", "content_object"]
    list_filter = ["permission"]
    search_fields = ["user__username", "content_object__name"]
