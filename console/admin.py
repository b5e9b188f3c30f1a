"""The admin's user pages, routed through console.services where a change has consequences."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import AbstractUser
from django.forms import ModelForm
from django.http import HttpRequest

from console import services

User = get_user_model()


class ConsoleUserAdmin(UserAdmin):  # type: ignore[type-arg]
    """Django's user admin, except that unticking "active" revokes the user's tokens and sessions
    (services.user_deactivated), as the users API does."""

    def save_model(self, request: HttpRequest, obj: AbstractUser, form: ModelForm[Any], change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and "is_active" in form.changed_data and not obj.is_active:
            services.user_deactivated(actor=request.user, user=obj)


admin.site.unregister(User)
admin.site.register(User, ConsoleUserAdmin)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Rows that only services.py writes: the admin lists, searches and shows them, and changes
    nothing, because a direct row write would skip what the service does around it (the audit
    log, guardian's object permissions, the scheduler's revision and events)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
