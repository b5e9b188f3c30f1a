"""How the node agent talks to its console: a JSON POST and its JSON answer, on one kept-alive
connection (docs/agent.md, "What the agent needs").

On the standard library's `http.client`, not httpx: an agent makes a request or two every beat
for as long as its host runs, and through httpx each cost about 1.5 ms of CPU more, while
importing httpx made 20 MB of an agent's 32 MB resident (benchmarks/agent_job_cpu.py,
docs/benchmarks-runtime.md, "the agent's side"). What the agent had from httpx is kept: the same
certificate roots (SSL_CERT_FILE, else SSL_CERT_DIR, else certifi's, as httpx chooses them), the
same 10 s timeout, and a proxy: with HTTP_PROXY, HTTPS_PROXY or ALL_PROXY set (any case) the agent
goes through httpx as before, imported only then, so NO_PROXY and the proxies' schemes behave
exactly as they did.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl  # http.client imports it anyway
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:  # imported only behind a proxy
    import httpx

TIMEOUT_SECONDS = 10.0
# The variables httpx reads for a proxy (trust_env); NO_PROXY alone routes nothing through one.
PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "all_proxy"})


class ConsoleUnreachable(Exception):
    """No answer, a refusal (4xx, 5xx) or an answer that is not JSON: the agent says it in one log
    line and tries again at its next beat."""


class ConsoleLink(Protocol):
    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` as JSON to `path` (from the console's root, e.g. /api/v1/agent/heartbeat/)."""
        ...


def open_link(server: str, token: str) -> ConsoleLink:
    """The link to `server` for a node token: the standard library's, or httpx's behind a proxy."""
    if any(name.lower() in PROXY_VARIABLES and value for name, value in os.environ.items()):
        import httpx

        headers = {"Authorization": f"Node {token}"}
        return HttpxLink(httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=TIMEOUT_SECONDS))
    return PlainLink(server, token)


def certificate_roots() -> ssl.SSLContext:
    """The roots httpx trusts (httpx._config.create_ssl_context with trust_env): SSL_CERT_FILE,
    else SSL_CERT_DIR, else certifi's bundle (the system's when certifi is not installed)."""
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


class PlainLink:
    """One HTTP(S) connection to the console, opened at the first request and kept while the
    console keeps it; opened again when it is gone."""

    def __init__(self, server: str, token: str, *, timeout: float = TIMEOUT_SECONDS) -> None:
        self.server = server.rstrip("/")
        parts = urlsplit(self.server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the console's URL must be http(s)://HOST[:PORT][/PATH], not {server!r}")
        self.secure = parts.scheme == "https"
        self.host, self.port, self.root = parts.hostname, parts.port, parts.path.rstrip("/")
        self.timeout = timeout
        self.headers = {
            "Authorization": f"Node {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self.connection: http.client.HTTPConnection | None = None
        self._roots: ssl.SSLContext | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if not self.secure:
            return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        if self._roots is None:
            self._roots = certificate_roots()
        return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._roots)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        payload = json.dumps(body, separators=(",", ":")).encode()
        while True:
            reused = self.connection is not None
            connection = self.connection or self._connect()
            self.connection = None
            try:
                connection.request("POST", self.root + path, body=payload, headers=self.headers)
                response = connection.getresponse()
                content = response.read()
            except (OSError, http.client.HTTPException) as failure:
                connection.close()
                # A kept connection the console closed while idle fails at once, before the
                # request was read: sent again once on a new one. A timeout is not retried.
                if reused and isinstance(failure, http.client.RemoteDisconnected | ConnectionError):
                    continue
                raise ConsoleUnreachable(f"{self.server}{path}: {failure or type(failure).__name__}") from None
            if response.will_close:
                connection.close()
            else:
                self.connection = connection
            if response.status >= 400:
                raise ConsoleUnreachable(f"the console answered {response.status} {response.reason} to {path}")
            answer: dict[str, Any] = json.loads(content)  # not JSON: ValueError, said like a refusal
            return answer

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


class HttpxLink:
    """Through an httpx client: behind a proxy, or one a test hands in (httpx.MockTransport)."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        try:
            answer = self.client.post(path, json=body)
            answer.raise_for_status()
        except httpx.HTTPError as failure:
            raise ConsoleUnreachable(str(failure)) from None
        decoded: dict[str, Any] = answer.json()
        return decoded
