"""A victim search for a non-preemptible job that cannot get within its quota's guarantee
(`actions.preempt.futile_beyond_guarantee`) is skipped with the same answer and the same count
of candidates examined as the search it stands for: the search's limit, plus one.

The oracle is the search itself: wherever the shortcut answers, the full search is run on the
same session (it rolls back when it fails) and must fail having examined as many candidates.
The limit is lowered (`bounds` is read at the time of the call) so that small pools reach it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import Job, Node, Quota, ReplicaPlacement, Snapshot, bounds, schedule
from tests.scheduling.engine.search_oracle import check_shortcut
from tests.scheduling.engine.test_properties import SETTINGS, play

LIMIT = 3  # candidates a search may examine, lowered from 256


def checked_shortcut(patch: pytest.MonkeyPatch, answered: list[int]) -> None:
    """Each answer of the shortcut checked against the full search, and kept, under the lowered limit."""
    patch.setattr(bounds, "MAX_CANDIDATES_PER_SEARCH", LIMIT)
    check_shortcut(patch, "futile_beyond_guarantee", answered)


@pytest.fixture
def oracle(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    answered: list[int] = []
    checked_shortcut(monkeypatch, answered)
    yield answered


def borrowed(job_id: str, node: str, device: int) -> Job:
    """A 1-GPU preemptible job of `other`, running."""
    return Job(
        job_id,
        "other",
        1,
        state="running",
        started_at=1.0,
        submitted_at=1.0,
        placements=(ReplicaPlacement(node, (device,)),),
    )


def test_a_non_preemptible_job_above_its_guarantee_is_skipped_at_the_limit(oracle: list[int]) -> None:
    # team's guarantee is 2 GPUs and its fair share 4; `other` (no guarantee) borrows all 16
    # GPUs in 1-GPU jobs. A non-preemptible job of team asking 4 may reclaim (within its fair
    # share) but never fits (above its guarantee, with nothing of its own to preempt): the
    # search takes victims until the limit and fails, examining LIMIT + 1.
    running = tuple(borrowed(f"o{n}", f"n-{n // 8}", n % 8) for n in range(16))
    big = Job("big", "team", 4, preemptible=False, submitted_at=2.0)
    quotas = (Quota("team", None, 2), Quota("other", None, 0))
    result = schedule(Snapshot((Node("n-0", 8), Node("n-1", 8)), quotas, (*running, big), 10.0))
    assert result.decisions == ()
    assert result.pending["big"].code == "guaranteed_only"
    assert oracle == [LIMIT + 1]


def test_a_lower_priority_job_of_its_own_leaves_it_to_the_search(oracle: list[int]) -> None:
    # The same, but team runs 2 GPUs of a lower priority: preempting them brings team back
    # within its guarantee, so the search may succeed and the shortcut does not answer.
    running = tuple(borrowed(f"o{n}", f"n-{n // 8}", n % 8) for n in range(2, 16))
    own = Job(
        "mine",
        "team",
        2,
        priority=1,
        state="running",
        started_at=1.0,
        submitted_at=1.0,
        placements=(ReplicaPlacement("n-0", (0, 1)),),
    )
    big = Job("big", "team", 4, priority=9, preemptible=False, submitted_at=2.0)
    quotas = (Quota("team", None, 4), Quota("other", None, 0))
    schedule(Snapshot((Node("n-0", 8), Node("n-1", 8)), quotas, (*running, own, big), 10.0))
    assert oracle == []


@st.composite
def guaranteed_beside_borrowers(draw: st.DrawFn) -> tuple[Snapshot, tuple[Job, ...]]:
    """A quota with a small guarantee whose non-preemptible jobs arrive among a borrower's many
    small jobs: its large ones are entitled by fair share, above the guarantee, and search."""
    nodes = tuple(Node(f"n-{i}", draw(st.sampled_from([4, 8]))) for i in range(draw(st.integers(1, 3))))
    quotas = (
        Quota("team", None, draw(st.integers(0, 4)), same_level_preemption=draw(st.booleans())),
        Quota("other", None, 0),
    )
    jobs = []
    for n in range(draw(st.integers(2, 16))):
        team = draw(st.integers(0, 3)) == 0
        jobs.append(
            Job(
                f"j{n}",
                "team" if team else "other",
                draw(st.sampled_from([2, 4, 8])) if team else draw(st.sampled_from([0.5, 1, 1, 2])),
                priority=draw(st.integers(1, 9)),
                preemptible=not team or draw(st.booleans()),
                submitted_at=float(n),
            )
        )
    return Snapshot(nodes, quotas, (), 0.0, draw(st.sampled_from(["pack", "spread"]))), tuple(jobs)


ANSWERED: list[int] = []


# 150 examples answer the shortcut a few dozen times.
@given(guaranteed_beside_borrowers())
@settings(SETTINGS, max_examples=150)
def test_the_shortcut_agrees_with_the_search(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        checked_shortcut(patch, ANSWERED)
        play(*case)


def test_the_property_reached_the_shortcut() -> None:
    # runs after the property above (file order): a property that never met the shortcut
    # would check nothing
    assert ANSWERED
