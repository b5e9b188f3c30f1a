"""Bounds that keep a cycle fast on large pools; what they leave undone is retried next cycle.

The actions read them as `bounds.NAME` at the time of the call, so that a test may lower one.

Victim searches are bounded apart: those that found victims (each one a decision, and what
makes a cycle slow) by count, those that found none by the candidates they examined. The
same searches fail again each cycle, so a count shared by both let a head of hopeless
searches starve every job behind it, and the queue looked settled while jobs could reclaim.

A cycle over several resource pools runs once per pool (engine.pools); each pool spends the
per-cycle bounds in proportion to its share of the cluster's nodes (`share_of`), at least a
quarter of each, so that splitting a cluster into pools does not multiply what one cycle may do.
"""

import math

MAX_VICTIM_SEARCHES = 64
MAX_FAILED_CANDIDATES = 64 * 256  # candidates examined by searches that found nothing
MAX_CANDIDATES_PER_SEARCH = 256
MAX_CONSOLIDATIONS = 32
MAX_MOVERS = 8
MAX_MOVE_SETS = 64  # sets of movers looked at on one target node, fewest jobs first
MAX_TARGET_NODES = 8  # nodes tried as the target of one consolidation
MAX_RESERVATIONS = 32  # gangs at the head of a queue given a reservation (actions.reserve)


def share_of(bound: int, share: float) -> int:
    """A pool's part of a per-cycle bound: `share` of it (see the module), never less than one."""
    if share >= 1:
        return bound
    return max(1, math.ceil(bound * max(share, 0.25)))
