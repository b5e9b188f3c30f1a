"""Beats held for the cycle on its way to their node (console.agent_route; docs/agent.md,
"Held for the cycle").

A beat that freed devices (its processes exited, ending their jobs) asks for a cycle, and what
that cycle places on the node is the agent's next work. Answered at once, the agent came back a
follow-up later (AGENT_FOLLOW_UP_SECONDS) and again while the cycle was still queued or running:
in the drain benchmark of issue 25 that was 4.5 s at the median from a job's admission to its
start on the host, at 64 nodes, most of it those follow-ups waiting in the web processes' queue.
So the route holds such an answer, without a thread, until the cycle has placed something on the
node (the agent executor clears the node's freed mark: scheduling.triggers.placed_on), or no
cycle is on its way any longer, or a heartbeat has passed since the beat arrived; once placed, it
answers the same beat anew, with the starts (otherwise the first answer goes, as before). The
agent sees only a slower answer that carries its next work. The hold is what is left of a
heartbeat after the beat's own wait and work: on a console too busy to answer a beat within a
heartbeat, nothing is held, and an answer never waits for a thread twice beyond that.

Every held beat of a web process is looked at together, one Redis round trip every
POLL_SECONDS while any is held (scheduling.triggers.freed_and_coming), on a thread of its own
so that Redis never blocks the event loop.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from scheduling import triggers

# How often the held beats' cycle is looked for: a cycle's commit is seen this much later at most.
POLL_SECONDS: Final = 0.05


class CycleHolds:
    """The beats of one web process held for their node's cycle, and the one poller that frees them."""

    def __init__(self, poll_seconds: float = POLL_SECONDS) -> None:
        self.poll_seconds = poll_seconds
        self._held: dict[int, list[asyncio.Future[bool]]] = {}
        self._poller: asyncio.Task[None] | None = None
        self._reader: ThreadPoolExecutor | None = None

    def holding(self) -> int:
        """How many beats are held now."""
        return sum(len(futures) for futures in self._held.values())

    async def until_placed(self, node_id: int, limit: float) -> bool:
        """Whether a cycle placed on `node_id` within `limit` seconds; False as soon as none is on
        its way any longer, or at the limit."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._held.setdefault(node_id, []).append(future)
        if self._poller is None or self._poller.done():
            self._poller = asyncio.create_task(self._poll())
        try:
            return await asyncio.wait_for(future, limit)
        except TimeoutError:
            return False
        finally:
            waiting = self._held.get(node_id, [])
            if future in waiting:
                waiting.remove(future)
            if not waiting:
                self._held.pop(node_id, None)

    async def _poll(self) -> None:
        loop = asyncio.get_running_loop()
        if self._reader is None:
            self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-hold")
        while self._held:
            await asyncio.sleep(self.poll_seconds)
            nodes = list(self._held)
            if not nodes:
                break
            marked, coming = await loop.run_in_executor(self._reader, triggers.freed_and_coming, nodes)
            for node_id in nodes:
                if node_id in marked and coming:
                    continue
                for future in self._held.pop(node_id, []):
                    if not future.done():
                        future.set_result(node_id not in marked)
