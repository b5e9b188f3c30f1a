"""The API's side of the permission choke point (workspaces.permissions): a viewset mixin whose
lists and lookups go through `restrict`, and the object permission that names why an action is
refused. Apart from workspaces.permissions so that what only needs `restrict` and the other
checks (the scheduler, `manage.py simulate`) does not import rest_framework."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from rest_framework import exceptions, permissions
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from workspaces.permissions import can, denial_reason, restrict


class RestrictedObjectPermission(permissions.BasePermission):
    """403 with the reason for a visible object whose required action the user may not perform."""

    message = "You may not do this."

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        required = required_action(view, request)
        if required == "view" or can(request.user, required, obj):
            return True
        self.message = denial_reason(request.user, required, obj)
        return False


def required_action(view: APIView, request: Request) -> str:
    """The restrict() action a viewset action needs: `action_permissions`, else view/manage by method."""
    mapping: dict[str, str] = getattr(view, "action_permissions", {})
    viewset_action = getattr(view, "action", None)
    if viewset_action in mapping:
        return mapping[viewset_action]
    return "view" if request.method in permissions.SAFE_METHODS else "manage"


class RestrictedViewSetMixin(GenericAPIView):  # type: ignore[type-arg]
    """Put first in a viewset's bases: lists and lookups go through `restrict` (a foreign row is a
    404), and an action the role forbids on a visible row is a 403 naming the reason.

    `action_permissions` maps viewset actions to restrict() actions (default: reads "view",
    writes "manage").
    """

    action_permissions: dict[str, str] = {}

    def get_queryset(self) -> QuerySet[Any]:
        return restrict(super().get_queryset(), self.request.user, "view")

    def get_permissions(self) -> list[Any]:
        return [*super().get_permissions(), RestrictedObjectPermission()]

    def handle_exception(self, exc: Exception) -> Response:
        # DRF drops the message of Django's PermissionDenied; services put the reason there.
        if isinstance(exc, PermissionDenied) and str(exc):
            exc = exceptions.PermissionDenied(str(exc))
        return super().handle_exception(exc)
