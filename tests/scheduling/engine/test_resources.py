"""CPU and memory as managed resources (SCHEDULING.md "Managed resources", issue 24): a pool
whose root quotas set `cpu` or `memory_gib` keeps guarantees, limits and fair shares of that
resource too, and every rule of §1–§3 is asked of it. Tables: the limit, the guarantee of a
non-preemptible job, reclaim of borrowed CPU while GPUs stand idle, memory fit on a node,
fair share per pool and per resource, and the status figures."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.engine import Evict, Node, Quota, ResourceStatus, Snapshot, schedule
from scheduling.engine.types import CPU, MEMORY
from tests.scheduling.engine.helpers import Scenario


def cpu_nodes(count: int, gpus: int = 8, cpu: float = 64, memory_gib: float = 512, pool: str = "") -> tuple[Node, ...]:
    return tuple(Node(f"n-{i}", gpus, cpu=cpu, memory_gib=memory_gib, pool=pool) for i in range(1, count + 1))


def two_teams(cpu_a: float | None = 64, cpu_b: float | None = 64, **team_a: Any) -> Scenario:
    """Two nodes of 8 GPUs, 64 cores, 512 GiB; team-a and team-b guaranteed 4 GPUs and (by
    default) 64 cores each: together the whole pool's CPU."""
    tree = (
        Quota("team-a", None, 4, cpu=cpu_a, created_order=0, **team_a),
        Quota("team-b", None, 4, cpu=cpu_b, created_order=1),
    )
    return Scenario(cpu_nodes(2), tree)


# -- limits ------------------------------------------------------------------------------------

LIMIT_ROWS = [
    pytest.param(
        {"cpu_limit": 64},
        {"cpu": 60},
        {"cpu": 8},
        "cpu: would exceed the limit of team-a: 60 + 8 > 64 cores",
        id="cpu limit",
    ),
    pytest.param(
        {"memory_gib": 256, "memory_gib_limit": 512},
        {"memory_gib": 480},
        {"memory_gib": 64},
        "memory: would exceed the limit of team-a: 480 + 64 > 512 GiB",
        id="memory limit",
    ),
]


@pytest.mark.parametrize(("quota_fields", "first", "second", "message"), LIMIT_ROWS)
def test_a_job_never_takes_its_quota_above_a_cpu_or_memory_limit(
    quota_fields: dict[str, float], first: dict[str, Any], second: dict[str, Any], message: str
) -> None:
    s = two_teams(**quota_fields).submit("a-1", "team-a", 1, **first).submit("a-2", "team-a", 1, **second)

    assert s.state("a-1") == "running"
    assert s.state("a-2") == "pending"  # 14 GPUs and the other team's CPU stand idle
    assert (s.last.pending["a-2"].code, s.last.pending["a-2"].message) == ("quota_limit", message)


def test_a_limit_above_an_ancestors_is_named_at_the_ancestor() -> None:
    tree = (
        Quota("org", None, 8, cpu=64, cpu_limit=64, created_order=0),
        Quota("org.ml", "org", 8, cpu=64, created_order=1),
    )
    s = Scenario(cpu_nodes(2), tree).submit("m-1", "org.ml", 1, cpu=48).submit("m-2", "org.ml", 1, cpu=32)

    assert s.last.pending["m-2"].message == "cpu: would exceed the limit of org: 48 + 32 > 64 cores"


# -- non-preemptible jobs use guaranteed CPU only --------------------------------------------


def test_a_non_preemptible_job_stays_within_the_cpu_guarantee_a_training_job_may_borrow() -> None:
    s = two_teams(cpu_a=16, cpu_b=16)
    s.submit("nb-1", "team-a", 1, kind="notebook", cpu=12)
    s.submit("nb-2", "team-a", 1, kind="notebook", cpu=8)  # GPUs within guarantee, CPU not
    s.submit("train", "team-a", 1, kind="training", cpu=8)

    assert (s.state("nb-1"), s.state("nb-2"), s.state("train")) == ("running", "pending", "running")
    assert (s.last.pending["nb-2"].code, s.last.pending["nb-2"].message) == (
        "guaranteed_only",
        "cpu: non-preemptible jobs must fit in guaranteed quota of team-a: 20 + 8 > 16 cores",
    )


