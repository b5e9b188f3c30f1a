"""Asking for a cycle: after every submit, cancel, finish, release and quota change.

Modes (setting SCHEDULER_TRIGGER, default "celery"):

- "celery": a burst of requests queues one task. The first request sets the Redis key
  `<prefix>cycle-requested` (SET NX, with a TTL so a lost task cannot block triggers for long)
  and sends `scheduling.tasks.run_scheduling_cycle`; later requests see the key and do nothing.
  The task deletes the key before it reads its snapshot, so a request that arrives while it runs
  queues the next cycle. A broker or Redis outage is logged, never raised: beat catches up.
- "inline": the cycle runs synchronously in this thread (tests; a request raised from inside a
  cycle, e.g. by the executor's tick, runs right after it instead of recursing).
- "none": nothing (whoever drives cycles, such as `simulate` or `converge`, does it).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Final

from django.conf import settings
from django.db import transaction

from scheduling import changes
from scheduling.lock import redis_client, redis_prefix

logger = logging.getLogger(__name__)

MODES: Final = ("celery", "inline", "none")
_INLINE_MAX_RERUNS: Final = 50
_local = threading.local()


@dataclass(frozen=True, slots=True)
class CycleRunners:
    """What a trigger calls to have a cycle run. The cycle and the task sit above this module
    (they import it to clear requests), so SchedulingConfig.ready() hands them down here."""

    run_cycle: Callable[[str], object]  # inline: one cycle in this thread, with this trigger
    in_cycle: Callable[[], bool]  # whether this thread is inside a cycle now
    queue_cycle: Callable[[str], object]  # celery: send the cycle task


_runners: CycleRunners | None = None


def register_runners(runners: CycleRunners) -> None:
    global _runners
    _runners = runners


def _registered() -> CycleRunners:
    if _runners is None:
        raise RuntimeError("scheduling's cycle runners are not registered: is the app loaded (SchedulingConfig.ready)?")
    return _runners


def trigger_mode() -> str:
    mode = str(getattr(settings, "SCHEDULER_TRIGGER", "celery"))
    if mode not in MODES:
        raise ValueError(f"SCHEDULER_TRIGGER must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def requested_key() -> str:
    return f"{redis_prefix()}cycle-requested"


def request_cycle_on_commit(reason: str) -> None:
    """What services call: the change is recorded in the caller's transaction (the beat's cycle
    runs only after one, scheduling.changes), and the cycle asked for after commit, to see it."""
    changes.note(reason)
    transaction.on_commit(partial(request_cycle, reason))


def request_cycle(reason: str) -> bool:
    """Ask for a cycle now; returns whether this call queued (or ran) one rather than joining one."""
    if getattr(_local, "paused", 0):
        return False
    mode = trigger_mode()
    if mode == "none":
        return False
    if mode == "inline":
        return _run_inline(reason)
    return _queue_task(reason)


def _queue_task(reason: str) -> bool:
    ttl = max(1, int(float(getattr(settings, "SCHEDULER_BEAT_SECONDS", 5.0)) * 2))
    try:
        client = redis_client()
        if not client.set(requested_key(), reason, nx=True, ex=ttl):
            return False  # A cycle is already queued; it will see this change too.
    except Exception as error:  # noqa: BLE001 (whatever Redis or the broker raise, the write stands; beat catches up)
        # One line, not a traceback: during a Redis outage every submission comes here.
        logger.warning("could not mark a cycle as requested (%s): %s; beat will run one", reason, error)
        return False
    try:
        _registered().queue_cycle(reason)
    except Exception as error:  # noqa: BLE001 (whatever Redis or the broker raise, the write stands; beat catches up)
        logger.warning("could not queue a cycle (%s): %s; beat will run one", reason, error)
        with contextlib.suppress(Exception):  # the key expires by itself
            client.delete(requested_key())
        return False
    return True


def running_key() -> str:
    return f"{redis_prefix()}cycle-running"


def freed_key(node_id: int) -> str:
    return f"{redis_prefix()}freed-{node_id}"


def _mark_seconds() -> int:
    # Long enough for a queued cycle to run on a loaded machine; a mark left by a killed worker
    # only asks agents back sooner for this long.
    return max(2, int(float(getattr(settings, "SCHEDULER_BEAT_SECONDS", 5.0)) * 2))


@contextmanager
def cycle_running() -> Iterator[None]:
    """Marks a cycle as running (celery mode) so that agent beats meanwhile know one is on its way
    (cycle_on_its_way): the request key is gone from the cycle's start to its commit."""
    if trigger_mode() != "celery":
        yield
        return
    client = None
    with contextlib.suppress(Exception):  # Redis away: no mark, the agents beat at their own pace
        client = redis_client()
        client.set(running_key(), "1", ex=_mark_seconds())
    try:
        yield
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.delete(running_key())


