"""Websocket-ready events on the Channels layer, sent after commit and never allowed to fail a write.

Consumers join the group "scheduler"; each message is `{"type": "scheduler.event", "event": {...}}`
where the event has a `kind` (cycle, job) and the figures of what changed. The same event is
turned into small per-topic changes for the live pages (scheduling.live, docs/live.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections, reset_queries

from scheduling import live
from scheduling.models import Job

GROUP: Final = "scheduler"
MESSAGE_TYPE: Final = "scheduler.event"

logger = logging.getLogger(__name__)


def job_event(job: Job, state: str | None = None) -> dict[str, Any]:
    """The event of a job that changed: its id, name, quota and state (`state` when the row
    written is ahead of the object in hand)."""
    return {"kind": "job", "id": job.pk, "name": job.name, "state": state or job.state, "quota_id": job.quota_id}


def publish(event: dict[str, Any]) -> bool:
    """Best effort: a Redis hiccup loses a live update, never a decision (the database has it)."""
    return publish_many([event])


def publish_many(batch: Sequence[dict[str, Any]], *, committed_at: float | None = None) -> bool:
    """`publish` for the events of one commit: each goes to "scheduler", and their live topic
    changes are read back together (one snapshot for a bulk submission, not one per job). Inside
    `published_later()`, handed to this process's publisher thread instead (and True)."""
    if not batch or not getattr(settings, "SCHEDULER_PUBLISH_EVENTS", True):
        return False
    if getattr(_later, "on", False) and float(settings.AGENT_PUBLISH_FLUSH_SECONDS) > 0:
        _publisher.add(batch)
        return True
    # Stamped before the read-back: the live envelope's `committed_at` (docs/live.md) is the commit.
    committed_at = live.commit_stamp() if committed_at is None else committed_at
    try:
        layer = get_channel_layer()
        if layer is None:
            return False
        # The live pages' topics (scheduling.live): what changed, read back after commit; the
        # quotas' figures (the costly read) go out second, so the rest does not wait for them.
        changes, quota_ids = live.first_changes(batch)
        async_to_sync(_send)(layer, batch, changes, committed_at)
        if quota_ids:
            async_to_sync(live.send_topic_changes)(layer, live.quota_changes(quota_ids), committed_at=committed_at)
    except Exception as error:  # noqa: BLE001 (whatever Redis or the broker raise, the write stands; beat catches up)
        # One line, not a traceback: during a Redis outage every change comes here.
        logger.warning("could not publish scheduler event %s: %s", batch[0].get("kind"), error)
        return False
    return True


async def _send(
    layer: Any, batch: Sequence[dict[str, Any]], changes: Sequence[live.TopicChange], committed_at: float
) -> None:
    # One event loop per commit: async_to_sync per message costs a thread hop each, and the first
    # S3 cycle (2,127 admissions, 11,003 topic changes) spent 152 s publishing that way.
    for event in batch:
        await layer.group_send(GROUP, {"type": MESSAGE_TYPE, "event": event})
    await live.send_topic_changes(layer, changes, committed_at=committed_at)


# The node agents' beats end jobs hundreds of times a second at scale, a few jobs each, and each
# beat's publish read its quotas' figures back (a quarter of an exit beat's time in the drain
# benchmark of issue 25), on the beat's thread before its answer. Inside `published_later()` (the
# heartbeat's route, console.agent_route) a beat's batch is kept instead, and this process's
# publisher thread sends every batch kept for up to AGENT_PUBLISH_FLUSH_SECONDS as one: one
# read-back of the jobs named and one of their quotas' figures for all of them, stamped with the
# newest commit's time (docs/live.md, coalesced messages). The price: those live changes reach
# the pages up to that much later; a web process killed loses the ones it held (the database has
# them: a page reload shows them). 0 publishes in the beat, as before.
_later = threading.local()


@contextmanager
def published_later() -> Iterator[None]:
    """publish_many in this block hands its batch to the publisher thread (see above)."""
    _later.on = True
    try:
        yield
    finally:
        _later.on = False


class _LaterPublisher:
    """The batches this process keeps; beats on several threads add, one thread sends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: list[dict[str, Any]] = []
        self._newest = 0.0
        self._due = threading.Event()
        self._sender: threading.Thread | None = None

    def add(self, batch: Sequence[dict[str, Any]]) -> None:
        with self._lock:
            if not self._batches:
                self._due.set()  # the sender's wait for this batch starts now
            self._batches.extend(batch)
            self._newest = live.commit_stamp()
            if self._sender is None or not self._sender.is_alive():
                # Started at the first batch, in the process that serves it (after any fork).
                self._sender = threading.Thread(target=self._send_forever, name="live-later", daemon=True)
                self._sender.start()

    def _send_forever(self) -> None:
        while True:
            self._due.wait()
            time.sleep(float(settings.AGENT_PUBLISH_FLUSH_SECONDS))
            with self._lock:
                batch, newest, self._batches = self._batches, self._newest, []
                self._due.clear()
            if not batch:
                continue
            try:
                publish_many(batch, committed_at=newest)
            finally:
                # As at the end of a request: the pool gets its connection back (the read-back used it).
                close_old_connections()
                reset_queries()


_publisher = _LaterPublisher()
