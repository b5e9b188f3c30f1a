"""The node agents' heartbeat, answered beside Django's request cycle (AGENT.md, issue 13).

A thousand agents beat every few seconds. Through Django's ASGI handler a beat cost about four
times what the beat itself costs: every middleware built for browsers (sessions, CSRF, messages,
CSP, axes) ran, and under ASGI each `MiddlewareMixin` hook is a thread hop of its own, sixteen
a request, on a thread made for that request. None of them does anything for an agent.

So this route takes `POST /api/v1/agent/heartbeat/` first. It reads the body and hands it, in one
hop to a small pool of long-lived threads, to `scheduling.api.agent_quick.quick_beat`, which answers a
well-formed beat of a known token's own node exactly as AgentHeartbeatView would. Anything else
(another method, a query string, an unknown token, a doubtful body, an Accept the view would
negotiate, a body over Django's size limit, an error) goes on to Django with the same body, so
the view stays the one place that words a refusal and Django the one that answers a failure.
A beat is idempotent (AGENT.md), so a beat that failed here may safely run there again. A beat
that freed devices is answered once the cycle it asked for has placed on its node
(console.agent_holds): held without a thread, then answered anew.

Each beat on its thread is told a request started and finished, as Django tells its own
(`close_old_connections` and the rest run as for any request): with the connection pool, a beat
takes a connection from the pool and gives it back at its end, as a page does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Final

from django.conf import settings
from django.core.signals import request_finished, request_started
from django.http.request import split_domain_port, validate_host

from console.agent_holds import CycleHolds
from scheduling.api.agent_quick import HeldBeat, QuickAnswer, answer_held, quick_beat
from scheduling.events import published_later

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
# Django's and Channels' handlers each type scope, receive and send their own way.
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

BEAT_PATH: Final = "/api/v1/agent/heartbeat/"
# Beats of one process run on this many threads: enough that one beat waiting on a row lock does
# not hold up the rest, few enough to leave the connection pool (DATABASE_POOL_SIZE) to the pages.
BEAT_THREADS: Final = 8
# The least a held beat's second answer is waited for, however late it is (console.agent_holds).
_ANEW_AT_LEAST_SECONDS: Final = 0.5
# What an agent may send as Accept and still get the view's plain compact JSON: anything else
# (an indent, another type) is the view's content negotiation to answer.
_PLAIN_ACCEPT: Final = frozenset({b"", b"*/*", b"application/json"})
_ANSWER_HEADERS: Final = [(b"content-type", b"application/json"), (b"x-content-type-options", b"nosniff")]


class AgentBeatRoute:
    """ASGI: answers the well-formed heartbeats itself and passes everything else to `app`."""

    def __init__(self, app: ASGIApp, *, threads: int = BEAT_THREADS) -> None:
        self.app = app
        self._threads = threads
        self._executor: ThreadPoolExecutor | None = None
        # Of the requests to BEAT_PATH: how many this route answered, and how many it left to Django.
        self.answered = self.passed_on = 0
        self.holds = CycleHolds()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != BEAT_PATH:
            await self.app(scope, receive, send)
            return
        if scope["method"] != "POST" or scope["query_string"]:
            self.passed_on += 1
            await self.app(scope, receive, send)
            return
        authorization = _beat_authorization(scope)
        chunks, more, disconnected = await _read_body(receive, limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        if disconnected:
            return  # nobody is left to answer
        answer = None
        if authorization is not None and not more:
            body = b"".join(chunks)
            loop = asyncio.get_running_loop()
            arrived = loop.time()
            quick = await loop.run_in_executor(self._pool(), _answer_beat, authorization, body)
            # It freed devices: answered once the cycle on its way has placed (console.agent_holds),
            # within a heartbeat of its arrival.
            left = float(settings.AGENT_HEARTBEAT_SECONDS) - (loop.time() - arrived)
            if (
                quick is not None
                and quick.hold_for is not None
                and quick.held is not None
                and left > 0
                and await self.holds.until_placed(quick.hold_for, left)
            ):
                # Anew, if a thread takes it up in time: on a console so busy that it does not,
                # the first answer goes (the starts then come with the follow-up), rather than an
                # answer so late that the agent has given up on it and never sees its starts. The
                # beat is not read again: the first answer's reading of it is (agent_quick.HeldBeat).
                again = loop.run_in_executor(self._pool(), _answer_held, quick.held)
                left = float(settings.AGENT_HEARTBEAT_SECONDS) - (loop.time() - arrived)
                with contextlib.suppress(TimeoutError):
                    quick = await asyncio.wait_for(again, max(left, _ANEW_AT_LEAST_SECONDS)) or quick
            answer = quick.body if quick is not None else None
        if answer is None:
            self.passed_on += 1
            await self.app(scope, _replay(chunks, more, receive), send)
            return
        self.answered += 1
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*_ANSWER_HEADERS, (b"content-length", str(len(answer)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": answer})

    def _pool(self) -> ThreadPoolExecutor:
        # Made at the first beat, in the process that serves it (uvicorn's workers are its children).
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="agent-beat")
        return self._executor


def _beat_authorization(scope: Scope) -> bytes | None:
    """The one Authorization header of a JSON beat that asks for plain JSON; None when Django or
    the view would read the request differently: another content type or charset, two
    Authorization headers, an Accept to negotiate, a Host that ALLOWED_HOSTS refuses, plain HTTP
    where SECURE_SSL_REDIRECT sends it to HTTPS."""
    headers: dict[bytes, list[bytes]] = {}
    for name, value in scope["headers"]:
        headers.setdefault(name, []).append(value)
    authorization = headers.get(b"authorization", [])
    content_type = b";".join(headers.get(b"content-type", [])).strip().lower()
    accept = b",".join(headers.get(b"accept", [])).strip().lower()
    plain_json = content_type in (b"application/json", b"application/json; charset=utf-8")
    if len(authorization) != 1 or not plain_json or accept not in _PLAIN_ACCEPT:
        return None
    if not _allowed_host(headers.get(b"host", [])) or (settings.SECURE_SSL_REDIRECT and not _secure(scope, headers)):
        return None
    return authorization[0]


def _allowed_host(host: list[bytes]) -> bool:
    """As HttpRequest.get_host decides, for the one Host header (X-Forwarded-Host is Django's to read)."""
    if len(host) != 1 or settings.USE_X_FORWARDED_HOST:
        return False
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _port = split_domain_port(host[0].decode("latin-1"))
    return bool(domain) and validate_host(domain, allowed)


def _secure(scope: Scope, headers: dict[bytes, list[bytes]]) -> bool:
    """As HttpRequest.is_secure decides: the scheme, or the proxy's header where one is trusted."""
    if settings.SECURE_PROXY_SSL_HEADER:
        header, secure_value = settings.SECURE_PROXY_SSL_HEADER
        name = header.removeprefix("HTTP_").replace("_", "-").lower().encode("latin-1")
        if name in headers:
            value = b",".join(headers[name]).decode("latin-1").split(",", 1)[0].strip()
            return bool(value == secure_value)
    return bool(scope.get("scheme") == "https")


async def _read_body(receive: Receive, *, limit: int | None) -> tuple[list[bytes], bool, bool]:
    """The body's chunks, whether more is left unread (it passed `limit`), and whether the client left."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return chunks, False, True
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return chunks, False, False
        if limit is not None and size > limit:
            return chunks, True, False


def _replay(chunks: list[bytes], more: bool, receive: Receive) -> Receive:
    """A `receive` that gives Django the chunks already read, then the rest from the client."""
    pending = list(chunks)

    async def replayed() -> Message:
        if pending:
            chunk = pending.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pending) or more}
        return await receive()

    return replayed


def _answer_beat(authorization: bytes, body: bytes) -> QuickAnswer | None:
    return _answered(partial(quick_beat, authorization=authorization, body=body))


def _answer_held(beat: HeldBeat) -> QuickAnswer | None:
    return _answered(partial(answer_held, beat))


def _answered(answer: Callable[[], QuickAnswer | None]) -> QuickAnswer | None:
    request_started.send(sender=AgentBeatRoute, scope=None)
    try:
        # The live changes of the jobs it ends go out with those of the other beats (scheduling.events).
        with published_later():
            return answer()
    except Exception:
        # Django answers it as it answers any failure (and logs it as a request's): the beat is
        # idempotent, so running it again there does no harm.
        logger.warning("a heartbeat failed outside Django's request cycle; Django answers it", exc_info=True)
        return None
    finally:
        request_finished.send(sender=AgentBeatRoute)
