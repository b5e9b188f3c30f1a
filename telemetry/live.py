"""A batch of samples as live topic changes (docs/live.md, docs/telemetry.md), sent after commit.

- `node:<id>`: per GPU, `gpu_<i>_util` (and `gpu_<i>_util_display`, "91 %", for the Nodes page's
  `data-live` cells) and `gpu_<i>_memory_mib`;
- `nodes` (the Nodes page, platform admins): every node's GPUs of the batch in one change,
  `{"sampled_at", "util": {"<node id>": {"<gpu>": 91.5}}}` (utilisation to 0.1 %). One topic
  whatever the number of nodes: a page of 1,000 nodes would need 1,000 `node:<id>` topics, past a
  socket's LIVE_MAX_SUBSCRIPTIONS. The socket's coalescing merges `util` node by node, so batches
  of a few nodes each (agents' beats) within a second reach the page as one message;
- `job:<id>`: `{"telemetry": {"<node id>:<gpu>": {"label", "util", "memory_used_mib",
  "memory_total_mib", "at"}}}` for the job page's chart (`Plotly.extendTraces`). A nested map:
  the socket's coalescing merges it GPU by GPU, and a job's state change merged with it keeps both.

Sent like the scheduler's events: every change of the batch in one event loop (`async_to_sync`
once, a `group_send` per change), best effort: with Redis down the samples stand and one line is
logged. A thread that publishes every second for the life of its process (the agents' samples
writer, telemetry.services) keeps one event loop instead (`keep_event_loop`): `async_to_sync`
starts a thread and a loop for each batch, and the channel layer, which keeps its Redis
connections per loop, then connects afresh each time; that was a fifth of a web process's CPU
under a thousand agents.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from scheduling.live import TopicChange, send_topic_changes
from telemetry.selectors import gpu_key, gpu_label

logger = logging.getLogger(__name__)


class Recorded(NamedTuple):
    node_id: int
    node: str
    gpu: int
    job_id: int | None
    utilisation: float
    memory_used_mib: int
    memory_total_mib: int


def moment(at: datetime) -> str:
    """Plotly reads ISO text as wall time; the chart's axis says UTC (as scheduling.allocation_history).
    isoformat, not strftime: a day of minutes for 8 GPUs is 11,520 of these, and strftime cost
    a quarter of the chart's time."""
    if at.utcoffset():
        at = at.astimezone(UTC)
    return at.isoformat(sep=" ", timespec="milliseconds")[:23]


def topic_changes(recorded: Sequence[Recorded], *, at: datetime) -> list[TopicChange]:
    """One change per node and per job of the batch; nothing is read from the database."""
    when = moment(at)
    nodes: dict[int, dict[str, Any]] = {}
    jobs: dict[int, dict[str, Any]] = {}
    for sample in recorded:
        node = nodes.setdefault(sample.node_id, {"sampled_at": when})
        node[f"gpu_{sample.gpu}_util"] = sample.utilisation
        node[f"gpu_{sample.gpu}_util_display"] = f"{sample.utilisation:.0f} %"
        node[f"gpu_{sample.gpu}_memory_mib"] = sample.memory_used_mib
        if sample.job_id is not None:
            gpus = jobs.setdefault(sample.job_id, {})
            gpus[gpu_key(sample.node_id, sample.gpu)] = {
                "label": gpu_label(sample.node, sample.gpu),
                "util": sample.utilisation,
                "memory_used_mib": sample.memory_used_mib,
                "memory_total_mib": sample.memory_total_mib,
                "at": when,
            }
    changes: list[TopicChange] = [(f"node:{node_id}", change) for node_id, change in nodes.items()]
    if nodes:
        cells: dict[str, dict[str, float]] = {}
        for sample in recorded:
            cells.setdefault(str(sample.node_id), {})[str(sample.gpu)] = round(sample.utilisation, 1)
        changes.append(("nodes", {"sampled_at": when, "util": cells}))
    changes.extend((f"job:{job_id}", {"telemetry": gpus}) for job_id, gpus in jobs.items())
    return changes


_kept = threading.local()


def keep_event_loop() -> None:
    """This thread's batches all run on one event loop of its own, kept until the thread ends."""
    _kept.loop = asyncio.new_event_loop()


def publish(changes: Sequence[TopicChange]) -> bool:
    if not changes or not getattr(settings, "SCHEDULER_PUBLISH_EVENTS", True):
        return False
    try:
        layer = get_channel_layer()
        if layer is None:
            return False
        kept: asyncio.AbstractEventLoop | None = getattr(_kept, "loop", None)
        if kept is not None:
            kept.run_until_complete(send_topic_changes(layer, changes))
        else:
            # One event loop for the batch: async_to_sync per message costs a thread hop each.
            async_to_sync(send_topic_changes)(layer, changes)
    except Exception as error:  # noqa: BLE001 (whatever Redis raises, the samples stand)
        logger.warning("could not publish GPU samples: %s", error)
        return False
    return True
