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
that sleeps between looks: Redis never blocks the event loop, and the loop is woken only when a
look frees a beat. (The first poller slept on the event loop and handed each look to an executor:
two wake-ups of the loop and a future chained across threads twenty times a second, 3.5 % of the
web processes' Python time in the drain benchmark of issue 25, and up to 9 % on a loaded machine.)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Final

from scheduling import triggers

# How often the held beats' cycle is looked for: a cycle's commit is seen this much later at most.
POLL_SECONDS: Final = 0.05


class CycleHolds:
    """The beats of one web process held for their node's cycle, and the one poller that frees them."""

    def __init__(self, poll_seconds: float = POLL_SECONDS) -> None:
        self.poll_seconds = poll_seconds
        # Held beats by node, each with its loop: read and written under the lock, from the event
        # loop (a beat held, a hold over) and from the poller's thread (a look's verdict).
        self._held: dict[int, list[asyncio.Future[bool]]] = {}
        self._lock = threading.Lock()
        self._some_held = threading.Event()
        self._poller: threading.Thread | None = None

    def holding(self) -> int:
        """How many beats are held now."""
        with self._lock:
            return sum(len(futures) for futures in self._held.values())

    async def until_placed(self, node_id: int, limit: float) -> bool:
        """Whether a cycle placed on `node_id` within `limit` seconds; False as soon as none is on
        its way any longer, or at the limit."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._held.setdefault(node_id, []).append(future)
            if self._poller is None or not self._poller.is_alive():
                # Started at the first hold, in the process that serves it (uvicorn's workers are children).
                self._poller = threading.Thread(target=self._poll_forever, name="agent-hold", daemon=True)
                self._poller.start()
        self._some_held.set()
        try:
            return await asyncio.wait_for(future, limit)
        except TimeoutError:
            return False
        finally:
            with self._lock:
                waiting = self._held.get(node_id, [])
                if future in waiting:
                    waiting.remove(future)
                if not waiting:
                    self._held.pop(node_id, None)

    def _poll_forever(self) -> None:
        while True:
            self._some_held.wait()
            time.sleep(self.poll_seconds)
            with self._lock:
                nodes = list(self._held)
                if not nodes:
                    self._some_held.clear()  # until_placed sets it again after adding its beat
                    continue
            marked, coming = triggers.freed_and_coming(nodes)  # Redis's errors are caught there
            self._settle(nodes, marked, coming)

    def _settle(self, nodes: list[int], marked: set[int], coming: bool) -> None:
        """Answer the beats of each looked-at node that no cycle will place on any longer (False)
        or that one has placed on (True), each on its own event loop."""
        with self._lock:
            freed = [
                (future, node_id not in marked)
                for node_id in nodes
                if not (node_id in marked and coming)
                for future in self._held.pop(node_id, [])
            ]
        for future, placed in freed:
            with contextlib.suppress(RuntimeError):  # its loop closed after its wait timed out
                future.get_loop().call_soon_threadsafe(_answer, future, placed)


def _answer(future: asyncio.Future[bool], placed: bool) -> None:
    if not future.done():  # its wait_for may have timed out meanwhile
        future.set_result(placed)
