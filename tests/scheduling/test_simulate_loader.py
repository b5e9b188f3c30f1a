"""The scenario loader reads what yaml.safe_load reads, building each repeated plain scalar once."""

from __future__ import annotations

import yaml

from scheduling.simulate import loader

DOCUMENT = """
defaults: &defaults {kind: training, gpus: 2, preemptible: true}
steps:
- submit: {<<: *defaults, name: a, quota: team-a}
- submit: {<<: *defaults, name: b, quota: team-a, gpus: 2.0, priority: !!str 5}
- submit: {name: c, kind: "training", gpus: 0x10, duration: 1_000, when: 2025-01-01, none: ~, shared: *defaults}
- advance: .inf
- checkpoint: "2"
"""


def test_reads_what_safe_load_reads() -> None:
    ours = loader.load(DOCUMENT)
    assert ours == yaml.safe_load(DOCUMENT)
    assert repr(ours) == repr(yaml.safe_load(DOCUMENT))  # 2 and 2.0, "5" and 5, "2" and 2 kept apart


def test_a_repeated_plain_scalar_is_one_object() -> None:
    document = loader.load("- {name: job-1, kind: training}\n- {name: job-2, kind: training}\n")
    first, second = document
    assert first["kind"] is second["kind"]
    assert next(iter(first)) is next(iter(second))  # the key "name" too


def test_an_alias_is_the_anchored_object() -> None:
    document = loader.load(DOCUMENT)
    assert document["steps"][2]["submit"]["shared"] is document["defaults"]
