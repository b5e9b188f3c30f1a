"""Operator pages in Django's admin. Quota and node edits go through the services, so the rules hold here too."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from quotas import services
from quotas.models import AuditRecord, GpuDevice, Installation, Node, NodeAgent, Quota, ResourcePool
from utilities.admin import ReadOnlyAdmin


class QuotaAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Quota
        fields = list(services.QUOTA_FIELDS)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        request_user = getattr(self, "request_user", None)
        fields: dict[str, Any] = {field: cleaned.get(field) for field in services.QUOTA_FIELDS if field in cleaned}
        if self.instance.pk is None:
            result = services.preview_create_quota(actor=request_user, **fields)
        else:
            changes = {field: value for field, value in fields.items() if field in self.changed_data}
            result = services.preview_update_quota(actor=request_user, quota=self.instance, **changes)
        for field, messages in result["errors"].items():
            for message in messages:
                self.add_error(field if field in self.fields else None, message)
        return cleaned


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = QuotaAdminForm
    list_display = ["name", "parent", "gpus", "cpu", "memory_gib", "limit", "weight", "rank", "child_preemption"]
    list_select_related = ["parent"]
    list_filter = ["queue_policy", "child_preemption", "same_level_preemption"]
    search_fields = ["name"]
    ordering = ["id"]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        form.request_user = request.user  # type: ignore[attr-defined]
        return form

    def save_model(self, request: HttpRequest, obj: Quota, form: Any, change: bool) -> None:
        fields: dict[str, Any] = {
            field: form.cleaned_data[field] for field in services.QUOTA_FIELDS if field in form.cleaned_data
        }
        if not change:
            created = services.create_quota(actor=request.user, **fields)
            obj.pk = created.pk
            return
        changes = {field: value for field, value in fields.items() if field in form.changed_data}
        original = Quota.objects.get(pk=obj.pk)
        services.update_quota(actor=request.user, quota=original, **changes)

    def delete_model(self, request: HttpRequest, obj: Quota) -> None:
        services.delete_quota(actor=request.user, quota=obj)

    def has_delete_permission(self, request: HttpRequest, obj: Quota | None = None) -> bool:
        # Bulk deletion would skip the service's checks; quotas are deleted one at a time.
        return obj is not None and super().has_delete_permission(request, obj)


class GpuDeviceInline(admin.TabularInline):  # type: ignore[type-arg]
    model = GpuDevice
    extra = 0
    can_delete = False
    readonly_fields = ["index", "model"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class NodeAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Node
        fields = list(services.NODE_FIELDS)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        request_user = getattr(self, "request_user", None)
        fields: dict[str, Any] = {field: cleaned.get(field) for field in services.NODE_FIELDS if field in cleaned}
        if self.instance.pk is None:
            result = services.preview_create_node(actor=request_user, **fields)
        else:
            changes = {field: value for field, value in fields.items() if field in self.changed_data}
            result = services.preview_update_node(actor=request_user, node=self.instance, **changes)
        for field, messages in result["errors"].items():
            for message in messages:
                self.add_error(field if field in self.fields else None, message)
        return cleaned


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = NodeAdminForm
    inlines = [GpuDeviceInline]
    list_display = ["name", "pool", "gpus", "cpu", "memory_gib", "gpu_model", "state"]
    list_filter = ["state", "gpu_model", "pool"]
    search_fields = ["name"]
    actions = ["mark_down", "mark_up"]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        form.request_user = request.user  # type: ignore[attr-defined]
        return form

    def save_model(self, request: HttpRequest, obj: Node, form: Any, change: bool) -> None:
        fields: dict[str, Any] = {
            field: form.cleaned_data[field] for field in services.NODE_FIELDS if field in form.cleaned_data
        }
        if not change:
            obj.pk = services.create_node(actor=request.user, **fields).pk
            return
        changes = {field: value for field, value in fields.items() if field in form.changed_data}
        services.update_node(actor=request.user, node=Node.objects.get(pk=obj.pk), **changes)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # Devices follow the node's GPU count (the service keeps them); the inline only shows them.
        form.save_m2m()

    def delete_model(self, request: HttpRequest, obj: Node) -> None:
        services.delete_node(actor=request.user, node=obj)

    def has_delete_permission(self, request: HttpRequest, obj: Node | None = None) -> bool:
        return obj is not None and super().has_delete_permission(request, obj)

    @admin.action(description="Mark selected nodes down")
    def mark_down(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            services.set_node_state(actor=request.user, node=node, state="not_ready")

    @admin.action(description="Mark selected nodes ready")
    def mark_up(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            services.set_node_state(actor=request.user, node=node, state="ready")


@admin.register(ResourcePool)
class ResourcePoolAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["name", "placement", "created_at"]

    def has_delete_permission(self, request: HttpRequest, obj: ResourcePool | None = None) -> bool:
        return False


@admin.register(GpuDevice)
class GpuDeviceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["node", "index", "model"]
    list_select_related = ["node"]
    list_filter = ["model"]
    search_fields = ["node__name"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: GpuDevice | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: GpuDevice | None = None) -> bool:
        return False


@admin.register(AuditRecord)
class AuditRecordAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Read-only: the log is evidence, nobody edits it."""

    list_display = ["at", "actor", "action", "object_type", "object_repr"]
    list_select_related = ["actor"]
    list_filter = ["action", "object_type"]
    search_fields = ["object_repr", "actor__username"]
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditRecord | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditRecord | None = None) -> bool:
        return False


@admin.register(NodeAgent)
class NodeAgentAdmin(ReadOnlyAdmin):
    """Read-only: a token is issued through the API (shown once, stored hashed), never typed here."""

    list_display = ["node", "token_prefix", "token_issued_at", "registered_at", "lost_at", "start_missed_at"]
    list_select_related = ["node"]
    search_fields = ["node__name"]


@admin.register(Installation)
class InstallationAdmin(ReadOnlyAdmin):
    """Read-only: the console's identity is made once and never changed (agents key their state by it)."""

    list_display = ["identity", "created_at"]
