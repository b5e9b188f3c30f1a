"""`/ws/live/`: the socket a page subscribes to topics on (docs/live.md). Thin: permission checks
are live.selectors (the same `restrict()` as the pages), the changes come from scheduling.live.

Client → server: `{"subscribe": ["job:12", "cluster"]}`, `{"unsubscribe": [...]}`.
Server → client: `{"type": "subscription", "subscribed": [...], "refused": [...]}`,
`{"type": "change", "topic": "job:12", "change": {...}, "committed_at": 1764085000.123}` (the
newest commit merged in, epoch seconds), `{"type": "dropped", "topics": [...]}`,
`{"type": "error", "message": "..."}`. Close codes: 4401 not signed in (or no longer),
4404 unknown path, 1009 message too big, 4429 too many messages.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from typing import Any, Final

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer
from django.conf import settings

from live import selectors
from scheduling.live import topic_group
from workspaces.access import user_group

CLOSE_UNAUTHENTICATED: Final = 4401
CLOSE_NOT_FOUND: Final = 4404
CLOSE_TOO_BIG: Final = 1009
CLOSE_TOO_MANY: Final = 4429
REFUSED: Final = "no such topic, or not yours to see"

logger = logging.getLogger(__name__)


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def _client(scope: dict[str, Any]) -> str:
    client = scope.get("client") or ("?", 0)
    return str(client[0])


class MessageBudget:
    """A token bucket: `burst` messages at once, then `rate` per second; a flood is cut short."""

    def __init__(self, *, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.updated = burst, time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def merge_change(earlier: dict[str, Any] | None, later: dict[str, Any]) -> dict[str, Any]:
    """Coalesce two changes of a topic: later values win; nested maps (a workspace's jobs) merge."""
    if earlier is None:
        return dict(later)
    merged = dict(earlier)
    for key, value in later.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def coalescing_clock(topic: str) -> str:
    """The window a topic's changes are coalesced in. Every `quota:<id>` shares one: a GPU that
    moves from one quota to another changes both in one commit, and with a window each, one
    figure could reach a page up to a window before the other (a stacked chart would briefly
    count the GPU twice). Any other topic has its own."""
    return "quota" if topic.startswith("quota:") else topic


class LiveConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """One browser tab's socket: its topics, its coalescing clock, its bounds."""

    user_id: int
    session_key: str | None

    async def connect(self) -> None:
        user = self.scope.get("user")
        await self.accept()  # accepted first so that the close code reaches the client
        if user is None or not user.is_authenticated:
            logger.info("live socket from %s closed: not signed in", _client(self.scope))
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        session = self.scope.get("session")
        self.user_id = int(user.pk)
        self.session_key = getattr(session, "session_key", None)
        self.topics: set[str] = set()
        self.last_sent: dict[str, float] = {}
        self.pending: dict[str, dict[str, Any]] = {}
        self.pending_stamps: dict[str, float] = {}
        self.flushes: dict[str, asyncio.Task[None]] = {}
        self.budget = MessageBudget(rate=_setting("LIVE_MESSAGE_RATE", 5), burst=_setting("LIVE_MESSAGE_BURST", 20))
        self.closed = False
        await self.channel_layer.group_add(user_group(self.user_id), self.channel_name)
        _rechecks().add(self)

    async def disconnect(self, code: int) -> None:
        if not hasattr(self, "user_id"):
            return
        self.closed = True
        _rechecks().discard(self)
        later = getattr(self, "later_recheck", None)
        if later is not None:
            later.cancel()
        for task in self.flushes.values():
            task.cancel()
        try:
            await self.channel_layer.group_discard(user_group(self.user_id), self.channel_name)
            for topic in self.topics:
                await self.channel_layer.group_discard(topic_group(topic), self.channel_name)
        except Exception as error:  # noqa: BLE001 (whatever Redis raises: the socket is gone either way)
            # A mass disconnect (a server stopping with hundreds of sockets) outruns the Redis
            # connection pool; the memberships left behind expire with the layer's group_expiry.
            logger.warning("live socket of user %s: could not leave its groups: %s", self.user_id, error)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not hasattr(self, "user_id"):
            return
        size = len(text_data.encode()) if text_data is not None else len(bytes_data or b"")
        if size > _setting("LIVE_MAX_MESSAGE_BYTES", 16384):
            logger.warning("live socket of user %s closed: a message of %d bytes", self.user_id, size)
            await self.close(code=CLOSE_TOO_BIG)
            return
        if not self.budget.take():
            logger.warning("live socket of user %s closed: too many messages", self.user_id)
            await self.close(code=CLOSE_TOO_MANY)
            return
        try:
            message = json.loads(text_data if text_data is not None else (bytes_data or b""))
        except ValueError:
            await self.send_json({"type": "error", "message": 'send JSON: {"subscribe": ["job:12"]}'})
            return
        if not isinstance(message, dict):
            await self.send_json({"type": "error", "message": 'send an object: {"subscribe": ["job:12"]}'})
            return
        if "unsubscribe" in message:
            await self._unsubscribe(message["unsubscribe"])
        if "subscribe" in message:
            await self._subscribe(message["subscribe"])

    async def _subscribe(self, requested: Any) -> None:
        if not isinstance(requested, list):
            await self.send_json({"type": "error", "message": "subscribe takes a list of topics"})
            return
        room = int(_setting("LIVE_MAX_SUBSCRIPTIONS", 250)) - len(self.topics)
        wanted = [topic for topic in dict.fromkeys(requested) if isinstance(topic, str) and topic not in self.topics]
        refused = [
            {"topic": str(topic)[:40], "reason": f"at most {len(self.topics) + room} topics per socket"}
            for topic in wanted[max(room, 0) :]
        ]
        wanted = wanted[: max(room, 0)]
        visible = await database_sync_to_async(self._visible_topics)(wanted) if wanted else set()
        refused += [{"topic": topic[:40], "reason": REFUSED} for topic in wanted if topic not in visible]
        subscribed = [topic for topic in wanted if topic in visible]
        for topic in subscribed:
            await self.channel_layer.group_add(topic_group(topic), self.channel_name)
            self.topics.add(topic)
        await self.send_json({"type": "subscription", "subscribed": subscribed, "refused": refused})

    async def _unsubscribe(self, topics: Any) -> None:
        if not isinstance(topics, list):
            return
        for topic in topics:
            if topic in self.topics:
                await self._drop(topic)

    async def _drop(self, topic: str) -> None:
        self.topics.discard(topic)
        self.pending.pop(topic, None)
        self.pending_stamps.pop(topic, None)
        clock = coalescing_clock(topic)
        if not any(coalescing_clock(other) == clock for other in self.pending):
            flush = self.flushes.pop(clock, None)
            if flush is not None:
                flush.cancel()
        await self.channel_layer.group_discard(topic_group(topic), self.channel_name)

    def _visible_topics(self, topics: list[str]) -> set[str]:
        user = selectors.current_user(user_id=self.user_id, session_key=self.session_key)
        return set() if user is None else selectors.visible_topics(user, topics)

    # --- revocation ---------------------------------------------------------------------------

    async def access_changed(self, message: dict[str, Any]) -> None:
        """A service says this user's access changed: re-check now, and once more a second later
        (Django's logout sends its signal just before it deletes the session)."""
        await self._recheck()
        # In a task: the handler must not hold up this socket's other messages for that second.
        self.later_recheck = asyncio.create_task(self._recheck_after(1.0))

    async def _recheck_after(self, delay: float) -> None:
        await asyncio.sleep(delay)
        await self._recheck()

    async def _recheck(self) -> None:
        if self.closed:
            return
        checked = sorted(self.topics)
        signed_in, visible = await database_sync_to_async(self._still_visible)(checked)
        await self.apply_verdict(checked, signed_in, visible)

    async def apply_verdict(self, checked: list[str], signed_in: bool, visible: set[str]) -> None:
        """Close the socket of a user no longer signed in; drop the topics of `checked` they no
        longer see (a topic subscribed while the check ran was checked at its subscription)."""
        if self.closed:
            return
        if not signed_in:
            logger.info("live socket of user %s closed: no longer signed in", self.user_id)
            self.closed = True
            await self.send_json({"type": "signed_out"})
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        dropped = sorted((set(checked) & self.topics) - visible)
        for topic in dropped:
            await self._drop(topic)
        if dropped:
            await self.send_json({"type": "dropped", "topics": dropped})

    def _still_visible(self, topics: list[str]) -> tuple[bool, set[str]]:
        user = selectors.current_user(user_id=self.user_id, session_key=self.session_key)
        if user is None:
            return False, set()
        return True, selectors.visible_topics(user, topics)

    # --- changes, coalesced -------------------------------------------------------------------

    async def live_change(self, message: dict[str, Any]) -> None:
        """At most one change per topic per LIVE_COALESCE_SECONDS on this socket: the first goes
        out at once, later ones within the window are merged and sent when it ends. The quota
        topics share one window (`coalescing_clock`), whose first change waits LIVE_GATHER_SECONDS
        for the rest of its commit, so a commit's quota figures arrive together."""
        topic = message.get("topic")
        if topic not in self.topics:
            return
        self.pending[topic] = merge_change(self.pending.get(topic), message.get("change") or {})
        stamp = message.get("committed_at")
        if isinstance(stamp, int | float):
            # A merged change is as fresh as its newest commit.
            self.pending_stamps[topic] = max(stamp, self.pending_stamps.get(topic, stamp))
        clock = coalescing_clock(topic)
        if clock in self.flushes:
            return
        wait = self.last_sent.get(clock, float("-inf")) + _setting("LIVE_COALESCE_SECONDS", 1.0) - time.monotonic()
        if clock != topic:
            # A commit's changes to a shared clock's topics come one group message each, a few ms
            # apart: sent at once, the first would leave alone and the rest a window later (the
            # Overview counted a reclaimed GPU in both quotas for a second, journey 6).
            wait = max(wait, _setting("LIVE_GATHER_SECONDS", 0.1))
        if wait <= 0:
            await self._flush(clock)
        else:
            self.flushes[clock] = asyncio.create_task(self._flush_after(clock, wait))

    async def _flush_after(self, clock: str, wait: float) -> None:
        await asyncio.sleep(wait)
        self.flushes.pop(clock, None)
        await self._flush(clock)

    async def _flush(self, clock: str) -> None:
        due = sorted(topic for topic in self.pending if coalescing_clock(topic) == clock)
        if not due or self.closed:
            return
        self.last_sent[clock] = time.monotonic()
        for topic in due:
            change = self.pending.pop(topic)
            stamp = self.pending_stamps.pop(topic, None)
            if topic not in self.topics:
                continue
            envelope: dict[str, Any] = {"type": "change", "topic": topic, "change": change}
            if stamp is not None:
                envelope["committed_at"] = stamp
            await self.send_json(envelope)


class Rechecks:
    """The safety net for what no service announces (a rule edited, a lost notification): every
    LIVE_RECHECK_SECONDS, every socket of this event loop is checked again, all in one pass
    (`selectors.still_visible`: two queries, then one per user with id topics). One task per
    process, not one per socket: with a task per socket, 200 sockets cost 600 queries and 200
    thread hops every 3 s, which starved the delivery of changes (benchmarks/live_fanout.py)."""

    def __init__(self) -> None:
        self.sockets: weakref.WeakSet[LiveConsumer] = weakref.WeakSet()
        self.task: asyncio.Task[None] | None = None

    def add(self, socket: LiveConsumer) -> None:
        self.sockets.add(socket)
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())

    def discard(self, socket: LiveConsumer) -> None:
        self.sockets.discard(socket)

    async def _run(self) -> None:
        while self.sockets:
            await asyncio.sleep(_setting("LIVE_RECHECK_SECONDS", 3))
            sockets = [socket for socket in list(self.sockets) if not socket.closed]
            if not sockets:
                continue
            entries = [(socket.user_id, socket.session_key, sorted(socket.topics)) for socket in sockets]
            try:
                verdicts = await database_sync_to_async(selectors.still_visible)(entries)
            except Exception as error:  # noqa: BLE001 (a database hiccup: try again next time, keep running)
                logger.warning("live sockets' periodic re-check failed: %s", error)
                continue
            for socket, (_, _, checked), (signed_in, visible) in zip(sockets, entries, verdicts, strict=True):
                try:
                    await socket.apply_verdict(checked, signed_in, visible)
                except Exception as error:  # noqa: BLE001 (one socket's failure must not end the others' checks)
                    logger.warning("live socket of user %s: re-check not applied: %s", socket.user_id, error)


# One per event loop: a test's event loop ends with its test, a server's lives as long as it.
_RECHECKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Rechecks] = weakref.WeakKeyDictionary()


def _rechecks() -> Rechecks:
    loop = asyncio.get_running_loop()
    if loop not in _RECHECKS:
        _RECHECKS[loop] = Rechecks()
    return _RECHECKS[loop]


class UnknownPathConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Every websocket path but /ws/live/: closed with 4404 and one log line (URLRouter would
    raise, and the server would log a traceback and answer 500)."""

    async def connect(self) -> None:
        await self.accept()
        logger.info(
            "websocket to unknown path %s from %s closed", self.scope.get("path", "?")[:200], _client(self.scope)
        )
        await self.close(code=CLOSE_NOT_FOUND)