# -- reclaim of borrowed CPU -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu_guarantee", "expected"),
    [
        pytest.param(64, ("running", 3, "reclaim"), id="managed: team-b gives back a's CPU"),
        pytest.param(None, ("pending", 4, None), id="not managed: a waits, no rule speaks for its CPU"),
    ],
)
def test_cpu_borrowed_beyond_fair_share_goes_back_though_gpus_stand_idle(
    cpu_guarantee: float | None, expected: tuple[str, int, str | None]
) -> None:
    """team-b holds all 128 cores with 4 of the 16 GPUs; team-a asks for 1 GPU and 32 cores,
    within its guarantees. 12 GPUs are free, but no node has 32 cores free."""
    s = two_teams(cpu_a=cpu_guarantee, cpu_b=cpu_guarantee)
    for n in range(1, 5):
        s.submit(f"b-{n}", "team-b", 1, cpu=32)
    s.submit("a", "team-a", 1, cpu=32)

    evictions = [d for d in s.decisions if isinstance(d, Evict)]
    running_b = sum(s.state(f"b-{n}") == "running" for n in range(1, 5))
    assert (s.state("a"), running_b, evictions[0].rule if evictions else None) == expected
    if evictions:
        assert evictions[0].reason == (
            "reclaimed for a of team-a: team-b holds more than its fair share of 96 cores of CPU and keeps at "
            "least that; team-a stays within its own fair share"
        )
        cpu = {name: s.last.quotas[name].resources[CPU] for name in ("team-a", "team-b")}
        assert {name: (r.fair_share, r.allocated) for name, r in cpu.items()} == {
            "team-a": (32, 32),
            "team-b": (96, 96),
        }
        assert s.last.quotas["team-b"].allocated == 3  # its GPUs were never over anything


def test_the_guarantee_rule_takes_back_cpu_from_a_team_over_its_cpu_guarantee() -> None:
    """team-b borrowed 64 cores beyond its guarantee of 32; team-a, idle until now, asks for
    its own guarantee of 96 cores: one of b's jobs goes, whatever the GPU figures."""
    s = two_teams(cpu_a=96, cpu_b=32)
    s.submit("b-1", "team-b", 1, cpu=48).submit("b-2", "team-b", 1, cpu=48)
    s.submit("a-1", "team-a", 1, cpu=48).submit("a-2", "team-a", 1, cpu=48)

    assert [s.state(j) for j in ("a-1", "a-2")] == ["running", "running"]
    assert sum(s.state(j) == "running" for j in ("b-1", "b-2")) == 0
    assert s.last.quotas["team-a"].resources[CPU].allocated == 96


def test_a_reclaimed_cpu_job_does_not_come_back_for_its_cpu() -> None:
    """Stable: after the reclaim above, the evicted job waits, and further cycles decide nothing."""
    s = two_teams()
    for n in range(1, 5):
        s.submit(f"b-{n}", "team-b", 1, cpu=32)
    s.submit("a", "team-a", 1, cpu=32)

    assert schedule(s.snapshot).decisions == ()
    waiting = next(j for j in s.snapshot.jobs if j.state == "pending")
    assert s.last.pending[waiting.id].code == "no_fit"


# -- memory fit on a node --------------------------------------------------------------------


def mixed_memory(managed: bool) -> Scenario:
    """n-small: 8 GPUs, 256 GiB; n-large: 8 GPUs, 1,024 GiB."""
    node_list = (
        Node("n-small", 8, cpu=64, memory_gib=256),
        Node("n-large", 8, cpu=64, memory_gib=1024),
    )
    memory = 1280.0 if managed else None
    return Scenario(node_list, (Quota("team", None, 16, memory_gib=memory),))


@pytest.mark.parametrize("managed", [pytest.param(False, id="memory not managed"), pytest.param(True, id="managed")])
def test_a_replica_goes_to_a_node_with_its_memory_free(managed: bool) -> None:
    s = mixed_memory(managed).submit("big", "team", 1, memory_gib=512).submit("more", "team", 1, memory_gib=600)

    assert {p.node for p in s.job("big").placements} == {"n-large"}
    assert s.state("more") == "pending"
    # it waits at the head of its queue with a reservation (actions.reserve) on the only node
    # whose memory can ever hold it, never on n-small, however free its GPUs
    assert (s.last.pending["more"].code, s.last.pending["more"].message) == (
        "no_fit",
        "reserved: n-large free when their jobs end (no expected end is known); 1 of the 1 GPU it needs are free "
        "now and kept for it",
    )


def test_a_replica_larger_than_every_node_in_a_managed_resource_says_so() -> None:
    s = mixed_memory(managed=True).submit("huge", "team", 1, memory_gib=2000)

    assert (s.last.pending["huge"].code, s.last.pending["huge"].message) == (
        "exceeds_cluster",
        "memory: needs 2,000 GiB on one node; the largest node has 1,024 GiB",
    )


