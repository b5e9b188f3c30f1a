"""Who may call the API: platform admins (Django superusers) run the cluster.

Shared by every app's viewsets; it lives in the lowest app so that nothing imports upwards.
"""

from __future__ import annotations

from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.views import APIView


class IsPlatformAdmin(permissions.BasePermission):
    """Platform admins are Django superusers: they run the whole cluster."""

    message = "Only platform admins may do this."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.is_superuser)


class PlatformAdminWritesOthersRead(permissions.BasePermission):
    """Signed-in users read; only platform admins write."""

    message = "Only platform admins may change this."

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in permissions.SAFE_METHODS or bool(request.user.is_superuser)


class PlatformAdminWritesVisibleReads(permissions.BasePermission):
    """Signed-in users read what their queryset shows; only platform admins write.

    A write on one object is let through to the object lookup first, so that an object the
    user may not see answers 404 (its existence is not revealed) and a visible one 403.
    """

    message = "Only platform admins may change this."

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        if request.method in permissions.SAFE_METHODS or request.user.is_superuser:
            return True
        lookup = getattr(view, "lookup_url_kwarg", None) or getattr(view, "lookup_field", "pk")
        return lookup in getattr(view, "kwargs", {})

    def has_object_permission(self, request: Request, view: APIView, obj: object) -> bool:
        return request.method in permissions.SAFE_METHODS or bool(request.user.is_superuser)
