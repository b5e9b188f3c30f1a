"""The collector's young generation during a simulation: raised for the block, then restored."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from scheduling.simulate.collector import YOUNG_GENERATION, batch_collection, set_aside


@pytest.fixture
def default_thresholds() -> Iterator[tuple[int, int, int]]:
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield (700, 10, 10)
    finally:
        gc.set_threshold(*saved)


def test_raises_the_young_generation_and_restores_it(default_thresholds: tuple[int, int, int]) -> None:
    with batch_collection():
        assert gc.get_threshold() == (YOUNG_GENERATION, 10, 10)
    assert gc.get_threshold() == default_thresholds


def test_restores_after_an_error(default_thresholds: tuple[int, int, int]) -> None:
    with pytest.raises(RuntimeError), batch_collection():
        raise RuntimeError("a scenario step failed")
    assert gc.get_threshold() == default_thresholds


def test_a_nested_block_leaves_the_outer_setting(default_thresholds: tuple[int, int, int]) -> None:
    with batch_collection():
        with batch_collection():
            pass
        assert gc.get_threshold() == (YOUNG_GENERATION, 10, 10)
    assert gc.get_threshold() == default_thresholds


def test_never_lowers_a_larger_young_generation() -> None:
    saved = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION * 5, 10, 10)
    try:
        with batch_collection():
            assert gc.get_threshold()[0] == YOUNG_GENERATION * 5
    finally:
        gc.set_threshold(*saved)


def test_set_aside_freezes_until_the_outermost_block_ends() -> None:
    assert gc.get_freeze_count() == 0
    kept = [object() for _ in range(10)]
    with batch_collection():
        with batch_collection():
            set_aside()
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0  # the inner block gives nothing back
    assert gc.get_freeze_count() == 0
    assert len(kept) == 10


def test_set_aside_outside_a_block_freezes_nothing() -> None:
    set_aside()
    assert gc.get_freeze_count() == 0


def test_gives_back_after_an_error() -> None:
    with pytest.raises(RuntimeError), batch_collection():
        set_aside()
        raise RuntimeError("a scenario step failed")
    assert gc.get_freeze_count() == 0


def test_leaves_objects_frozen_by_someone_else_alone() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        with batch_collection():
            made_since: list[list[int]] = [[] for _ in range(1_000)]  # what a freeze now would add to theirs
            set_aside()  # would mix its objects with theirs, that the block must not unfreeze
            # At most as many: a frozen object another thread of the suite lets go leaves the count.
            assert gc.get_freeze_count() <= frozen
        assert gc.get_freeze_count() <= frozen and len(made_since) == 1_000
    finally:
        gc.unfreeze()


def test_garbage_frozen_with_the_rest_is_collected_after_the_block() -> None:
    class Linked:
        partner: object = None

    with batch_collection():
        first, second = Linked(), Linked()
        first.partner, second.partner = second, first
        watched = weakref.ref(first)
        del first, second  # a reference cycle: only the collector frees it
        set_aside()
        gc.collect()
        assert watched() is not None
    gc.collect()
    assert watched() is None
