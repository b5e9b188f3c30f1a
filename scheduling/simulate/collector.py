"""Python's cyclic garbage collector tuned for one simulation: a batch that builds a large heap
which lives to the end (the scenario's jobs, the cycle's snapshot of them, the database rows).

With the default thresholds (700, 10, 10) the collector kept re-reading that heap: S3 in 10 bursts
of 1,000 jobs ran 3,046 young, 277 middle and 19 full collections, 3.6 s of its 26 s of CPU (the
full ones 115 ms each), and parsing the 10,000-job file took twice as long as with no collector.
With a young generation of 20,000 objects: 70–93 young, 7–9 middle and 0–1 full collections, 1.0–1.9 s;
memory the same (234 MB against 232 MB). Collection still runs, so garbage with reference cycles
is freed as before, only in fewer, larger passes.

A cycle runs with the collector paused (scheduling.gc_pauses), so what it keeps (the snapshot's
memory of every job, the commit's rows) reached the young generation all at once, and the next
young and middle collections read it all again before it settled in the oldest: S3's 7 middle
collections cost 0.5 s of CPU. `set_aside` (gc.freeze) after each cycle moves what the heap holds
out of the collector's reach instead; what later dies by its reference count is freed as ever, and
the outermost block gives the set-aside objects back to the collector when it ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

YOUNG_GENERATION: Final = 20_000

# How many batch_collection blocks are open, and whether the outermost will unfreeze when it
# ends: set_aside freezes only then, so that every object it froze goes back to the collector.
_open_blocks = 0
_unfreezes = False


@contextmanager
def batch_collection() -> Iterator[None]:
    """The collector's young generation raised to YOUNG_GENERATION objects for the block, then
    restored (a nested block leaves the outer one's setting). The outermost block unfreezes what
    `set_aside` froze, unless something outside had frozen objects of its own before it began
    (then `set_aside` does nothing)."""
    global _open_blocks, _unfreezes
    thresholds = gc.get_threshold()
    outermost = _open_blocks == 0
    if outermost:
        _unfreezes = gc.get_freeze_count() == 0
    gc.set_threshold(max(YOUNG_GENERATION, thresholds[0]), *thresholds[1:])
    _open_blocks += 1
    try:
        yield
    finally:
        _open_blocks -= 1
        gc.set_threshold(*thresholds)
        if outermost and _unfreezes:
            _unfreezes = False
            gc.unfreeze()


def set_aside() -> None:
    """Everything the heap holds now kept out of the collector's passes until the outermost
    batch_collection block ends (nothing outside one). For the moment after a cycle, which ran
    with the collector paused: what it keeps is live state, freed by its reference count whenever
    it dies, frozen or not; garbage with reference cycles not yet collected is frozen with it and
    collected once the block gives it back (S3: the same peak memory, 197 MB)."""
    if _unfreezes:
        gc.freeze()
