"""Content-Security-Policy with the websocket of the request's own origin.

`connect-src 'self'` does not match ws:/wss: URLs in every browser (CSP Level 3 says it should;
Safari and older Chromium do not), and a bare `ws:`/`wss:` would allow a socket to any host. So
each response names its own host: ws://host for plain HTTP, wss://host behind TLS. The host comes
from `request.get_host()`, which Django has checked against ALLOWED_HOSTS.
"""

from __future__ import annotations

from csp.middleware import CSPMiddleware, PolicyParts
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest
from django.http.response import HttpResponseBase


def websocket_origin(request: HttpRequest) -> str | None:
    try:
        host = request.get_host()
    except DisallowedHost:
        return None  # Django answers 400 for this request anyway
    return f"{'wss' if request.is_secure() else 'ws'}://{host}"


class ConsoleCSPMiddleware(CSPMiddleware):
    def get_policy_parts(
        self, request: HttpRequest, response: HttpResponseBase, report_only: bool = False
    ) -> PolicyParts:
        parts = super().get_policy_parts(request, response, report_only)
        origin = websocket_origin(request)
        if origin is not None and not report_only:
            update = dict(parts.update or {})
            update["connect-src"] = [*update.get("connect-src", []), origin]
            parts.update = update
        return parts
