"""Project-level API pieces: the error shape every app shares, and token login.

Permission classes live in `quotas.api.permissions`, the lowest layer, so every app can use them
without importing upwards."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.signals import user_logged_in
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import parsers, permissions, serializers, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.decorators import api_view, permission_classes, schema
from rest_framework.exceptions import NotAuthenticated, NotFound, ParseError
from rest_framework.exceptions import ValidationError as DRFValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from console import services, signin, tokens


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


class TokenRequestSerializer(AuthTokenSerializer):
    """DRF's token sign-in, with the bounds the schema states: Django's username length and a
    password cap far above any real one (hashing a megabyte password is work an attacker chooses)."""

    username = serializers.CharField(label="Username", write_only=True, min_length=1, max_length=150)
    password = serializers.CharField(
        label="Password",
        style={"input_type": "password"},
        trim_whitespace=False,
        write_only=True,
        min_length=1,
        max_length=4096,
    )


class RevokedSerializer(serializers.Serializer[Any]):
    tokens = serializers.IntegerField(read_only=True, help_text="API tokens revoked")
    sessions = serializers.IntegerField(read_only=True, help_text="browser sessions ended")


class TokenSerializer(serializers.Serializer[Any]):
    token = serializers.CharField(read_only=True)
    expires_at = serializers.DateTimeField(read_only=True)


_LOCKED_OUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"non_field_errors": {"type": "array", "items": {"type": "string"}}},
    "required": ["non_field_errors"],
    "example": {"non_field_errors": ["too many failed sign-ins for dave; try again in 5 minutes"]},
}


class ObtainTokenView(ObtainAuthToken):
    """POST {username, password} → {token, expires_at}; the token then goes in `Authorization: Token …`.

    Failed sign-ins are counted per username by django-axes (console.signin); a locked-out username
    is a 429 with one sentence, even with the right password."""

    permission_classes = [permissions.AllowAny]
    # No authentication here: a client still sending its expired token would otherwise get the
    # expiry 401 from the very endpoint that gives it a new one.
    authentication_classes = []
    parser_classes = [parsers.JSONParser, parsers.FormParser]
    serializer_class = TokenRequestSerializer

    @extend_schema(
        request=TokenRequestSerializer,
        responses={
            200: TokenSerializer,
            429: OpenApiResponse(
                response=_LOCKED_OUT_SCHEMA, description="Too many failed sign-ins for this username."
            ),
        },
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        if not serializer.is_valid():
            # Axes flags the request it saw in authenticate(): DRF's, so its middleware misses it.
            if getattr(request, "axes_locked_out", False):
                username = str(serializer.initial_data.get("username", ""))
                return Response({"non_field_errors": [signin.lockout_message(username)]}, status=429)
            raise DRFValidationError(serializer.errors)
        user = serializer.validated_data["user"]
        # A token sign-in is a sign-in: axes forgets the failures (AXES_RESET_ON_SUCCESS), Django
        # records last_login. DRF's view sends nothing, so the counts would never reset.
        user_logged_in.send(sender=user.__class__, request=request, user=user)
        token = services.issue_token(user=user)
        return Response({"token": token.key, "expires_at": tokens.expires_at(token)})


class SignOutEverywhereView(APIView):
    """POST: revoke all of the caller's tokens and sessions (every device signs in again)."""

    @extend_schema(request=None, responses={200: RevokedSerializer})
    def post(self, request: Request) -> Response:
        user = request.user
        if not isinstance(user, AbstractBaseUser):  # IsAuthenticated lets no anonymous user through
            raise NotAuthenticated
        revoked = services.sign_out_everywhere(actor=user, user=user)
        return Response({"tokens": revoked.tokens, "sessions": revoked.sessions})
