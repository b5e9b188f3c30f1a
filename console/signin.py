"""Sign-in throttling: the limits django-axes reads, and the one sentence a locked-out user sees.

Axes counts failed sign-ins per username (settings: CONSOLE_SIGNIN_FAILURE_LIMIT failures lock the
username for CONSOLE_SIGNIN_LOCKOUT_MINUTES). The token endpoint answers a lockout itself
(console.api.ObtainTokenView: DRF wraps the request, so axes' middleware never sees the flag);
pages are answered here, through AXES_LOCKOUT_CALLABLE, instead of axes' bare default page.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


def failure_limit(request: HttpRequest | None = None, credentials: dict[str, Any] | None = None) -> int:
    return int(settings.CONSOLE_SIGNIN_FAILURE_LIMIT)


def lockout_duration(request: HttpRequest | None = None) -> timedelta:
    return timedelta(minutes=settings.CONSOLE_SIGNIN_LOCKOUT_MINUTES)


def lockout_message(username: str) -> str:
    """One sentence, with the username and the wait (each failure while locked restarts the wait,
    so the full lockout is what is left right after it)."""
    minutes = int(settings.CONSOLE_SIGNIN_LOCKOUT_MINUTES)
    unit = "minute" if minutes == 1 else "minutes"
    return f"too many failed sign-ins for {username}; try again in {minutes} {unit}"


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict[str, Any] | None = None
) -> HttpResponse:
    """Axes' lockout answer: the API's 400 shape with a 429, or the login page with the sentence."""
    username = str((credentials or {}).get("username") or request.POST.get("username", ""))
    message = lockout_message(username)
    if request.path.startswith("/api/"):
        return JsonResponse({"non_field_errors": [message]}, status=429)
    form = AuthenticationForm(request, initial={"username": username})
    context = {"form": form, "lockout_message": message, "next": request.POST.get("next", "")}
    return render(request, "registration/login.html", context, status=429)