def mark_freed(node_id: int) -> None:
    """A beat freed devices on this node: its next beats follow up sooner while a cycle is on its way."""
    if trigger_mode() != "celery":
        return  # inline: the cycle has run before the answer; none: nobody runs one
    try:
        redis_client().set(freed_key(node_id), "1", ex=_mark_seconds())
    except Exception as error:  # noqa: BLE001 (whatever Redis raises, the beat stands)
        logger.warning("could not mark node %s as freed: %s", node_id, error)


def cycle_on_its_way(node_id: int) -> bool:
    """Whether `node_id` freed devices lately (mark_freed) and a cycle is requested or running: what
    that cycle places there would otherwise wait for the agent's next regular beat. One round trip."""
    if trigger_mode() != "celery":
        return False
    try:
        freed, requested, running = redis_client().mget(freed_key(node_id), requested_key(), running_key())
    except Exception as error:  # noqa: BLE001 (whatever Redis raises, the beat is answered)
        logger.warning("could not read whether a cycle is on its way: %s", error)
        return False
    return freed is not None and (requested is not None or running is not None)


def freed_and_coming(node_ids: Collection[int]) -> tuple[set[int], bool]:
    """Of these nodes, those still marked freed (no cycle has placed on them since: placed_on),
    and whether a cycle is requested or running: one round trip for them all (the heartbeat's
    route asks it for every beat it holds, console.agent_holds)."""
    if trigger_mode() != "celery" or not node_ids:
        return set(), False
    nodes = list(node_ids)
    try:
        *freed, requested, running = redis_client().mget(
            [*(freed_key(node_id) for node_id in nodes), requested_key(), running_key()]
        )
    except Exception as error:  # noqa: BLE001 (whatever Redis raises, the beats are answered)
        logger.warning("could not read whether a cycle is on its way: %s", error)
        return set(nodes), False
    marked = {node_id for node_id, mark in zip(nodes, freed, strict=True) if mark is not None}
    return marked, requested is not None or running is not None


def placed_on(node_ids: Collection[int]) -> None:
    """A cycle committed placements on these nodes: their freed marks have done their work, and a
    beat of theirs held for that cycle (console.agent_holds) is answered now, with the starts."""
    if trigger_mode() != "celery" or not node_ids:
        return
    try:
        redis_client().delete(*(freed_key(node_id) for node_id in node_ids))
    except Exception as error:  # noqa: BLE001 (whatever Redis raises, the marks expire by themselves)
        logger.warning("could not clear the freed marks of %s nodes: %s", len(node_ids), error)


def clear_request() -> None:
    """The task calls this before it reads its snapshot, so later requests queue a fresh cycle."""
    try:
        redis_client().delete(requested_key())
    except Exception as error:  # noqa: BLE001 (whatever Redis or the broker raise, the write stands; beat catches up)
        logger.warning("could not clear the cycle request key: %s", error)


def _run_inline(reason: str) -> bool:
    runners = _registered()
    if getattr(_local, "running", False) or runners.in_cycle():
        _local.again = True
        return False
    _local.running = True
    try:
        for _ in range(_INLINE_MAX_RERUNS):
            _local.again = False
            runners.run_cycle(reason)
            if not _local.again:
                break
    finally:
        _local.running = False
        _local.again = False
    return True


@contextmanager
def paused() -> Iterator[None]:
    """Drop requests raised in this thread inside the block (the caller runs cycles itself)."""
    _local.paused = getattr(_local, "paused", 0) + 1
    try:
        yield
    finally:
        _local.paused -= 1
