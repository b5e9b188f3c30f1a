"""Scenario files are refused before anything runs, with one line naming the step (or object) and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduling.simulate import (
    AdvanceStep,
    CheckpointStep,
    EndJobStep,
    NodeStateStep,
    ScaleStep,
    ScenarioError,
    SetStep,
    SubmitStep,
    TransferStep,
    load_scenario,
    parse_scenario,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "docs" / "scenarios"

CLUSTER = """
nodes:
  - {name: gpu, count: 2, gpus: 8}
quotas:
  - name: Quota1
    gpus: 16
    children:
      - {name: Quota1.1, gpus: 8}
      - {name: Quota1.2, gpus: 8}
"""


def scenario(steps: str, cluster: str = CLUSTER) -> str:
    return cluster + "steps:\n" + steps


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda path: path.stem)
def test_every_shipped_scenario_parses(path: Path) -> None:
    parsed = load_scenario(path)
    assert parsed.steps, f"{path.name} has no steps"
    assert any(isinstance(step, CheckpointStep) for step in parsed.steps)


def test_the_format_of_scenarios_md_parses_into_typed_steps() -> None:
    parsed = parse_scenario(
        scenario(
            """
  - submit: {name: train-b, quota: Quota1.1, kind: training, gpus: 8, replicas: 6, min_replicas: 4}
  - submit: {name: dev, quota: Quota1.2, kind: notebook, gpus: 0.5, count: 3}
  - finish: train-b
  - fail: dev-1
  - cancel: dev-2
  - transfer: {from: Quota1.2, to: Quota1.1, gpus: 8}
  - scale: {quota: Quota1.1, gpus: 10}
  - set: {quota: Quota1, child_preemption: true, limit: null}
  - node_down: gpu-2
  - node_up: gpu-2
  - advance: 300
  - checkpoint: end
"""
        )
    )
    assert [node.name for node in parsed.nodes] == ["gpu-1", "gpu-2"]
    assert [(quota.name, quota.parent, quota.gpus) for quota in parsed.quotas] == [
        ("Quota1", None, 16.0),
        ("Quota1.1", "Quota1", 8.0),
        ("Quota1.2", "Quota1", 8.0),
    ]
    # No `workspaces:`: one workspace per quota, named after it.
    assert [(ws.name, ws.quotas) for ws in parsed.workspaces] == [
        ("Quota1", ("Quota1",)),
        ("Quota1.1", ("Quota1.1",)),
        ("Quota1.2", ("Quota1.2",)),
    ]
    steps = parsed.steps
    assert isinstance(steps[0], SubmitStep)
    train = steps[0].jobs[0]
    assert (train.workspace, train.replicas, train.min_replicas, train.priority) == ("Quota1.1", 6, 4, None)
    assert isinstance(steps[1], SubmitStep)
    assert [job.name for job in steps[1].jobs] == ["dev-1", "dev-2", "dev-3"]
    assert steps[2] == EndJobStep(number=3, job="train-b", action="finish")
    assert steps[3] == EndJobStep(number=4, job="dev-1", action="fail")
    assert steps[4] == EndJobStep(number=5, job="dev-2", action="cancel")
    assert steps[5] == TransferStep(number=6, source="Quota1.2", target="Quota1.1", gpus=8)
    assert steps[6] == ScaleStep(number=7, quota="Quota1.1", gpus=10)
    assert isinstance(steps[7], SetStep)
    assert dict(steps[7].changes) == {"child_preemption": True, "limit": None}
    assert steps[8] == NodeStateStep(number=9, node="gpu-2", action="node_down")
    assert steps[9] == NodeStateStep(number=10, node="gpu-2", action="node_up")
    assert steps[10] == AdvanceStep(number=11, seconds=300)
    assert steps[11] == CheckpointStep(number=12, name="end")


def test_a_submit_step_may_carry_a_list_of_jobs_as_one_burst() -> None:
    parsed = parse_scenario(
        scenario(
            """
  - submit: [{name: a, quota: Quota1.1, gpus: 1, count: 2}, {name: b, quota: Quota1.2, gpus: 2}]
