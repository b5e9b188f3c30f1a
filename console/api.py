"""Project-level API pieces: the error shape every app shares, and token login.

Permission classes live in `quotas.api.permissions`, the lowest layer, so every app can use them
without importing upwards."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import parsers, permissions, status
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.decorators import api_view, permission_classes, schema
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.exceptions import ValidationError as DRFValidationError
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
    if isinstance(exc, DRFValidationError):
        flat: dict[str, list[str]] = {}
        _flatten(exc.detail, "", flat)
        return Response(flat, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, ParseError):
        # A body that is not JSON is refused in the one 400 shape, not DRF's {"detail"}.
        return Response({"non_field_errors": [str(exc.detail)]}, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)


@api_view(["GET", "POST", "PUT", "PATCH", "DELETE"])
@permission_classes([permissions.AllowAny])
@schema(None)
def not_found(request: Request, unmatched: str = "") -> Response:
    """Any /api/ address that names nothing: a JSON 404 like the API's own, never Django's page."""
    raise NotFound(f"There is no API endpoint at /{unmatched}." if unmatched else None)


def _flatten(detail: Any, path: str, flat: dict[str, list[str]]) -> None:
    """Nested serializers' errors as the services name them: `rules[0].caps[1].priority_max`,
    so a client reads one shape, {field path: [sentences]}, whichever layer refused."""
    if isinstance(detail, dict):
        for key, inner in detail.items():
            # A list serializer keys its items' errors by position.
            if isinstance(key, int):
                inner_path = f"{path}[{key}]"
            elif key == "non_field_errors" and path:
                inner_path = path  # a nested list's own error belongs to the list's field
            else:
                inner_path = f"{path}.{key}" if path else str(key)
            _flatten(inner, inner_path, flat)
    elif isinstance(detail, list) and all(isinstance(item, str) for item in detail):
        flat.setdefault(path or "non_field_errors", []).extend(str(item) for item in detail)
    elif isinstance(detail, list):
        for index, inner in enumerate(detail):
            if inner:
                _flatten(inner, f"{path}[{index}]", flat)
    else:
        flat.setdefault(path or "non_field_errors", []).append(str(detail))


class ObtainTokenView(ObtainAuthToken):
    """POST {username, password} → {token}; the token then goes in `Authorization: Token …`."""

    permission_classes = [permissions.AllowAny]
    parser_classes = [parsers.JSONParser, parsers.FormParser]

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().post(request, *args, **kwargs)
