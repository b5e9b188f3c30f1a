"""Small ordering policies and message formatting, kept apart so each rule reads on its own."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

from scheduling.engine.fairshare import MILLI
from scheduling.engine.types import Job

# Preference between victim kinds (SCHEDULING.md §3): reclaim, then preempt, child-level,
# same-level.
RULE_ORDER = {"reclaim": 0, "preempt": 1, "child_preemption": 2, "same_level": 3}

# Finite stand-in for "infinitely saturated" (fair share 0, something allocated) so that the
# figure stays valid JSON.
SATURATED = 1_000_000.0


def queue_key(job: Job, index: int) -> tuple[int, float, int]:
    """Inside a quota: priority high first, then oldest submission, then snapshot order."""
    return (-job.priority, job.submitted_at, index)


def victim_key(job: Job, index: int) -> tuple[int, float, float, int]:
    """Victims: lowest priority first, then most recently started (then submitted)."""
    started = job.started_at if job.started_at is not None else job.submitted_at
    return (job.priority, -started, -job.submitted_at, -index)


def no_smaller(job: tuple[float, ...], failed: tuple[float, ...]) -> bool:
    """A victim search fails for a job no more urgent and no smaller than one it failed for:
    (priority, then sizes: GPUs per replica, replicas, CPU, memory)."""
    return failed[0] >= job[0] and all(mine >= theirs for mine, theirs in zip(job[1:], failed[1:], strict=True))


def no_smaller_than_failed(
    failures: Iterable[tuple[int, int, int, float, float]],
    priority: int,
    milli: int,
    count: int,
    cpu: float,
    memory: float,
) -> bool:
    """`no_smaller` against each failure (priority, GPUs per replica, replicas, CPU, memory) of
    a quota's victim searches, as a loop: a cycle asks it for thousands of jobs, of one or two
    failures each, where building a generator for `any` cost more than the comparisons."""
    for failed in failures:
        if (
            failed[0] >= priority
            and milli >= failed[1]
            and count >= failed[2]
            and cpu >= failed[3]
            and memory >= failed[4]
        ):
            return True
    return False


def within_bounds(allocated: Sequence[int], need: int, bound: Sequence[int], nodes: Iterable[int]) -> bool:
    """`allocated[n] + need <= bound[n]` at every node, as a loop (the victim search asks it of
    one to three nodes a hundred thousand times a cycle, where `all` over a generator cost twice)."""
    for node in nodes:  # noqa: SIM110 (see above)
        if not allocated[node] + need <= bound[node]:
            return False
    return True


def saturation(allocated: int, fair_share: int) -> float:
    if fair_share > 0:
        return allocated / fair_share
    return 0.0 if allocated <= 0 else SATURATED


@lru_cache(maxsize=4096)
def gpus(milli: int) -> str:
    """GPU figure as a person writes it: 48, 0.5, 2.25, 1,000,000 (never 1e+06)."""
    if milli % MILLI == 0:
        return f"{milli // MILLI:,}"
    return f"{milli / MILLI:,.3f}".rstrip("0").rstrip(".")


@lru_cache(maxsize=4096)
def gpu_count(milli: int) -> str:
    """ "1 GPU", "8 GPUs", "0.5 GPU"."""
    return f"{gpus(milli)} GPU" + ("s" if milli > MILLI else "")
