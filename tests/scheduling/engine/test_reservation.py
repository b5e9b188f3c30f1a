"""Reservations (docs/scheduling.md, "Reservations"): the gang at the head of a quota's queue
that does not fit keeps the GPUs where it will fit soonest; a later job uses them only if it
cannot delay it (fewer GPUs, and a known duration that ends before the reservation starts).

The pool below, at t = 0: four nodes of 4 GPUs; team-b's non-preemptible jobs (within its
guarantee of 8, so nothing can be reclaimed or moved) hold 2 GPUs of gpu-1 until 100 s, all of
gpu-2 until 100 s and 2 GPUs of gpu-3 until 40 s; gpu-4 is free. team-a's gang `big` (2 × 4
GPUs, within team-a's guarantee of 8) does not fit: 8 GPUs are free, but only gpu-4 whole. It
fits soonest on gpu-3 and gpu-4, at 40 s.

A later team-a job within team-a's guarantee passes the gang's reservation once the gang is
above the guarantee (SCHEDULING.md §5: a quota below its guarantee does not keep GPUs idle for
its own gang). The rules for a job that may not pass it are pinned under `TIGHT`, where team-a
is guaranteed 2 GPUs: the gang is a borrower, and so is every team-a job beyond the first 2.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scheduling.engine import Job, Node, Quota, ReplicaPlacement, Snapshot, schedule
from scheduling.engine.simulate import apply, converge

TREE = (Quota("team-a", None, 8, created_order=0), Quota("team-b", None, 8, created_order=1))
TIGHT = (Quota("team-a", None, 2, created_order=0), TREE[1])
NODES = tuple(Node(f"gpu-{n}", 4) for n in range(1, 5))


def held(job_id: str, node: str, devices: tuple[int, ...], ends: float) -> Job:
    """A non-preemptible team-b job running since 0 and expected to end at `ends`."""
    return Job(
        job_id,
        "team-b",
        len(devices),
        priority=5,
        preemptible=False,
        state="running",
        started_at=0.0,
        duration=ends,
        placements=(ReplicaPlacement(node, devices),),
    )


RUNNING = (
    held("b-1", "gpu-1", (0, 1), 100.0),
    held("b-2", "gpu-2", (0, 1, 2, 3), 100.0),  # team-b holds 8: its guarantee
    held("b-3", "gpu-3", (0, 1), 40.0),
)
BIG = Job("big", "team-a", 4, replicas=2, submitted_at=1.0)


def later(job_id: str, gpus: float, duration: float | None, **fields: Any) -> Job:
    """A team-a job queued behind `big` (same priority, submitted after it)."""
    return Job(job_id, "team-a", gpus, duration=duration, submitted_at=2.0 + len(job_id), **fields)


def settle(*jobs: Job, tree: tuple[Quota, ...] = TREE) -> Snapshot:
    snapshot, _ = converge(Snapshot(NODES, tree, (*RUNNING, BIG, *jobs), 0.0))
    return snapshot


def where(snapshot: Snapshot, job_id: str) -> str:
    job = next(j for j in snapshot.jobs if j.id == job_id)
    return job.state if job.state != "running" else "running on " + ", ".join(p.node for p in job.placements)


def test_the_head_gang_gets_a_reservation_explained_on_its_page() -> None:
    reason = schedule(settle()).pending["big"]

    assert reason.code == "no_fit"
    assert reason.message == (
        "reserved: gpu-3 and gpu-4 free in about 40 s; 6 of the 8 GPUs it needs are free now and kept for it"
    )


@pytest.mark.parametrize(
    ("behind", "expected", "code"),
    [
        pytest.param(
            (later("x", 2, None),), "running on gpu-1", None, id="unknown duration: the 2 GPUs outside the reservation"
        ),
        pytest.param(
            (later("x", 2, None), later("y", 2, None)),
            "pending",
            "behind_reservation",
            id="unknown duration, nothing left outside: kept off the reserved GPUs",
        ),
        pytest.param(
            (later("x", 2, None), later("y", 2, 30.0)),
            "running on gpu-3",
            None,
            id="ends at 30 s, before the reservation starts at 40 s: backfills",
        ),
        pytest.param(
            (later("x", 2, None), later("y", 2, 50.0)),
            "pending",
            "behind_reservation",
            id="would run until 50 s, past the start: kept off",
        ),
        pytest.param(
            (later("x", 2, None), later("y", 4, 10.0, replicas=2)),
            "pending",
            "insufficient_capacity",
            id="asks as many GPUs as the reserved gang: kept off, however short",
        ),
        pytest.param(
            (later("x", 2, None), later("y", 4, 10.0)),
            "running on gpu-4",
            None,
            id="fewer GPUs and short: a whole reserved node until the start",
        ),
    ],
)
def test_a_later_job_beyond_its_guarantee_uses_reserved_gpus_only_if_it_cannot_delay_the_gang(
    behind: tuple[Job, ...], expected: str, code: str | None
) -> None:
    # under TIGHT, x takes team-a to its guarantee of 2: every job after it is beyond it
    snapshot = settle(*behind, tree=TIGHT)
    last = behind[-1].id

    assert where(snapshot, last) == expected
    assert where(snapshot, "big") == "pending"
    pending = schedule(snapshot).pending
    assert (pending[last].code if last in pending else None) == code


@pytest.mark.parametrize(
    ("duration", "reserved"),
    [
        pytest.param(None, "gpu-2 and gpu-4 free in about 100 s", id="unknown duration: the gang waits for gpu-2"),
        pytest.param(50.0, "gpu-3 and gpu-4 free in about 50 s", id="would run until 50 s: the gang starts then"),
    ],
)
def test_a_later_job_within_its_guarantee_passes_its_own_quotas_borrowing_gang(
    duration: float | None, reserved: str
) -> None:
    # x runs 2 of team-a's 8 guaranteed GPUs: the gang (2 + 8 > 8) is above the guarantee, y
    # (2 + 2 <= 8) within it. §5: team-a gets its guarantee; the gang keeps the rest.
    snapshot = settle(later("x", 2, None), later("y", 2, duration))

    assert where(snapshot, "y") == "running on gpu-3"
    assert schedule(snapshot).pending["big"].message.startswith(f"reserved: {reserved}; 4 of the 8 GPUs")


def test_the_reason_of_a_job_kept_off_names_the_reservation() -> None:
    reason = schedule(settle(later("x", 2, None), later("y", 2, 50.0), tree=TIGHT)).pending["y"]

    assert reason.message == (
        "needs 2 GPUs; 0 are free and 6 reserved: gpu-3 and gpu-4 for big of team-a, which starts "
        "there in about 40 s; it would run past that start (50.0 s)"
    )


def test_the_reservation_ends_when_its_gang_starts() -> None:
    snapshot = settle(later("x", 2, None), later("y", 2, None), tree=TIGHT)
    # 40 s later team-b's job on gpu-3 ends, as its duration said
    ended = replace(snapshot, now=40.0, jobs=tuple(j for j in snapshot.jobs if j.id != "b-3"))
    snapshot, _ = converge(ended)

    assert where(snapshot, "big") == "running on gpu-3, gpu-4"
    assert where(snapshot, "y") == "pending"
    assert schedule(snapshot).pending["y"].code == "insufficient_capacity"  # no reservation left


def test_the_reservation_ends_when_its_gang_leaves_the_queue() -> None:
    snapshot = settle(later("x", 2, None), later("y", 2, None))
    cancelled = replace(snapshot, jobs=tuple(j for j in snapshot.jobs if j.id != "big"))
    snapshot, _ = converge(cancelled)

    assert where(snapshot, "y") == "running on gpu-3"


def test_a_reservation_never_holds_more_than_its_gang_asks() -> None:
    # 8-GPU nodes: gpu-3 has 6 free (2 busy until 100 s), gpu-4 none until 40 s. The gang of
    # 2 × 4 takes 4 of gpu-3's 6 now and gpu-4 at 40 s: the other 2 of gpu-3 stay free.
    nodes = (Node("gpu-3", 8), Node("gpu-4", 8))
    tree = (Quota("team-a", None, 8, created_order=0), Quota("team-b", None, 8, created_order=1))
    running = (
        replace(held("b-3", "gpu-3", (0, 1), 100.0), gpus=2),
        replace(held("b-4", "gpu-4", tuple(range(8)), 40.0), gpus=8, preemptible=True),
    )
    quick = Quota("team-b", None, 10, created_order=1)
    snapshot = Snapshot(nodes, (tree[0], quick), (*running, BIG, later("x", 2, None)), 0.0)
    snapshot, _ = converge(snapshot)

    assert where(snapshot, "x") == "running on gpu-3"
    assert schedule(snapshot).pending["big"].message.startswith("reserved: gpu-3 and gpu-4 free in about 40 s; 4 of")


def test_a_borrowers_reservation_gives_way_to_an_entitled_job_of_another_quota() -> None:
    # team-a (guaranteed 3) already runs 2 GPUs: the gang would take it to 10, above its
    # guarantee and fair share, so its reservation is a borrower's. team-c's job, within its
    # guarantee, may use the reserved GPUs; team-a's own later job, behind the gang and beyond
    # team-a's guarantee (2 + 2 > 3), may not.
    tree = (
        Quota("team-a", None, 3, created_order=0),
        Quota("team-b", None, 8, created_order=1),
        Quota("team-c", None, 2, created_order=2),
    )
    mine = Job("a-0", "team-a", 2, state="running", started_at=0.0, placements=(ReplicaPlacement("gpu-1", (2, 3)),))
    theirs = Job("c-1", "team-c", 2, submitted_at=3.0)
    snapshot = Snapshot(NODES, tree, (*RUNNING, mine, BIG, later("a-1", 2, None), theirs), 0.0)
    snapshot, _ = converge(snapshot)
    pending = schedule(snapshot).pending

    assert where(snapshot, "c-1") == "running on gpu-3"
    assert where(snapshot, "a-1") == "pending"
    assert pending["a-1"].code == "behind_reservation"
    # c-1 has no expected end: the gang now fits soonest where team-b's jobs end at 100 s
    assert pending["big"].message.startswith("reserved: gpu-2 and gpu-4 free in about 100 s")


def test_a_job_within_its_guarantee_takes_a_borrowers_reservation_under_a_borrowing_parent() -> None:
    # A chain org > dept > team (8 GPUs each, one node of 8). The parents' own jobs are borrowers
    # (their children guarantee all 8): org's 4-GPU gang reserves the 3 free GPUs. team's 4-GPU
    # job is within team's guarantee (2 + 4 <= 8) but takes dept above its own: judged by its
    # ancestors it looked like a borrower too, could not use the reservation, and waited for
    # ever. Found by the deep-tree guarantee property at 5,000 examples.
    tree = (
        Quota("org", None, 8, created_order=0),
        Quota("dept", "org", 8, created_order=1),
        Quota("team", "dept", 8, created_order=2),
    )
    own = tuple(
        Job(f"dept-{n}", "dept", 1, state="running", started_at=0.0, placements=(ReplicaPlacement("gpu-1", (n,)),))
        for n in range(3)
    )
    team = tuple(
        Job(f"team-{n}", "team", 1, state="running", started_at=0.0, placements=(ReplicaPlacement("gpu-1", (n,)),))
        for n in (3, 4)
    )
    gang = Job("org-gang", "org", 4, submitted_at=1.0)
    entitled = Job("team-big", "team", 4, submitted_at=2.0)
    snapshot, _ = converge(Snapshot((Node("gpu-1", 8),), tree, (*own, *team, gang, entitled), 0.0))

    assert where(snapshot, "team-big") == "running on gpu-1"
    assert where(snapshot, "org-gang") == "pending"
    assert sum(where(snapshot, f"dept-{n}") == "pending" for n in range(3)) == 1  # one borrower reclaimed


# A tree r0 (16) > r0.0 (3) > r0.0.0 (1) on one node of 16: r0's own jobs are guaranteed 13,
# r0.0's own jobs 2. Found by the multi-GPU guarantee property at 5,000 examples.
NESTED = (
    Quota("r0", None, 16, created_order=0),
    Quota("r0.0", "r0", 3, created_order=1),
    Quota("r0.0.0", "r0.0", 1, created_order=2),
)


def running(quota: str, gpus: int, first: int) -> Job:
    """Jobs of `quota` running since 0 on `gpus` devices of gpu-1 from `first`, no expected end."""
    devices = tuple(range(first, first + gpus))
    return Job(
        f"{quota}-run", quota, gpus, state="running", started_at=0.0, placements=(ReplicaPlacement("gpu-1", devices),)
    )


@pytest.mark.parametrize(
    ("busy", "quota"),
    [
        pytest.param(
            (running("r0", 12, 0), running("r0.0", 1, 12)),
            "r0.0",
            id="a child's own jobs: the gang borrows (1 + 4 > 2), the job behind does not (1 + 1 <= 2)",
        ),
        pytest.param(
            (running("r0", 11, 0), running("r0.0", 2, 11)),
            "r0",
            id="a gang within the guarantee but not on top of what runs (11 + 4 > 13; 11 + 1 <= 13)",
        ),
    ],
)
def test_a_quota_below_its_guarantee_keeps_no_gpu_idle_for_its_own_gang(busy: tuple[Job, ...], quota: str) -> None:
    # 3 GPUs free; the gang's quota is below its guarantee, but the gang would take it above.
    # Its reservation kept the 1-GPU job behind it off the 3 free GPUs: behind_reservation
    # beside idle GPUs while its quota was short of its guarantee (§5).
    gang = Job("gang", quota, 4, submitted_at=1.0)
    small = Job("small", quota, 1, submitted_at=2.0)
    snapshot, _ = converge(Snapshot((Node("gpu-1", 16),), NESTED, (*busy, gang, small), 0.0))

    assert where(snapshot, "small") == "running on gpu-1"
    assert schedule(snapshot).pending["gang"].message.endswith("2 of the 4 GPUs it needs are free now and kept for it")


def test_no_reservation_without_need_and_results_apply_in_order() -> None:
    # the same pool once gpu-3 is free: the gang fits at once and nothing is reserved
    free = Snapshot(NODES, TREE, (*RUNNING[:2], BIG), 0.0)
    result = schedule(free)
    snapshot = apply(free, result)

    assert where(snapshot, "big") == "running on gpu-3, gpu-4"
    assert not result.pending
