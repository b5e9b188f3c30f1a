"""Every scenario in docs/scenarios/ played through `simulate`, against what SCHEDULING.md says.

The expected figures were worked out by hand from SCHEDULING.md (the comments in each
scenario file show the working), not copied from simulate's output.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.scheduling.scenarios.helpers import Checkpoints, allocated, jobs_in, states

Simulate = Callable[[str], Checkpoints]


def test_pai_integrated_training_and_inference(simulate: Simulate) -> None:
    run = simulate("pai-integrated")
    full = run["teams-b-and-c-fill-the-pool"]
    # train-b 6 × 8 = 48; dev-c 1 + train-c 9 × 8 = 73: 121 of 128.
    assert allocated(full) == {"Quota1": 121, "Quota1.1": 48, "Quota1.2": 73}
    assert full["jobs"]["train-b"]["replicas"] == 6
    assert states(full, "train-b", "dev-c", "train-c") == {
        "train-b": "running",
        "dev-c": "running",
        "train-c": "running",
    }

    # Child-level preemption: serve-a (2 × 8, on Quota1 itself) needs two whole nodes. The
    # elastic train-b gives up its 2 replicas above min_replicas before any whole job goes.
    served = run["inference-preempts-training"]
    serve = served["jobs"]["serve-a"]
    assert (serve["state"], serve["gpus"], serve["replicas"], len(serve["nodes"])) == ("running", 16, 2, 2)
    assert (served["jobs"]["train-b"]["state"], served["jobs"]["train-b"]["replicas"]) == ("running", 4)
    assert served["jobs"]["train-c"]["state"] == "running"
    assert served["jobs"]["dev-c"]["state"] == "running"
    assert allocated(served) == {"Quota1": 121, "Quota1.1": 32, "Quota1.2": 73}
    assert served["quotas"]["Quota1"]["allocated_self"] == 16

    # serve-a cancelled, train-b grew back; then 8 GPUs of guarantee moved from Quota1.2 to
    # Quota1.1. Quota1.2 now holds 73 > 72, but nobody waits, so nothing is evicted.
    after = run["after-transfer"]
    assert {name: q["guaranteed"] for name, q in after["quotas"].items()} == {
        "Quota1": 128,
        "Quota1.1": 56,
        "Quota1.2": 72,
    }
    assert allocated(after) == {"Quota1": 121, "Quota1.1": 48, "Quota1.2": 73}
    assert after["jobs"]["serve-a"]["state"] == "cancelled"
    assert after["jobs"]["train-b"]["replicas"] == 6
    assert after["jobs"]["train-c"]["preemptions"] == 0


def test_runai_over_quota_preemption_and_consolidation(simulate: Simulate) -> None:
    run = simulate("runai-over-quota")
    borrows = run["team-a-borrows"]
    assert allocated(borrows) == {"team-a": 3, "team-b": 1}
    assert borrows["quotas"]["team-a"]["fair_share"] == 3  # 2 guaranteed + the 1 GPU team-b leaves idle
    assert borrows["jobs"]["a2"]["nodes"] == ["node-1"]
    assert borrows["jobs"]["a1"]["nodes"] == borrows["jobs"]["b1"]["nodes"] == ["node-2"]

    reclaimed = run["team-b-reclaims"]
    assert allocated(reclaimed) == {"team-a": 2, "team-b": 2}
    assert {name: q["fair_share"] for name, q in reclaimed["quotas"].items()} == {"team-a": 2, "team-b": 2}
    a1 = reclaimed["jobs"]["a1"]
    assert (a1["state"], a1["preemptions"]) == ("pending", 1)
    assert a1["reason"] is not None and a1["reason"]["position"] == 1

    again = run["a1-runs-again"]
    assert (again["jobs"]["a1"]["state"], again["jobs"]["a1"]["nodes"]) == ("running", ["node-1"])
    assert allocated(again) == {"team-a": 1, "team-b": 2}

    consolidated = run["consolidated"]
    assert consolidated["jobs"]["a2-again"]["state"] == "running"
    assert consolidated["jobs"]["a2-again"]["nodes"] == ["node-1"]
    assert consolidated["jobs"]["a1"]["nodes"] == ["node-2"]  # moved next to b1
    assert consolidated["jobs"]["b1"]["nodes"] == ["node-2"]
    assert allocated(consolidated) == {"team-a": 3, "team-b": 1}


def test_borrowing_divides_idle_gpus_by_weight(simulate: Simulate) -> None:
    lent = simulate("borrowing")["d-idle-lends-8-gpus"]
    assert {name: q["fair_share"] for name, q in lent["quotas"].items()} == {"a": 8, "b": 4, "c": 4, "d": 0}
    assert allocated(lent) == {"a": 8, "b": 4, "c": 4, "d": 0}
    assert {name: q["pending"] for name, q in lent["quotas"].items()} == {"a": 4, "b": 8, "c": 8, "d": 0}


def test_reclaim_takes_back_what_was_lent_from_the_furthest_above_fair_share(simulate: Simulate) -> None:
    run = simulate("reclaim")
    assert allocated(run["borrowed"]) == {"a": 8, "b": 4, "c": 4, "d": 0}
    reclaimed = run["d-reclaims"]
    assert allocated(reclaimed) == {"a": 4, "b": 2, "c": 2, "d": 8}
    assert {name: q["fair_share"] for name, q in reclaimed["quotas"].items()} == {"a": 4, "b": 2, "c": 2, "d": 8}
    evicted = [name for name, job in reclaimed["jobs"].items() if job["preemptions"] == 1]
    assert len(evicted) == 8
    assert sorted({name.split("-")[0] for name in evicted}) == ["a", "b", "c"]
    assert sum(name.startswith("a-") for name in evicted) == 4


def test_guarantee_rule_evicts_a_whole_gang_that_is_partly_over_quota(simulate: Simulate) -> None:
    run = simulate("guarantee-gang-reclaim")
    borrows = run["gang-borrows"]
    assert allocated(borrows) == {"team-a": 6, "team-b": 0}
    honoured = run["guarantee-honoured"]
    assert allocated(honoured) == {"team-a": 0, "team-b": 4}
    gang = honoured["jobs"]["gang"]
    assert (gang["state"], gang["preemptions"], gang["replicas"]) == ("pending", 1, 0)
    assert gang["reason"] is not None
    assert honoured["jobs"]["b-train"]["replicas"] == 4


def test_preempt_evicts_strictly_lower_priority_in_the_same_quota(simulate: Simulate) -> None:
    run = simulate("preempt")
    waits = run["equal-priority-waits"]
    assert states(waits, "low", "peer") == {"low": "running", "peer": "pending"}
    assert waits["jobs"]["low"]["preemptions"] == 0
    preempted = run["high-preempts-low"]
    assert states(preempted, "low", "peer", "high") == {"low": "pending", "peer": "pending", "high": "running"}
    assert preempted["jobs"]["low"]["preemptions"] == 1
    assert allocated(preempted) == {"team": 4}


def test_child_level_preemption_off_then_on(simulate: Simulate) -> None:
    run = simulate("child-preemption")
    off = run["switch-off"]
    assert states(off, "train-1", "train-2", "serve") == {
        "train-1": "running",
        "train-2": "running",
        "serve": "pending",
    }
    assert off["jobs"]["serve"]["reason"]["code"] == "guaranteed_only"
    on = run["switch-on"]
    assert states(on, "train-1", "train-2", "serve") == {
        "train-1": "running",
        "train-2": "pending",
        "serve": "running",
    }
    assert on["jobs"]["train-2"]["preemptions"] == 1
    assert on["jobs"]["train-1"]["preemptions"] == 0
    assert on["quotas"]["Quota1"]["allocated_self"] == 8
    assert allocated(on) == {"Quota1": 16, "Quota1.1": 8, "Quota1.2": 0}


def test_same_level_preemption_off_then_on(simulate: Simulate) -> None:
    run = simulate("same-level-preemption")
    off = run["switch-off"]
    assert states(off, "a-serve", "a-urgent") == {"a-serve": "running", "a-urgent": "pending"}
    assert allocated(off) == {"dept": 16, "team-a": 6, "team-b": 10, "other": 0}
    assert len(jobs_in(off, "b-job-", "running")) == 5
    on = run["switch-on"]
    assert states(on, "a-serve", "a-urgent") == {"a-serve": "running", "a-urgent": "running"}
    assert allocated(on) == {"dept": 16, "team-a": 8, "team-b": 8, "other": 0}
    (evicted,) = jobs_in(on, "b-job-", "pending")
    assert on["jobs"][evicted]["preemptions"] == 1


def test_fifo_blocks_and_best_effort_skips(simulate: Simulate) -> None:
    run = simulate("queue-policy")
    fifo = run["fifo"]
    assert states(fifo, "running", "big", "small") == {"running": "running", "big": "pending", "small": "pending"}
    assert fifo["jobs"]["small"]["reason"]["code"] == "queue_blocked"
    assert fifo["jobs"]["big"]["reason"]["position"] == 1
    assert fifo["jobs"]["small"]["reason"]["position"] == 2
    best_effort = run["best-effort"]
    assert states(best_effort, "running", "big", "small") == {
        "running": "running",
        "big": "pending",
        "small": "running",
    }
    assert allocated(best_effort) == {"team": 7}


def test_limit_caps_a_quota_even_with_idle_gpus(simulate: Simulate) -> None:
    capped = simulate("limit")["at-the-limit"]
    assert allocated(capped) == {"capped": 6, "idle": 0}
    assert jobs_in(capped, "job-", "pending") == ["job-7", "job-8"]
    reason = capped["jobs"]["job-7"]["reason"]
    assert reason["code"] == "quota_limit"
    assert "6 + 1 > 6" in reason["message"]


def test_non_preemptible_jobs_stay_within_the_guarantee(simulate: Simulate) -> None:
    run = simulate("guaranteed-only")
    at_guarantee = run["notebooks-at-guarantee"]
    assert jobs_in(at_guarantee, "nb-", "running") == ["nb-1", "nb-2", "nb-3", "nb-4"]
    assert jobs_in(at_guarantee, "nb-", "pending") == ["nb-5", "nb-6"]
    reason = at_guarantee["jobs"]["nb-5"]["reason"]
    assert reason["code"] == "guaranteed_only"
    assert "4 + 1 > 4" in reason["message"]
    borrowing = run["training-borrows"]
    assert borrowing["jobs"]["train"]["state"] == "running"
    assert jobs_in(borrowing, "nb-", "pending") == ["nb-5", "nb-6"]
    assert allocated(borrowing) == {"team": 6, "other": 0}


def test_fractional_jobs_share_devices(simulate: Simulate) -> None:
    run = simulate("fractions")
    shared = run["shared-devices"]
    assert jobs_in(shared, "half-", "running") == ["half-1", "half-2", "half-3"]
    assert shared["jobs"]["half-1"]["gpus"] == 0.5
    assert shared["jobs"]["sixty"]["state"] == "pending"
    assert allocated(shared) == {"team": 1.5}
    room = run["room-for-sixty"]
    assert (room["jobs"]["sixty"]["state"], room["jobs"]["sixty"]["gpus"]) == ("running", 0.6)
    assert allocated(room) == {"team": pytest.approx(1.6)}


def test_elastic_job_shrinks_before_eviction_and_grows_back(simulate: Simulate) -> None:
    run = simulate("elastic")
    assert run["grown"]["jobs"]["elastic"]["replicas"] == 8
    shrunk = run["shrunk"]
    assert (shrunk["jobs"]["elastic"]["state"], shrunk["jobs"]["elastic"]["replicas"]) == ("running", 4)
    assert shrunk["jobs"]["b-job"]["state"] == "running"
    assert allocated(shrunk) == {"team-a": 4, "team-b": 4}
    grown_back = run["grown-back"]
    assert (grown_back["jobs"]["elastic"]["state"], grown_back["jobs"]["elastic"]["replicas"]) == ("running", 8)


def test_consolidation_moves_a_job_to_make_a_whole_node(simulate: Simulate) -> None:
    run = simulate("consolidation")
    fragmented = run["fragmented"]
    assert fragmented["jobs"]["x1"]["nodes"] == ["node-1"]
    assert fragmented["jobs"]["x3"]["nodes"] == ["node-2"]
    consolidated = run["consolidated"]
    assert states(consolidated, "x1", "x3", "big") == {"x1": "running", "x3": "running", "big": "running"}
    (big_node,) = consolidated["jobs"]["big"]["nodes"]
    assert consolidated["jobs"]["x1"]["nodes"] == consolidated["jobs"]["x3"]["nodes"]
    assert consolidated["jobs"]["x1"]["nodes"] != [big_node]
    assert allocated(consolidated) == {"team": 8}


def test_min_runtime_protects_then_reclaim_goes_ahead(simulate: Simulate) -> None:
    run = simulate("min-runtime")
    protected = run["protected"]
    assert protected["time"] == 10
    assert protected["jobs"]["b-job"]["state"] == "pending"
    assert allocated(protected) == {"team-a": 8, "team-b": 0}
    reclaimed = run["reclaimed"]
    assert reclaimed["time"] == 70
    assert reclaimed["jobs"]["b-job"]["state"] == "running"
    assert allocated(reclaimed) == {"team-a": 4, "team-b": 4}
    assert len(jobs_in(reclaimed, "a-job-", "pending")) == 4


def test_grace_period_keeps_gpus_until_released(simulate: Simulate) -> None:
    run = simulate("grace-period")
    releasing = run["releasing"]
    assert releasing["time"] == 2
    assert states(releasing, "a-first", "a-second", "b-job") == {
        "a-first": "running",
        "a-second": "releasing",
        "b-job": "pending",
    }
    assert releasing["jobs"]["a-second"]["gpus"] == 4  # still held during the grace period
    assert releasing["jobs"]["b-job"]["reason"]["code"] == "waiting_for_eviction"
    assert allocated(releasing) == {"team-a": 8, "team-b": 0}
    released = run["released"]
    assert released["time"] == 32
    assert states(released, "a-first", "a-second", "b-job") == {
        "a-first": "running",
        "a-second": "pending",
        "b-job": "running",
    }
    assert released["jobs"]["a-second"]["preemptions"] == 1


def test_node_down_requeues_its_job_and_keeps_fair_shares(simulate: Simulate) -> None:
    run = simulate("node-down")
    ready = run["both-nodes-ready"]
    assert ready["jobs"]["a-job"]["nodes"] == ["node-1"]
    assert ready["jobs"]["b-job"]["nodes"] == ["node-2"]
    down = run["node-2-down"]
    assert states(down, "a-job", "b-job") == {"a-job": "running", "b-job": "pending"}
    assert {name: q["fair_share"] for name, q in down["quotas"].items()} == {"team-a": 4, "team-b": 4}
    back = run["node-2-back"]
    assert states(back, "a-job", "b-job") == {"a-job": "running", "b-job": "running"}
    assert back["jobs"]["b-job"]["nodes"] == ["node-2"]


def test_transfer_scale_and_set(simulate: Simulate) -> None:
    run = simulate("quota-changes")
    assert allocated(run["a-borrows"]) == {"team-a": 12, "team-b": 4}
    transferred = run["after-transfer"]
    assert {name: q["guaranteed"] for name, q in transferred["quotas"].items()} == {"team-a": 4, "team-b": 12}
    assert allocated(transferred) == {"team-a": 12, "team-b": 4}  # nobody waits: nothing moves
    assert all(job["preemptions"] == 0 for job in transferred["jobs"].values())
    reclaimed = run["b-reclaims"]
    assert allocated(reclaimed) == {"team-a": 6, "team-b": 10}
    assert len(jobs_in(reclaimed, "a-job-", "pending")) == 6
    changed = run["after-scale-and-set"]
    assert {name: q["guaranteed"] for name, q in changed["quotas"].items()} == {"team-a": 6, "team-b": 10}
    assert allocated(changed) == {"team-a": 6, "team-b": 10}
    assert changed["jobs"]["a-job-12"]["reason"]["code"] == "quota_limit"


def test_two_pools_schedule_apart(simulate: Simulate) -> None:
    run = simulate("two-pools")
    apart = run["pools-apart"]
    assert {name: quota["pool"] for name, quota in apart["quotas"].items()} == {
        "vision": "h100",
        "vision.train": "h100",
        "vision.serve": "h100",
        "batch": "a100",
        "eval": "a100",
    }
    # h100 has 16 GPUs: two 8-GPU trainings run, the third waits; a100's idle GPUs are not lent.
    assert states(apart, "train-1", "train-2", "train-3") == {
        "train-1": "running",
        "train-2": "running",
        "train-3": "pending",
    }
    assert {node for job in ("train-1", "train-2") for node in apart["jobs"][job]["nodes"]} == {"h-1", "h-2"}
    assert apart["quotas"]["vision"]["fair_share"] == 16
    # a100: batch (12) borrows eval's idle 4; spread puts one sweep on each node.
    assert jobs_in(apart, "sweep", "running") == ["sweep-1", "sweep-2", "sweep-3", "sweep-4"]
    assert sorted(apart["jobs"][f"sweep-{n}"]["nodes"][0] for n in range(1, 5)) == ["a-1", "a-2", "a-3", "a-4"]
    assert allocated(apart) == {"vision": 16, "vision.train": 16, "vision.serve": 0, "batch": 16, "eval": 0}

    back = run["eval-takes-back-its-guarantee"]
    assert allocated(back) == {"vision": 16, "vision.train": 16, "vision.serve": 0, "batch": 12, "eval": 4}
    assert states(back, "check-1", "check-2") == {"check-1": "running", "check-2": "running"}
    assert jobs_in(back, "sweep", "pending") == ["sweep-4"]
    for job in ("train-1", "train-2"):  # nothing moved in h100
        assert (back["jobs"][job]["nodes"], back["jobs"][job]["preemptions"]) == (
            apart["jobs"][job]["nodes"],
            0,
        )