"""
        )
    )
    step = parsed.steps[0]
    assert isinstance(step, SubmitStep)
    assert [(job.name, job.quota, job.gpus) for job in step.jobs] == [
        ("a-1", "Quota1.1", 1.0),
        ("a-2", "Quota1.1", 1.0),
        ("b", "Quota1.2", 2.0),
    ]


def test_a_job_without_workspace_goes_to_the_first_workspace_bound_to_its_quota() -> None:
    parsed = parse_scenario(
        CLUSTER
        + """
workspaces:
  - {name: ws-x, quotas: [Quota1.2]}
  - {name: ws-y, quotas: [Quota1.1, Quota1.2]}
steps:
  - submit: {name: a, quota: Quota1.1, gpus: 1}
  - submit: {name: b, quota: Quota1.2, gpus: 1}
  - submit: {name: c, quota: Quota1.2, workspace: ws-y, gpus: 1}
"""
    )
    assert [step.jobs[0].workspace for step in parsed.steps if isinstance(step, SubmitStep)] == [
        "ws-y",
        "ws-x",
        "ws-y",
    ]


BAD_STEPS = [
    pytest.param(
        "  - checkpoint: x\n  - advance: 1\n  - submit: {name: j, quota: Quota9, gpus: 1}",
        "step 3 (submit): field 'quota': unknown quota 'Quota9'",
        id="unknown-quota",
    ),
    pytest.param(
        "  - submit: {name: j, quota: Quota1.1, gpus: 1}\n  - submit: {name: j, quota: Quota1.2, gpus: 2}",
        "step 2 (submit): field 'name': duplicate job name 'j' (first submitted in step 1)",
        id="duplicate-job-name",
    ),
    pytest.param(
        "  - submit: {name: j, quota: Quota1.1, gpus: 1, count: 2}\n  - submit: {name: j-2, quota: Quota1.1, gpus: 1}",
        "step 2 (submit): field 'name': duplicate job name 'j-2' (first submitted in step 1)",
        id="duplicate-after-count-expansion",
    ),
    pytest.param(
        "  - scale: {quota: Quota1.1, gpus: -8}",
        "step 1 (scale): field 'gpus': must be ≥ 0, got -8",
        id="negative-scale",
    ),
    pytest.param(
        "  - transfer: {from: Quota1.2, to: Quota1.1, gpus: -1}",
        "step 1 (transfer): field 'gpus': must be ≥ 0, got -1",
        id="negative-transfer",
    ),
    pytest.param(
        "  - submit: {name: j, quota: Quota1.1, gpus: 0}",
        "step 1 (submit): field 'gpus': must be more than 0, got 0",
        id="zero-gpus",
    ),
    pytest.param(
        "  - submit: {name: j, quota: Quota1.1, gpus: 1, replicas: 2, min_replicas: 3}",
        "step 1 (submit): field 'min_replicas': must be at most replicas: min_replicas 3 > replicas 2",
        id="min-replicas-above-replicas",
    ),
    pytest.param(
        "  - submit: {name: j, quota: Quota1.1, gpus: 1, priority: 10}",
        "step 1 (submit): field 'priority': must be between 1 and 9, got 10",
        id="priority-out-of-range",
    ),
    pytest.param(
        "  - submit: {name: j, quota: Quota1.1, gpus: 1, kind: batch}",
        "step 1 (submit): field 'kind': must be one of training, inference, notebook, got 'batch'",
        id="unknown-kind",
    ),
    pytest.param(
        "  - submit: {name: j, quota: Quota1.1, gpu: 1}",
        "step 1 (submit): field 'gpu': unknown field; known: name, count, quota, workspace, kind, gpus, replicas, "
        "min_replicas, priority, preemptible, cpu, memory_gib, command, duration, grace_seconds, requeue",
        id="misspelt-field",
    ),
    pytest.param(
        "  - cancel: ghost",
        "step 1 (cancel): field 'job': unknown job 'ghost' (not submitted in an earlier step)",
        id="cancel-unknown-job",
    ),
    pytest.param(
        "  - cancel: late\n  - submit: {name: late, quota: Quota1.1, gpus: 1}",
        "step 1 (cancel): field 'job': unknown job 'late' (not submitted in an earlier step)",
        id="cancel-before-submit",
    ),
    pytest.param(
        "  - node_down: gpu-3",
        "step 1 (node_down): field 'node': unknown node 'gpu-3'",
        id="unknown-node",
    ),
    pytest.param(
        "  - advance: -5",
        "step 1 (advance): field 'seconds': must be ≥ 0, got -5",
        id="clock-backwards",
    ),
    pytest.param(
        "  - set: {quota: Quota1, queue_policy: lifo}",
        "step 1 (set): field 'queue_policy': must be one of best_effort, fifo, got 'lifo'",
        id="unknown-queue-policy",
    ),
    pytest.param(
        "  - set: {quota: Quota1, parent: Quota1.1}",
        "step 1 (set): field 'parent': unknown field; known: quota, gpus, cpu, memory_gib, limit, cpu_limit, "
        "memory_gib_limit, weight, rank, child_preemption, same_level_preemption, queue_policy, min_runtime_seconds",
        id="set-unknown-field",
    ),
    pytest.param(
        "  - reboot: gpu-1",
        "step 1: unknown action 'reboot'; known: submit, finish, fail, cancel, transfer, scale, set, node_down, "
        "node_up, advance, checkpoint",
        id="unknown-action",
    ),
    pytest.param(
        "  - submit: {name: j, quota: Quota1.1, workspace: Quota1.2, gpus: 1}",
        "step 1 (submit): field 'quota': quota 'Quota1.1' is not bound to workspace 'Quota1.2'",
        id="quota-not-bound-to-workspace",
    ),
]


@pytest.mark.parametrize(("steps", "message"), BAD_STEPS)
def test_a_bad_step_is_refused_naming_the_step_and_field(steps: str, message: str) -> None:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(scenario(steps))
    assert str(refused.value) == message


BAD_CLUSTERS = [
    pytest.param(
        "nodes: [{name: n, gpus: 2}]\nquotas: [{name: a, gpus: -2}]\n",
        "quota 'a': field 'gpus': must be ≥ 0, got -2",
        id="negative-guarantee",
    ),
    pytest.param(
        "nodes: [{name: n, gpus: 2}]\nquotas: [{name: a, gpus: 2, children: [{name: a, gpus: 1}]}]\n",
        "quota 'a': field 'name': duplicate quota name 'a'",
        id="duplicate-quota",
    ),
    pytest.param(
        "nodes: [{name: n, gpus: 2}, {name: n, gpus: 4}]\nquotas: [{name: a, gpus: 2}]\n",
        "node 'n': field 'name': duplicate node name 'n'",
        id="duplicate-node",
    ),
    pytest.param(
        "nodes: [{name: n, gpus: 2.5}]\nquotas: [{name: a, gpus: 2}]\n",
        "node 'n': field 'gpus': must be a whole number, got 2.5",
        id="fractional-node-gpus",
    ),
    pytest.param(
        "nodes: [{name: n, gpus: 2}]\nquotas: [{name: a, gpus: 2, limit: -1}]\n",
        "quota 'a': field 'limit': must be ≥ 0, got -1",
        id="negative-limit",
    ),
    pytest.param(
        "nodes: [{name: n, gpus: 2}]\nquotas: [{name: a, gpus: 2}]\nworkspaces: [{name: w, quotas: [b]}]\n",
        "workspace 'w': field 'quotas': unknown quota 'b'",
        id="workspace-unknown-quota",
    ),
    pytest.param("quotas: [{name: a, gpus: 2}]\n", "scenario: field 'nodes': must be a list, got None", id="no-nodes"),
]


@pytest.mark.parametrize(("text", "message"), BAD_CLUSTERS)
def test_a_bad_cluster_is_refused_naming_the_object_and_field(text: str, message: str) -> None:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(text)
    assert str(refused.value) == message


def test_broken_yaml_is_refused_with_its_line_and_column() -> None:
    with pytest.raises(ScenarioError) as refused:
        parse_scenario("nodes: [{name: n, gpus: 2\n")
    # The wording after the position is libyaml's (or PyYAML's, without libyaml).
    assert str(refused.value).startswith("scenario: not valid YAML at line 2, column 1: ")
    assert "expected ',' or '}'" in str(refused.value)


def test_a_missing_file_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load_scenario(tmp_path / "absent.yaml")
