"""Project-level API pieces: the error shape every app shares, and token login.

Permission classes live in `quotas.api.permissions`, the lowest layer, so every app can use them
without importing upwards."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import permissions, status
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Services raise Django's ValidationError and PermissionDenied; the API answers them as a
    400 naming the fields and a 403 that keeps the service's reason (DRF would replace it)."""
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            detail: Any = {field: [str(m) for m in messages] for field, messages in exc.message_dict.items()}
        else:
            detail = {"non_field_errors": [str(m) for m in exc.messages]}
        return Response(detail, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, DjangoPermissionDenied) and str(exc):
        return Response({"detail": str(exc)}, status=status.HTTP_403_FORBIDDEN)
    return drf_exception_handler(exc, context)


class ObtainTokenView(ObtainAuthToken):
    """POST {username, password} → {token}; the token then goes in `Authorization: Token …`."""

    permission_classes = [permissions.AllowAny]

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().post(request, *args, **kwargs)
