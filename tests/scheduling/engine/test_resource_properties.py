"""Hypothesis properties of CPU and memory as managed resources (SCHEDULING.md "Managed
resources", §5), on random clusters of two pools: one whose roots set CPU and memory (trees with
CPU and memory guarantees, limits, weights) and one that manages GPUs only, with jobs of both
submitted in one stream. Per node and per resource, capacity is never breached; per quota and
per resource, no limit is passed and non-preemptible jobs stay within guarantees; a quota whose
CPU request reaches its CPU guarantee gets it; a second cycle changes nothing; the same snapshot
gives the same decisions."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from scheduling.engine import Job, Node, Quota, Snapshot, schedule
from tests.scheduling.engine.test_properties import SETTINGS, assert_capacity, play

MANAGED_POOL, GPU_POOL = "managed", "gpus-only"


@st.composite
def resource_trees(draw: st.DrawFn, cpu: int, memory: int) -> tuple[Quota, ...]:
    """Roots and children with CPU and memory guarantees within their parent's (children may
    leave them unset), limits above guarantees, weights; the first root always sets CPU."""
    built: list[Quota] = []
    cpu_left, memory_left = cpu, memory
    for r in range(draw(st.integers(1, 3))):
        root_cpu = draw(st.integers(0, cpu_left)) if r else draw(st.integers(1, max(1, cpu_left)))
        cpu_left = max(0, cpu_left - root_cpu)
        root_memory = draw(st.sampled_from([None, draw(st.integers(0, memory_left))]))
        memory_left -= root_memory or 0
        root = Quota(
            f"r{r}",
            None,
            draw(st.integers(0, 4)),
            cpu=float(root_cpu),
            memory_gib=None if root_memory is None else float(root_memory),
            cpu_limit=draw(st.sampled_from([None, None, float(root_cpu + 8)])),
            memory_gib_limit=draw(st.sampled_from([None, None if root_memory is None else root_memory + 64.0])),
            weight=draw(st.sampled_from([None, None, 0, 1])),
            child_preemption=draw(st.booleans()),
            same_level_preemption=draw(st.booleans()),
            pool=MANAGED_POOL,
            created_order=len(built),
        )
        built.append(root)
        room = root_cpu
        for c in range(draw(st.integers(0, 2))):
            child_cpu = draw(st.sampled_from([None, draw(st.integers(0, room))]))
            room -= child_cpu or 0
            built.append(
                Quota(
                    f"r{r}.{c}",
                    root.name,
                    0,
                    cpu=None if child_cpu is None else float(child_cpu),
                    cpu_limit=draw(st.sampled_from([None, None, float((child_cpu or 0) + 16)])),
                    same_level_preemption=draw(st.booleans()),
                    created_order=len(built),
                )
            )
    return tuple(built)


@st.composite
def resource_cases(draw: st.DrawFn) -> tuple[Snapshot, tuple[Job, ...]]:
    nodes = [
        Node(
            f"m-{i}",
            draw(st.sampled_from([2, 4, 8])),
            cpu=draw(st.sampled_from([16, 32, 64])),
            memory_gib=draw(st.sampled_from([64, 256])),
            pool=MANAGED_POOL,
        )
        for i in range(draw(st.integers(1, 3)))
    ]
    quotas = list(draw(resource_trees(int(sum(n.cpu for n in nodes)), int(sum(n.memory_gib for n in nodes)))))
    nodes.append(Node("g-0", 4, cpu=32, memory_gib=128, pool=GPU_POOL))
    quotas.append(Quota("gpu-team", None, 4, pool=GPU_POOL, created_order=len(quotas)))
    names = [quota.name for quota in quotas]
    jobs = tuple(
        Job(
            f"j{n}",
            draw(st.sampled_from(names)),
            draw(st.sampled_from([0.5, 1, 1, 2])),
            replicas=draw(st.integers(1, 2)),
            priority=draw(st.integers(1, 9)),
            preemptible=draw(st.booleans()),
            cpu=draw(st.sampled_from([0, 2, 8, 8, 16])),
            memory_gib=draw(st.sampled_from([0, 0, 16, 64])),
            submitted_at=float(n),
        )
        for n in range(draw(st.integers(1, 12)))
    )
    placement = draw(st.sampled_from(["pack", "spread"]))
    return Snapshot(tuple(nodes), tuple(quotas), (), 0.0, placement), jobs


def held_by_node(snapshot: Snapshot) -> dict[str, tuple[float, float]]:
    held: dict[str, tuple[float, float]] = defaultdict(lambda: (0.0, 0.0))
    for job in snapshot.jobs:
        for placement in job.placements:
            cpu, memory = held[placement.node]
            held[placement.node] = (cpu + job.cpu, memory + job.memory_gib)
    return held


def subtree_sums(snapshot: Snapshot, attribute: str, only_non_preemptible: bool = False) -> dict[str, float]:
    """Per quota, what the running jobs of its subtree hold of `attribute` (cpu, memory_gib)."""
    parent = {quota.name: quota.parent for quota in snapshot.quotas}
    sums: dict[str, float] = defaultdict(float)
    for job in snapshot.jobs:
        if job.state == "pending" or (only_non_preemptible and job.preemptible):
            continue
        amount = getattr(job, attribute) * len(job.placements)
        name: str | None = job.quota
        while name is not None:
            sums[name] += amount
            name = parent.get(name)
    return sums


@SETTINGS
@given(resource_cases())
def test_capacity_per_node_and_resource_and_stability(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    final, _results = play(base, jobs)
    assert_capacity(final)
    nodes = {node.name: node for node in final.nodes}
    for name, (cpu, memory) in held_by_node(final).items():
        assert cpu <= nodes[name].cpu + 1e-9 and memory <= nodes[name].memory_gib + 1e-9, name
    for job in final.jobs:
        assert {nodes[p.node].pool for p in job.placements} <= {GPU_POOL if job.quota == "gpu-team" else MANAGED_POOL}
    assert schedule(final).decisions == ()


@SETTINGS
@given(resource_cases())
def test_limits_and_non_preemptible_guarantees_hold_per_resource(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    final, _results = play(base, jobs)
    for attribute in ("cpu", "memory_gib"):
        held = subtree_sums(final, attribute)
        protected = subtree_sums(final, attribute, only_non_preemptible=True)
        roots = [q for q in final.quotas if q.parent is None and q.pool == MANAGED_POOL]
        if all(getattr(root, attribute) is None for root in roots):
            continue  # the pool does not manage it: nodes alone bound it
        for quota in final.quotas:
            if quota.pool == GPU_POOL:
                continue
            limit = getattr(quota, f"{attribute}_limit")
            assert limit is None or held[quota.name] <= limit + 1e-9, (attribute, quota.name)
            assert protected[quota.name] <= (getattr(quota, attribute) or 0) + 1e-9, (attribute, quota.name)


@st.composite
def cpu_bound_cases(draw: st.DrawFn) -> tuple[Snapshot, tuple[Job, ...]]:
    """CPU is what is short: nodes of 16 GPUs and 32 cores, jobs of 1 GPU and 8 cores (four fit
    a node by CPU, sixteen by GPUs), GPU guarantees that cover every job a CPU guarantee can
    hold; CPU guarantees in steps of 8 cores that add up to at most the pool's."""
    node_count = draw(st.integers(1, 2))
    nodes = tuple(Node(f"n-{i}", 16, cpu=32, memory_gib=256) for i in range(node_count))
    quota_count = draw(st.integers(2, 4))
    left = 4 * node_count  # in jobs of 8 cores
    quotas = []
    for q in range(quota_count):
        slots = draw(st.integers(0, left))
        left -= slots
        quotas.append(Quota(f"q{q}", None, 16 * node_count // quota_count, cpu=8.0 * slots, created_order=q))
    jobs = tuple(
        Job(
            f"j{n}",
            draw(st.sampled_from([q.name for q in quotas])),
            1,
            cpu=8,
            priority=draw(st.integers(1, 9)),
            submitted_at=float(n),
        )
        for n in range(draw(st.integers(1, 6 * node_count)))
    )
    return Snapshot(nodes, tuple(quotas), (), 0.0), jobs


@SETTINGS
@given(cpu_bound_cases())
def test_a_quota_whose_cpu_request_reaches_its_cpu_guarantee_gets_it(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    final, results = play(base, jobs)
    status = results[-1].quotas
    request: dict[str, float] = defaultdict(float)
    for job in final.jobs:
        request[job.quota] += job.cpu
    for quota in final.quotas:
        assert status[quota.name].resources["cpu"].allocated >= min(quota.cpu or 0, request[quota.name]), quota.name


@SETTINGS
@given(resource_cases())
def test_same_snapshot_same_decisions_with_managed_resources(case: tuple[Snapshot, tuple[Job, ...]]) -> None:
    base, jobs = case
    snapshot = replace(base, jobs=jobs)
    assert schedule(snapshot) == schedule(snapshot)
    half, _ = play(base, jobs[: len(jobs) // 2])
    mid = replace(half, jobs=(*half.jobs, *jobs[len(jobs) // 2 :]))
    assert schedule(mid) == schedule(mid)
