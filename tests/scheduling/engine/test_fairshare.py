"""Fair share (SCHEDULING.md §1), one named case per rule, KAI-style division cases."""

from __future__ import annotations

import pytest

from scheduling.engine import Job, Node, Quota, Snapshot, fair_shares
from tests.scheduling.engine.helpers import nodes


def asking(quota: str, gpus: float, count: int = 1, state: str = "pending") -> tuple[Job, ...]:
    return tuple(Job(f"{quota}-{n}", quota, gpus, state=state) for n in range(count))


def shares(node_list: tuple[Node, ...], quota_list: list[Quota], jobs: tuple[Job, ...]) -> dict[str, float]:
    ordered = tuple(
        Quota(**{**{f: getattr(q, f) for f in q.__slots__}, "created_order": n}) for n, q in enumerate(quota_list)
    )
    return fair_shares(Snapshot(node_list, ordered, jobs, 0.0))


CASES = [
    pytest.param(
        nodes("n", 2, 8),
        [Quota("a", None, 4), Quota("b", None, 2), Quota("c", None, 2), Quota("d", None, 8)],
        asking("a", 1, 20) + asking("b", 1, 20) + asking("c", 1, 20),
        {"a": 8, "b": 4, "c": 4, "d": 0},
        id="scheduling-md-16-gpus-split-4-2-2",
    ),
    pytest.param(
        nodes("n", 1, 10),
        [Quota("a", None, 0, weight=1), Quota("b", None, 0, weight=1), Quota("c", None, 0, weight=1)],
        asking("a", 1, 10) + asking("b", 1, 10) + asking("c", 1, 10),
        {"a": 4, "b": 3, "c": 3},
        id="rounding-leftover-goes-to-the-older-quota",
    ),
    pytest.param(
        nodes("n", 1, 10),
        [Quota("a", None, 0, weight=1), Quota("b", None, 0, weight=2), Quota("c", None, 0, weight=2)],
        asking("a", 1, 10) + asking("b", 1, 10) + asking("c", 1, 10),
        # offers 2, 4, 4: no rounding loss at all
        {"a": 2, "b": 4, "c": 4},
        id="weights-divide-exactly",
    ),
    pytest.param(
        nodes("n", 1, 7),
        [Quota("a", None, 0, weight=1), Quota("b", None, 0, weight=1)],
        asking("a", 1, 10) + asking("b", 1, 10),
        # 3.5 each: 3 + 3, the lost halves tie, the older quota takes the leftover
        {"a": 4, "b": 3},
        id="leftover-tie-older-quota",
    ),
    pytest.param(
        nodes("n", 1, 8),
        [Quota("a", None, 0, weight=1, rank=1), Quota("b", None, 0, weight=10)],
        asking("a", 1, 8) + asking("b", 1, 8),
        {"a": 8, "b": 0},
        id="rank-before-weight",
    ),
    pytest.param(
        nodes("n", 2, 8),
        [Quota("a", None, 4, limit=6), Quota("b", None, 4)],
        asking("a", 1, 16) + asking("b", 1, 16),
        {"a": 6, "b": 10},
        id="limit-caps-share-and-the-rest-goes-on",
    ),
    pytest.param(
        nodes("n", 2, 8),
        [Quota("a", None, 4, weight=0), Quota("b", None, 4)],
        asking("a", 1, 16) + asking("b", 1, 16),
        {"a": 4, "b": 12},
        id="weight-zero-gets-no-idle-share",
    ),
    pytest.param(
        nodes("n", 1, 8),
        [Quota("a", None, 8), Quota("b", None, 0)],
        asking("a", 1, 2),
        {"a": 2, "b": 0},
        id="share-never-above-request",
    ),
    pytest.param(
        nodes("n", 2, 8),
        [
            Quota("P", None, 8),
            Quota("Q", None, 8),
            Quota("x", "P", 4),
            Quota("y", "P", 4),
        ],
        asking("x", 1, 12) + asking("y", 1, 4),
        {"P": 16, "Q": 0, "x": 12, "y": 4},
        id="recursion-parent-share-divided-among-children",
    ),
    pytest.param(
        nodes("n", 1, 10),
        [Quota("P", None, 10), Quota("x", "P", 6)],
        asking("x", 1, 10) + asking("P", 1, 6),
        {"P": 10, "x": 6, "P/self": 4},
        id="self-child-holds-the-parent-remainder",
    ),
    pytest.param(
        nodes("gpu", 16, 8),
        [
            Quota("Quota1", None, 128, child_preemption=True),
            Quota("Quota1.1", "Quota1", 48),
            Quota("Quota1.2", "Quota1", 80),
        ],
        asking("Quota1", 8, 2) + asking("Quota1.1", 8, 6) + asking("Quota1.2", 8, 9) + asking("Quota1.2", 1, 1),
        # P's own jobs first against the whole 128; the children share the 112 left pro rata
        {"Quota1": 128, "Quota1/self": 16, "Quota1.1": 44, "Quota1.2": 68},
        id="child-preemption-parent-jobs-first",
    ),
    pytest.param(
        (Node("n-1", 8), Node("n-2", 8, ready=False)),
        [Quota("a", None, 8), Quota("b", None, 8)],
        asking("a", 1, 8) + asking("b", 1, 8),
        {"a": 8, "b": 8},
        id="guarantee-is-an-entitlement-when-a-node-is-down",
    ),
    pytest.param(
        nodes("n", 1, 1),
        [Quota("a", None, 0, weight=1), Quota("b", None, 0, weight=1)],
        asking("a", 0.5, 2) + asking("b", 0.25, 2),
        {"a": 0.5, "b": 0.5},
        id="fractional-requests-take-fractions",
    ),
]


@pytest.mark.parametrize(("node_list", "quota_list", "jobs", "expected"), CASES)
def test_fair_share(
    node_list: tuple[Node, ...], quota_list: list[Quota], jobs: tuple[Job, ...], expected: dict[str, float]
) -> None:
    result = shares(node_list, quota_list, jobs)
    assert {name: result[name] for name in expected} == expected


def test_running_jobs_count_in_request() -> None:
    running = (Job("r", "a", 4, state="running"),)
    result = shares(nodes("n", 1, 8), [Quota("a", None, 2), Quota("b", None, 6)], running)
    assert result == {"a": 4, "b": 0}
