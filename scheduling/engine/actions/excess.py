"""The leaves of a reclaim region ranked by their excess over fair share, the victim search's
order of quotas to take from (SCHEDULING.md §3.2, "from the quota furthest above its fair
share"), kept between the searches of a cycle (split out of `actions.reclaim`)."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort

from scheduling.engine import resource_rules
from scheduling.engine.session import Session


def leaves_by_excess(session: Session, region: tuple[int, int]) -> list[tuple[float, int, int]]:
    """The region's leaves as a heap, the one furthest above its fair share on top.

    Kept per region as a sorted list (a heap too) and brought up to date with the leaves whose
    allocation changed since (`Session.allocated_leaves`): a leaf's excess reads its own figures
    only, and a cycle may run hundreds of searches over the same ten thousand leaves, each
    changing a few. Copied for each search, which pops and pushes its own.
    """
    log = session.allocated_leaves
    kept = session.ranked.get(region)
    if kept is None:
        entries = excess_heap(session, region)
        entries.sort()
        kept = session.ranked[region] = Ranking(entries, {entry[2]: entry for entry in entries}, len(log))
    elif kept.seen < len(log):
        by_leaf = kept.by_leaf
        changed = sorted({leaf for leaf in log[kept.seen :] if leaf in by_leaf})
        kept.seen = len(log)
        entries = kept.entries
        for old, new in zip(
            [by_leaf[leaf] for leaf in changed], resource_rules.excess_entries(session, changed), strict=True
        ):
            if old != new:
                del entries[bisect_left(entries, old)]
                insort(entries, new)
                by_leaf[new[2]] = new
    return kept.entries.copy()


class Ranking:
    """A region's leaves in excess order (`leaves_by_excess`), each leaf's entry, and how much of
    `Session.allocated_leaves` they reflect."""

    __slots__ = ("by_leaf", "entries", "seen")

    def __init__(self, entries: list[tuple[float, int, int]], by_leaf: dict[int, tuple[float, int, int]], seen: int):
        self.entries = entries
        self.by_leaf = by_leaf
        self.seen = seen


def excess_heap(session: Session, region: tuple[int, int]) -> list[tuple[float, int, int]]:
    """The region's leaves ranked on the current state, uncached: in the middle of a search the
    allocation generation is no key (a search that finds nothing puts it back, and the next
    one reaches the same number with other victims taken)."""
    heap = resource_rules.excess_entries(session, session.candidate_leaves[region[0] : region[1]])
    heapq.heapify(heap)
    return heap
