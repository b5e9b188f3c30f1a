"""A victim search certain to fail (`actions.preempt.futile_own_search`) is skipped with the
same answer and the same count of candidates examined as the search it stands for.

The oracle is the search itself: wherever the shortcut answers, the full search is run on the
same session (it rolls back when it fails) and must fail having examined as many candidates.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine import Job, Node, Quota, ReplicaPlacement, Snapshot, schedule
from tests.scheduling.engine.search_oracle import check_shortcut
from tests.scheduling.engine.test_properties import SETTINGS, play, pools, snapshots

ANSWERED: list[int] = []


@pytest.fixture
def oracle(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Each answer of the shortcut checked against the full search, and kept."""
    answered: list[int] = []
    check_shortcut(monkeypatch, "futile_own_search", answered)
    yield answered


def test_a_search_among_too_small_own_victims_is_skipped_with_its_count(oracle: list[int]) -> None:
    # team holds 2 + 1 GPUs of low priority on an 8-GPU node that others fill; a priority-9 job
    # of 8 GPUs could take both and still be 5 short: the search examines 2 and fails.
    def running(job_id: str, quota: str, devices: tuple[int, ...], priority: int) -> Job:
        return Job(
            job_id,
            quota,
            len(devices),
            priority=priority,
            state="running",
            started_at=1.0,
            submitted_at=1.0,
            placements=(ReplicaPlacement("n-0", devices),),
        )

    jobs = (
        running("t1", "team", (0, 1), 1),
        running("t2", "team", (2,), 1),
        running("o1", "other", (3, 4, 5, 6, 7), 5),
        Job("big", "team", 8, priority=9, submitted_at=2.0),
    )
    quotas = (Quota("team", None, 0), Quota("other", None, 8))
    result = schedule(Snapshot((Node("n-0", 8),), quotas, jobs, 10.0))
    assert not [d for d in result.decisions if d.job_id in ("t1", "t2")]
    assert oracle == [2]


@st.composite
def borrowers_outranked(draw: st.DrawFn) -> tuple[Snapshot, tuple[Job, ...]]:
    """A quota with no guarantee (so no reclaim region) whose jobs of every priority arrive
    among a guaranteed quota's: its urgent jobs then search among its own lower-priority ones."""
    node_list = draw(pools())
    capacity = sum(n.gpus for n in node_list)
    quota_list = (
        Quota("team", None, 0, weight=draw(st.sampled_from([0, 1])), same_level_preemption=draw(st.booleans())),
        Quota("other", None, capacity),
    )
    jobs = []
    for n in range(draw(st.integers(1, 14))):
        gpus = draw(st.sampled_from([0.5, 1, 1, 2, 4, 8]))
        replicas = draw(st.integers(1, 2))
        elastic = gpus >= 1 and replicas > 1 and draw(st.integers(0, 3)) == 0
        jobs.append(
            Job(
                f"j{n}",
                draw(st.sampled_from(["team", "team", "other"])),
                gpus,
                replicas=replicas,
                min_replicas=1 if elastic else None,
                priority=draw(st.integers(1, 9)),
                preemptible=draw(st.integers(0, 4)) > 0,
                submitted_at=float(n),
            )
        )
    placement = draw(st.sampled_from(["pack", "spread"]))
    return Snapshot(node_list, quota_list, (), 0.0, placement), tuple(jobs)


def agrees_with_the_search(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        check_shortcut(patch, "futile_own_search", ANSWERED)
        play(*case)


# 200 examples answer the shortcut about 50 times (the general snapshots rarely do).
@given(borrowers_outranked())
@settings(SETTINGS, max_examples=200)
def test_the_shortcut_agrees_with_the_search(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    agrees_with_the_search(case)


@given(snapshots())
@SETTINGS
def test_the_shortcut_agrees_with_the_search_on_any_tree(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    agrees_with_the_search(case)
