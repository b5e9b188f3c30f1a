"""The console's channel layer: channels_redis's, with one send for many groups at once.

The live layer publishes one change per topic (scheduling.live.send_topic_changes): hundreds for
a cycle's commit, a couple of hundred a second per web process for a thousand agents' GPU
samples. Most of those topics have nobody listening, and channels_redis's `group_send` spends two
Redis round trips of its own on each group to find that out. `group_send_many` asks for every
group's members in one pipelined round trip per Redis host and sends only to the groups that
have any: a second of a thousand agents' samples cost a web process a fifth of its CPU before.

It reads channels_redis's group keys and expiry as its `group_send` does (channels-redis is
pinned; tests/console/test_channel_layer.py runs this against Redis).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final

from channels_redis.core import RedisChannelLayer

# Sends to groups with members, in flight at once: each is a few Redis round trips.
SENDS_IN_FLIGHT: Final = 16


class ConsoleChannelLayer(RedisChannelLayer):  # type: ignore[misc]  # channels_redis is untyped
    async def group_send_many(self, sends: Sequence[tuple[str, dict[str, Any]]]) -> int:
        """Send each message to its group, as `group_send` would, skipping the groups nobody is
        in; returns how many groups had members. Each group appears at most once in `sends`."""
        by_host: dict[int, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
        for group, message in sends:
            assert self.require_valid_group_name(group), f"invalid group name {group!r}"
            by_host[self.consistent_hash(group)].append((group, message))
        expired = int(time.time()) - self.group_expiry
        listened: list[tuple[str, dict[str, Any]]] = []
        for index, host_sends in by_host.items():
            pipe = self.connection(index).pipeline(transaction=False)
            for group, _message in host_sends:
                key = self._group_key(group)
                pipe.zremrangebyscore(key, min=0, max=expired)
                pipe.zcard(key)
            replies = await pipe.execute()
            listened += [send for send, members in zip(host_sends, replies[1::2], strict=True) if members]
        for first in range(0, len(listened), SENDS_IN_FLIGHT):
            await asyncio.gather(
                *(self.group_send(group, message) for group, message in listened[first : first + SENDS_IN_FLIGHT])
            )
        return len(listened)
