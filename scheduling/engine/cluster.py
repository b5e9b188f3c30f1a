"""Free capacity of the pool, per node and per device, with an undo journal.

The victim search tries evictions and placements in simulation; every change is recorded as
its inverse in a journal so that a statement can roll back to a checkpoint without copying
state (KAI-Scheduler's Statement). Whole free devices are indexed per node in buckets by their
count, so "fullest node that fits" (pack) or "emptiest node" (spread) costs a few heap peeks.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any

from scheduling.engine.fairshare import MILLI
from scheduling.engine.types import Node

# (node index, device indices, milli-GPUs taken on each device)
Placement = tuple[int, tuple[int, ...], int]


class Journal:
    """Undo log shared by the cluster and the session."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []

    def checkpoint(self) -> int:
        return len(self.entries)

    def record(self, undo: Callable[..., Any], *args: Any) -> None:
        self.entries.append((undo, args))

    def rollback(self, mark: int) -> None:
        entries = self.entries
        while len(entries) > mark:
            undo, args = entries.pop()
            undo(*args)


class Cluster:
    __slots__ = (
        "buckets",
        "cpu_free",
        "dev_free",
        "free_total",
        "gpus",
        "index",
        "journal",
        "max_gpus",
        "mem_free",
        "names",
        "partial",
        "ready",
        "whole",
        "whole_total",
    )

    def __init__(self, nodes: Sequence[Node], journal: Journal) -> None:
        self.journal = journal
        self.names = [node.name for node in nodes]
        self.index = {name: i for i, name in reversed(list(enumerate(self.names)))}
        self.gpus = [max(0, node.gpus) for node in nodes]
        # "ready" here is "takes new placements": a cordoned or draining node keeps what runs on
        # it (the session takes what runs there out of `dev_free` before `build_index`) but offers
        # no free GPU to anyone.
        self.ready = [node.placeable for node in nodes]
        self.dev_free = [[MILLI] * g for g in self.gpus]
        for n, node in enumerate(nodes):
            for d in node.held_outside:
                if 0 <= d < self.gpus[n]:
                    self.dev_free[n][d] = 0
        self.cpu_free = [float(n.cpu) if n.cpu > 0 else math.inf for n in nodes]
        self.mem_free = [float(n.memory_gib) if n.memory_gib > 0 else math.inf for n in nodes]
        self.max_gpus = max((g for g, r in zip(self.gpus, self.ready, strict=False) if r), default=0)
        self.whole: list[int] = []
        self.buckets: list[list[int]] = []
        self.partial: dict[tuple[int, int], int] = {}
        self.free_total = 0
        self.whole_total = 0

    # -- building -----------------------------------------------------------------------
    # The session takes each running replica out of `dev_free`, `cpu_free` and `mem_free` first
    # (no journal, no index upkeep: 50,000 jobs at S4), then the index is built once.
    def build_index(self) -> None:
        self.buckets = [[] for _ in range(self.max_gpus + 1)]
        self.whole = [0] * len(self.names)
        for n, free in enumerate(self.dev_free):
            count = 0
            for d, milli in enumerate(free):
                if milli >= MILLI:
                    count += 1
                elif milli > 0 and self.ready[n]:
                    self.partial[(n, d)] = milli
                if self.ready[n] and milli > 0:
                    self.free_total += milli
            self.whole[n] = count
            if self.ready[n]:
                self.whole_total += count
                self.buckets[count].append(n)

    # -- changes ------------------------------------------------------------------------
    def adjust(self, placement: Placement, sign: int, cpu: float, memory: float) -> None:
        """sign=-1 takes the placement's capacity, +1 gives it back; journaled."""
        self._apply(placement, sign, cpu, memory)
        self.journal.record(self._apply, placement, -sign, cpu, memory)

    def _apply(self, placement: Placement, sign: int, cpu: float, memory: float) -> None:
        node, devices, milli = placement
        free = self.dev_free[node]
        ready = self.ready[node]
        whole_before = self.whole[node]
        count = whole_before
        delta = sign * milli
        for d in devices:
            before = free[d]
            after = before + delta
            free[d] = after
            if before >= MILLI and after < MILLI:
                count -= 1
            elif before < MILLI and after >= MILLI:
                count += 1
            if ready:
                self.free_total += max(after, 0) - max(before, 0)
                if 0 < after < MILLI:
                    self.partial[(node, d)] = after
                else:
                    self.partial.pop((node, d), None)
        self.cpu_free[node] += sign * cpu
        self.mem_free[node] += sign * memory
        if count != whole_before:
            self.whole[node] = count
            if ready:
                self.whole_total += count - whole_before
                heapq.heappush(self.buckets[count], node)

    # -- search -------------------------------------------------------------------------
    def _fits_other(self, node: int, cpu: float, memory: float) -> bool:
        return self.cpu_free[node] >= cpu and self.mem_free[node] >= memory

    def find_whole(self, count: int, cpu: float, memory: float, spread: bool) -> int:
        """Node for a replica of `count` whole devices: fullest that fits, or emptiest."""
        if count > self.max_gpus or self.whole_total < count:
            return -1
        whole = self.whole
        buckets = self.buckets
        levels = range(self.max_gpus, count - 1, -1) if spread else range(count, self.max_gpus + 1)
        for level in levels:
            heap = buckets[level]
            while heap and whole[heap[0]] != level:
                heapq.heappop(heap)
            if not heap:
                continue
            if (cpu <= 0 and memory <= 0) or self._fits_other(heap[0], cpu, memory):
                return heap[0]
            # the lowest-numbered node of the level with the CPU and memory free (one pass, no sort)
            fitting = [node for node in heap if whole[node] == level and self._fits_other(node, cpu, memory)]
            if fitting:
                return min(fitting)
        return -1

    def place_whole(self, count: int, cpu: float, memory: float, spread: bool) -> Placement | None:
        node = self.find_whole(count, cpu, memory, spread)
        if node < 0:
            return None
        devices: list[int] = []
        for d, milli in enumerate(self.dev_free[node]):
            if milli >= MILLI:
                devices.append(d)
                if len(devices) == count:
                    break
        placement = (node, tuple(devices), MILLI)
        self.adjust(placement, -1, cpu, memory)
        return placement

    def place_fraction(self, milli: int, cpu: float, memory: float, spread: bool) -> Placement | None:
        if self.free_total < milli:
            return None
        best: tuple[int, int, int] | None = None
        for (node, d), free in self.partial.items():
            if free < milli or not self._fits_other(node, cpu, memory):
                continue
            key = (-free if spread else free, node, d)
            if best is None or key < best:
                best = key
        if spread or best is None:
            node = self.find_whole(1, cpu, memory, spread)
            if node >= 0:
                d = next(i for i, free in enumerate(self.dev_free[node]) if free >= MILLI)
                best = (0, node, d)
        if best is None:
            return None
        placement = (best[1], (best[2],), milli)
        self.adjust(placement, -1, cpu, memory)
        return placement

    def place_replica(self, milli: int, cpu: float, memory: float, spread: bool) -> Placement | None:
        if milli < MILLI:
            return self.place_fraction(milli, cpu, memory, spread)
        return self.place_whole(milli // MILLI, cpu, memory, spread)

    def largest_block(self) -> int:
        """Largest number of whole free devices on one ready node."""
        for level in range(self.max_gpus, 0, -1):
            heap = self.buckets[level]
            while heap and self.whole[heap[0]] != level:
                heapq.heappop(heap)
            if heap:
                return level
        return 0

    def largest_device_free(self) -> int:
        if self.whole_total:
            return MILLI
        return max(self.partial.values(), default=0)
