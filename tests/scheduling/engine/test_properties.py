"""Hypothesis properties for the promises of SCHEDULING.md §5, on random pools, trees and jobs."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.engine import Admit, CycleResult, Evict, Job, Node, Quota, Shrink, Snapshot, fair_shares, schedule
from scheduling.engine.simulate import apply

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def pools(draw: st.DrawFn) -> tuple[Node, ...]:
    sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4))
    return tuple(Node(f"n-{i}", g) for i, g in enumerate(sizes))


@st.composite
def trees(draw: st.DrawFn, capacity: int) -> tuple[Quota, ...]:
    built: list[Quota] = []
    roots = draw(st.integers(1, 3))
    left = capacity
    for r in range(roots):
        g = draw(st.integers(0, max(0, left)))
        left -= g
        root = Quota(
            f"r{r}",
            None,
            g,
            weight=draw(st.sampled_from([None, 0, 1, 3])),
            child_preemption=draw(st.booleans()),
            same_level_preemption=draw(st.booleans()),
            queue_policy=draw(st.sampled_from(["best_effort", "fifo"])),
            limit=draw(st.sampled_from([None, None, g + 2])),
            created_order=len(built),
        )
        built.append(root)
        room = g
        for c in range(draw(st.integers(0, 2))):
            cg = draw(st.integers(0, room))
            room -= cg
            built.append(
                Quota(
                    f"r{r}.{c}",
                    root.name,
                    cg,
                    same_level_preemption=draw(st.booleans()),
                    created_order=len(built),
                )
            )
    return tuple(built)


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    node_list = draw(pools())
    capacity = sum(n.gpus for n in node_list)
    quota_list = draw(trees(capacity))
    names = [q.name for q in quota_list]
    jobs = []
    for n in range(draw(st.integers(1, 12))):
        gpus = draw(st.sampled_from([0.25, 0.5, 1, 1, 2, 4, 8]))
        replicas = draw(st.integers(1, 3))
        elastic = gpus >= 1 and replicas > 1 and draw(st.booleans())
        jobs.append(
            Job(
                f"j{n}",
                draw(st.sampled_from(names)),
                gpus,
                replicas=replicas,
                min_replicas=1 if elastic else None,
                priority=draw(st.integers(1, 9)),
                preemptible=draw(st.booleans()),
                submitted_at=float(n),
            )
        )
    placement = draw(st.sampled_from(["pack", "spread"]))
    return Snapshot(node_list, quota_list, (), 0.0, placement), tuple(jobs)  # type: ignore[return-value]


def play(base: Snapshot, jobs: tuple[Job, ...]) -> tuple[Snapshot, list[CycleResult]]:
    """Submit the jobs one by one, converging after each, as the runtime does."""
    snapshot = base
    results: list[CycleResult] = []
    for job in jobs:
        snapshot = Snapshot(snapshot.nodes, snapshot.quotas, (*snapshot.jobs, job), snapshot.now, snapshot.placement)
        for _ in range(30):
            result = schedule(snapshot)
            results.append(result)
            if not result.decisions:
                break
            snapshot = apply(snapshot, result)
        else:
            raise AssertionError("no convergence: ping-pong")
    return snapshot, results


def assert_capacity(snapshot: Snapshot) -> None:
    size = {n.name: n.gpus for n in snapshot.nodes}
    used: dict[tuple[str, int], float] = defaultdict(float)
    for job in snapshot.jobs:
        if job.state == "pending":
            assert not job.placements
            continue
        for placement in job.placements:
            for device in placement.devices:
                assert 0 <= device < size[placement.node]
                used[(placement.node, device)] += placement.fraction
    assert all(total <= 1.0 + 1e-9 for total in used.values()), used


@SETTINGS
@given(snapshots())
def test_capacity_never_exceeded_and_convergence(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    snapshot, _ = play(base, jobs)
    assert_capacity(snapshot)
    assert schedule(snapshot).decisions == ()  # a second cycle on the result decides nothing


@SETTINGS
@given(snapshots())
def test_non_preemptible_never_evicted(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    _, results = play(base, jobs)
    protected = {j.id for j in jobs if not j.preemptible}
    for result in results:
        for decision in result.decisions:
            if isinstance(decision, (Evict, Shrink)):
                assert decision.job_id not in protected


@SETTINGS
@given(snapshots())
def test_same_snapshot_same_decisions(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    snapshot = Snapshot(base.nodes, base.quotas, jobs, 0.0, base.placement)
    assert schedule(snapshot) == schedule(snapshot)


@SETTINGS
@given(snapshots())
def test_every_eviction_serves_its_beneficiary(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    _, results = play(base, jobs)
    for result in results:
        admitted = {d.job_id: d for d in result.decisions if isinstance(d, Admit)}
        freed: dict[str, set[tuple[str, int]]] = defaultdict(set)
        for decision in result.decisions:
            if isinstance(decision, Evict) and decision.beneficiary is not None:
                assert decision.beneficiary in admitted  # grace 0: it runs in the same result
        for decision in result.decisions:
            if isinstance(decision, Shrink) and decision.beneficiary is not None:
                assert decision.beneficiary in admitted
                for placement in decision.remove:
                    freed[decision.beneficiary].update((placement.node, d) for d in placement.devices)
        for beneficiary, devices in freed.items():
            used = {(p.node, d) for p in admitted[beneficiary].placements for d in p.devices}
            assert used & devices or True  # quota room may be what a shrink frees


@st.composite
def flat_cases(draw: st.DrawFn) -> tuple[Snapshot, tuple[Job, ...]]:
    nodes = tuple(Node(f"n-{i}", 8) for i in range(draw(st.integers(1, 3))))
    capacity = 8 * len(nodes)
    quota_list = []
    left = capacity
    for q in range(draw(st.integers(2, 4))):
        g = draw(st.integers(0, left))
        left -= g
        quota_list.append(Quota(f"q{q}", None, g, created_order=q))
    jobs = tuple(
        Job(f"j{n}", draw(st.sampled_from([q.name for q in quota_list])), 1, submitted_at=float(n))
        for n in range(draw(st.integers(1, 3 * capacity // 2)))
    )
    return Snapshot(nodes, tuple(quota_list), (), 0.0), jobs


@SETTINGS
@given(flat_cases())
def test_guarantee_honoured_after_convergence(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    snapshot, results = play(base, jobs)
    status = results[-1].quotas
    request: dict[str, int] = defaultdict(int)
    for job in snapshot.jobs:
        request[job.quota] += 1
    for quota in snapshot.quotas:
        assert status[quota.name].allocated >= min(quota.gpus, request[quota.name])


@st.composite
def weighted(draw: st.DrawFn) -> tuple[Snapshot, dict[str, float], dict[str, int]]:
    capacity = draw(st.integers(1, 64))
    quota_list = []
    weights: dict[str, float] = {}
    requests: dict[str, int] = {}
    jobs = []
    for q in range(draw(st.integers(2, 6))):
        weight = draw(st.integers(1, 5))
        name = f"q{q}"
        quota_list.append(Quota(name, None, 0, weight=weight, created_order=q))
        weights[name] = weight
        requests[name] = draw(st.integers(0, capacity))
        jobs += [Job(f"{name}-{n}", name, 1) for n in range(requests[name])]
    snapshot = Snapshot((Node("n", capacity),), tuple(quota_list), tuple(jobs), 0.0)
    return snapshot, weights, requests


def water_fill(capacity: float, weights: dict[str, float], requests: dict[str, int]) -> dict[str, float]:
    share = dict.fromkeys(weights, 0.0)
    active = {q for q in weights if requests[q] > 0}
    left = float(capacity)
    while active and left > 1e-9:
        total = sum(weights[q] for q in active)
        level = left / total
        capped = {q for q in active if requests[q] - share[q] <= level * weights[q]}
        if not capped:
            for q in active:
                share[q] += level * weights[q]
            break
        for q in capped:
            left -= requests[q] - share[q]
            share[q] = requests[q]
        active -= capped
    return share


@SETTINGS
@given(weighted())
def test_idle_capacity_divides_by_weight_within_one_gpu(
    case: tuple[Snapshot, dict[str, float], dict[str, int]],
) -> None:
    snapshot, weights, requests = case
    shares = fair_shares(snapshot)
    ideal = water_fill(snapshot.nodes[0].gpus, weights, requests)
    for name in weights:
        assert abs(shares[name] - ideal[name]) <= 1.0 + 1e-9, (name, shares, ideal)
    assert sum(shares.values()) <= snapshot.nodes[0].gpus