# -- fair share per pool and per resource ----------------------------------------------------


def pooled() -> Scenario:
    """h100 manages CPU (its roots set it): 2 nodes × 96 cores; vision 64 and speech 32 cores.
    a100 does not: its quotas set GPUs only, and its jobs' CPU is checked on nodes alone."""
    tree = (
        Quota("vision", None, 8, cpu=64, pool="h100", created_order=0),
        Quota("speech", None, 8, cpu=32, pool="h100", created_order=1),
        Quota("batch", None, 8, pool="a100", created_order=2),
    )
    node_list = (*cpu_nodes(2, cpu=96, pool="h100"), Node("a-1", 8, cpu=96, pool="a100"))
    return Scenario(node_list, tree)


def test_fair_share_is_per_pool_and_per_resource() -> None:
    s = pooled()
    for n in range(1, 5):
        s.submit(f"v-{n}", "vision", 1, cpu=40)  # asks 160 cores
    for n in range(1, 5):
        s.submit(f"s-{n}", "speech", 1, cpu=25)  # asks 100 cores
    s.submit("b", "batch", 1, cpu=90)

    # guarantees 64 and 32 first; the 96 idle cores go 2:1 by weight (the CPU guarantees)
    cpu = {q: s.last.quotas[q].resources[CPU].fair_share for q in ("vision", "speech")}
    assert cpu == {"vision": 128, "speech": 64}
    assert s.last.quotas["batch"].resources == {}  # a100 manages GPUs only
    assert s.state("b") == "running"


@pytest.mark.parametrize(
    ("children", "expected"),
    [
        pytest.param(
            (Quota("org.x", "org", 6, created_order=1), Quota("org.y", "org", 2, created_order=2)),
            {"org.x": 72, "org.y": 24},
            id="children set no CPU: the parent's CPU follows their GPU weights",
        ),
        pytest.param(
            (Quota("org.x", "org", 6, cpu=16, created_order=1), Quota("org.y", "org", 2, cpu=48, created_order=2)),
            {"org.x": 24, "org.y": 72},
            id="children set CPU: guarantees first, the rest by CPU guarantee",
        ),
        pytest.param(
            (
                Quota("org.x", "org", 6, cpu=16, weight=1, created_order=1),
                Quota("org.y", "org", 2, cpu=48, weight=1, created_order=2),
            ),
            {"org.x": 32, "org.y": 64},
            id="an explicit weight holds for every resource",
        ),
    ],
)
def test_a_parents_cpu_divides_among_its_children(children: tuple[Quota, ...], expected: dict[str, float]) -> None:
    tree = (Quota("org", None, 16, cpu=96, created_order=0), *children)
    s = Scenario(cpu_nodes(2, cpu=48), tree)  # 96 cores in all
    for name in expected:
        s.submit(f"{name}-job", name, 1, cpu=96)  # each asks the whole pool's CPU

    assert {name: s.last.quotas[name].resources[CPU].fair_share for name in expected} == expected


# -- status ----------------------------------------------------------------------------------


def test_status_carries_every_managed_resource_of_every_quota() -> None:
    tree = (
        Quota("team", None, 8, cpu=64, memory_gib=512, cpu_limit=96, created_order=0),
        Quota("team.dev", "team", 4, cpu=16, created_order=1),
    )
    snapshot = Snapshot(cpu_nodes(1, cpu=128, memory_gib=1024), tree, (), 0.0)
    s = Scenario(snapshot.nodes, snapshot.quotas).submit("dev", "team.dev", 2, cpu=8, memory_gib=64)

    assert s.last.quotas["team"].resources == {
        CPU: ResourceStatus(fair_share=8, allocated=8, guaranteed=64, limit=96, allocated_self=0),
        MEMORY: ResourceStatus(fair_share=64, allocated=64, guaranteed=512, limit=None, allocated_self=0),
    }
    assert s.last.quotas["team.dev"].resources[CPU] == ResourceStatus(8, 8, 16, None, allocated_self=8)
    assert s.last.quotas["team.dev"].resources[MEMORY].guaranteed == 0  # not set: nothing guaranteed


def test_a_pool_that_manages_gpus_only_reports_no_resources() -> None:
    s = Scenario(cpu_nodes(1), (Quota("team", None, 8),)).submit("j", "team", 1, cpu=8)

    assert s.last.quotas["team"].resources == {}
