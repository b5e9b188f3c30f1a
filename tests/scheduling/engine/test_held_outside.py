"""Devices held by work outside the console (a Slurm job submitted by hand, `Node.held_outside`)
are never free to the console's jobs and are not part of what fair share divides."""

from __future__ import annotations

import pytest

from scheduling.engine import Node, Quota
from scheduling.engine.fairshare import fair_shares
from tests.scheduling.engine.helpers import Scenario

TREE = (Quota("a", None, 2, created_order=0), Quota("b", None, 2, created_order=1))


def scenario(*held: tuple[int, ...]) -> Scenario:
    return Scenario(tuple(Node(f"n{i}", 2, held_outside=devices) for i, devices in enumerate(held, start=1)), TREE)


@pytest.mark.parametrize(
    ("held", "gpus", "expected"),
    [
        pytest.param(((), ()), 2, "running", id="nothing held outside: a 2-GPU job fits"),
        pytest.param(((0,), (1,)), 2, "pending", id="one GPU of each node held: no node has 2 free"),
        pytest.param(((0, 1), ()), 2, "running", id="one node wholly held: the other takes it"),
        pytest.param(((0, 1), (0, 1)), 1, "pending", id="every GPU held: not even 1 GPU fits"),
    ],
)
def test_a_job_fits_only_on_devices_no_outside_job_holds(
    held: tuple[tuple[int, ...], ...], gpus: int, expected: str
) -> None:
    s = scenario(*held).submit("j", "a", gpus)

    assert s.state("j") == expected


def test_a_job_gets_the_devices_left_free_and_never_a_held_one() -> None:
    s = scenario((0, 1), (1,)).submit("j", "a", 1)

    (placement,) = s.job("j").placements
    assert (placement.node, placement.devices) == ("n2", (0,))


@pytest.mark.parametrize(
    ("held", "share", "running"),
    [
        pytest.param(((), ()), 4.0, 4, id="nothing held: a borrows b's idle 2"),
        pytest.param(((0,), ()), 3.0, 3, id="one GPU held outside: a borrows 1"),
        pytest.param(((0, 1), (1,)), 2.0, 1, id="three held: a keeps its guarantee, runs on the one left"),
    ],
)
def test_fair_share_divides_only_the_gpus_the_console_may_use(
    held: tuple[tuple[int, ...], ...], share: float, running: int
) -> None:
    s = scenario(*held)
    for number in range(4):
        s.submit(f"a-{number}", "a", 1)

    assert fair_shares(s.snapshot)["a"] == pytest.approx(share)
    assert [s.state(f"a-{number}") for number in range(4)].count("running") == running
