"""`pools:` in scenario files (SCENARIOS.md "Several pools", issue 24): each node and each root
quota names its pool, children inherit it, and a mistake is refused naming the object and field."""

from __future__ import annotations

import pytest

from scheduling.simulate import ScenarioError, parse_scenario

POOLS = """
pools:
  - {name: h100, placement: pack}
  - {name: a100, placement: spread}
"""
NODES = """
nodes:
  - {name: h, count: 2, gpus: 8, pool: h100}
  - {name: a, gpus: 4, pool: a100}
"""
QUOTAS = """
quotas:
  - {name: vision, pool: h100, gpus: 16, children: [{name: vision.train, gpus: 8}]}
  - {name: batch, pool: a100, gpus: 4}
"""


def test_each_node_and_root_names_its_pool_and_children_inherit_it() -> None:
    parsed = parse_scenario(POOLS + NODES + QUOTAS)

    assert [(pool.name, pool.placement) for pool in parsed.pools] == [("h100", "pack"), ("a100", "spread")]
    assert parsed.node_pools == {"h-1": "h100", "h-2": "h100", "a": "a100"}
    assert {quota.name: quota.pool for quota in parsed.quotas} == {
        "vision": "h100",
        "vision.train": "h100",
        "batch": "a100",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            POOLS + "nodes:\n  - {name: h, gpus: 8}\n" + QUOTAS,
            "node 'h': field 'pool': the scenario lists pools, so this names one of them: h100, a100",
            id="a node without its pool",
        ),
        pytest.param(
            POOLS + "nodes:\n  - {name: h, gpus: 8, pool: v100}\n" + QUOTAS,
            "node 'h': field 'pool': unknown pool 'v100'; the scenario's pools are h100, a100",
            id="an unknown pool",
        ),
        pytest.param(
            POOLS + NODES + "quotas:\n  - {name: vision, pool: h100, gpus: 8, children: [{name: v.a, pool: a100}]}\n",
            "quota 'v.a': field 'pool': a child has its parent's pool 'h100'; it cannot name 'a100'",
            id="a child naming another pool",
        ),
        pytest.param(
            POOLS + NODES + "quotas:\n  - {name: vision, gpus: 8}\n",
            "quota 'vision': field 'pool': the scenario lists pools, so this names one of them: h100, a100",
            id="a root without its pool",
        ),
        pytest.param(
            "nodes:\n  - {name: h, gpus: 8, pool: h100}\nquotas:\n  - {name: q, gpus: 8}\n",
            "node 'h': field 'pool': name pools first: a top-level pools: list (SCENARIOS.md)",
            id="a pool named without pools:",
        ),
        pytest.param(
            "pool: {placement: pack}\n" + POOLS + NODES + QUOTAS,
            "scenario: field 'pools': give either pool: (one pool) or pools: (several), not both",
            id="pool: and pools: together",
        ),
        pytest.param(
            "pools:\n  - {name: h100}\n  - {name: h100}\n" + NODES + QUOTAS,
            "pool 'h100': field 'name': duplicate pool name 'h100'",
            id="a pool twice",
        ),
    ],
)
def test_a_pool_mistake_names_the_object_and_the_field(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text)

    assert str(refused.value) == message
