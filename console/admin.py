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
