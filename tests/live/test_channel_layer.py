"""The console's channel layer (console.channel_layer) against Redis: `group_send_many` reaches
every member of every group with members, as `group_send` does, and skips the groups nobody is in."""

from __future__ import annotations

import asyncio
import uuid

from channels.layers import get_channel_layer

from console.channel_layer import ConsoleChannelLayer


def test_send_many_reaches_the_groups_with_members_and_skips_the_rest() -> None:
    async def scenario() -> None:
        layer = get_channel_layer()
        assert isinstance(layer, ConsoleChannelLayer)
        run = uuid.uuid4().hex[:8]
        listened, also_listened, empty = f"a-{run}", f"b-{run}", f"c-{run}"
        first, second, third = [await layer.new_channel() for _ in range(3)]
        await layer.group_add(listened, first)
        await layer.group_add(listened, second)
        await layer.group_add(also_listened, third)
        sends = [(group, {"type": "live.change", "group": group}) for group in (listened, empty, also_listened)]
        assert await layer.group_send_many(sends) == 2
        for channel, group in ((first, listened), (second, listened), (third, also_listened)):
            received = await asyncio.wait_for(layer.receive(channel), 2)
            assert received == {"type": "live.change", "group": group}
        await layer.group_discard(listened, first)
        await layer.group_discard(listened, second)
        assert await layer.group_send_many([(listened, {"type": "live.change"})]) == 0
        await layer.group_discard(also_listened, third)

    asyncio.run(scenario())
