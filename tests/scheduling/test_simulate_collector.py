"""The collector's young generation during a simulation: raised for the block, then restored."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from scheduling.simulate.collector import YOUNG_GENERATION, batch_collection


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
