"""Python's cyclic garbage collector tuned for one simulation: a batch that builds a large heap
which lives to the end (the scenario's jobs, the cycle's snapshot of them, the database rows).

With the default thresholds (700, 10, 10) the collector kept re-reading that heap: S3 in 10 bursts
of 1,000 jobs ran 3,046 young, 277 middle and 19 full collections, 3.6 s of its 26 s of CPU (the
full ones 115 ms each), and parsing the 10,000-job file took twice as long as with no collector.
With a young generation of 20,000 objects: 70–93 young, 7–9 middle and 0–1 full collections, 1.0–1.9 s;
memory the same (234 MB against 232 MB). Collection still runs, so garbage with reference cycles
is freed as before, only in fewer, larger passes.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

YOUNG_GENERATION: Final = 20_000


@contextmanager
def batch_collection() -> Iterator[None]:
    """The collector's young generation raised to YOUNG_GENERATION objects for the block, then
    restored (a nested block leaves the outer one's setting)."""
    thresholds = gc.get_threshold()
    gc.set_threshold(max(YOUNG_GENERATION, thresholds[0]), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
