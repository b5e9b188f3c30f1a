"""Tell a user's live sockets that what they may see has changed (issue 12, revocation).

A membership removed, a role changed, a user deactivated or signed out everywhere: each writes
the database first, then (after commit) sends one small message to the user's group on the
Channels layer. Every open socket of that user joined the group, re-checks its topics with the
same `restrict()` as the pages, and drops what it may no longer see. The database stays the
truth: a lost notification is caught by the sockets' periodic re-check (live.consumers).

This lives in workspaces, the lowest app that revokes access, so that console and workspaces
services can both call it without an upward import.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

ACCESS_CHANGED: Final = "access.changed"

logger = logging.getLogger(__name__)


def user_group(user_id: int) -> str:
    """The Channels group every live socket of the user joins (group names allow no colon)."""
    return f"live.user.{int(user_id)}"


def notify_access_changed(*, user_ids: Iterable[int]) -> None:
    """After commit, ask the users' sockets to re-check their topics; never fails the write."""
    ids = sorted({int(user_id) for user_id in user_ids})
    if ids:
        transaction.on_commit(lambda: _send(ids))


def _send(user_ids: list[int]) -> None:
    try:
        layer = get_channel_layer()
        if layer is None:
            return
        for user_id in user_ids:
            async_to_sync(layer.group_send)(user_group(user_id), {"type": ACCESS_CHANGED})
    except Exception as error:  # noqa: BLE001 (Redis down: the sockets' periodic re-check still drops the topics)
        logger.warning("could not notify live sockets of users %s: %s", user_ids, error)
