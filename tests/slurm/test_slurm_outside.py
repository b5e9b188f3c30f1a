"""GPUs that Slurm jobs outside the console hold, counted fully (docs/slurm.md, "GPUs held outside
the console"), on a real Slurm of two nodes of two fake GPUs: a by-hand job over both nodes holds
its share of each, and one that started after the console's last read of the cluster is caught
before sbatch (the placed job goes back to the queue rather than waiting in Slurm while the
console counts it running).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import AbstractUser

from quotas.models import Node
from scheduling.cycle import run_cycle
from scheduling.models import Job, JobEvent, JobEventKind, JobState
from scheduling.snapshot_rows import GPUS_OUTSIDE_LABEL
from slurm.models import SlurmJob
from tests.slurm.conftest import NODE_NAMES, Clients, SlurmCluster, console_turn, logs, settle, state, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def by_hand(slurm: SlurmCluster, *options: str) -> int:
    """A Slurm job submitted outside the console (a user's own sbatch), running once this returns."""
    answer = slurm.command(
        "sbatch", "--parsable", "--job-name=by-hand", "--output=/dev/null", *options, "--wrap=sleep 120"
    )
    slurm_id = int(answer.strip().split(";")[0])
    wait_until(
        lambda: any(one["job_id"] == slurm_id and one["job_state"] == "RUNNING" for one in slurm.live_jobs()),
        what=f"the by-hand job {slurm_id} runs",
    )
    return slurm_id


def held(name: str) -> str:
    return str(Node.objects.get(name=name).labels.get(GPUS_OUTSIDE_LABEL, ""))


def test_a_job_outside_the_console_over_both_nodes_holds_its_gpus_on_each(
    slurm: SlurmCluster, submit: Callable[..., Job], client_for: Clients, member: AbstractUser
) -> None:
    outside = by_hand(slurm, "--nodes=2", f"--nodelist={','.join(NODE_NAMES)}", "--gres=gpu:1")
    settle(lambda: all(held(name) for name in NODE_NAMES), what="one GPU held outside on each node")
    assert all(len(held(name).split(",")) == 1 for name in NODE_NAMES)
    # One GPU left on each node: a job of two waits in the console, not in Slurm.
    pair = submit("pair", 'echo "on $SLURMD_NODENAME"; sleep 120', gpus=2)
    for _turn in range(3):
        console_turn()
    assert state(pair) == JobState.PENDING and not SlurmJob.objects.filter(job=pair).exists()
    slurm.command("scancel", str(outside))
    settle(lambda: logs(client_for(member), pair)[-1:] in (["on n1"], ["on n2"]), what="the pair runs once it is freed")
    assert not any(held(name) for name in NODE_NAMES)


def test_a_job_outside_the_console_started_since_the_last_sync_sends_the_placed_job_back_to_the_queue(
    slurm: SlurmCluster, submit: Callable[..., Job], client_for: Clients, member: AbstractUser
) -> None:
    first = submit("first", 'echo "on $SLURMD_NODENAME"; sleep 120', gpus=2)
    (line,) = settle(lambda: logs(client_for(member), first), what="the first job runs")
    other = next(name for name in NODE_NAMES if f"on {name}" != line)
    # Someone takes the other node's GPUs in Slurm; the console has not read the cluster since.
    outside = by_hand(slurm, f"--nodelist={other}", "--gres=gpu:2")
    assert held(other) == ""
    second = submit("second", 'echo "on $SLURMD_NODENAME"; sleep 120', gpus=1)
    # The cycle (no sync before it) places the job on the other node, free as it last read it;
    # the check before sbatch finds the GPU taken and sends the job back.
    run_cycle(trigger="slurm-test")
    assert state(second) == JobState.PENDING and not SlurmJob.objects.filter(job=second).exists()
    requeued = JobEvent.objects.get(job=second, kind=JobEventKind.REQUEUED)
    assert f"Slurm job {outside}, outside the console, took GPU" in requeued.message and other in requeued.message
    assert held(other) == "0,1"
    for _turn in range(3):
        console_turn()
    assert state(second) == JobState.PENDING and not SlurmJob.objects.filter(job=second).exists()
    slurm.command("scancel", str(outside))
    settle(lambda: logs(client_for(member), second) == [f"on {other}"], what="the second job once the node is free")
    assert JobEvent.objects.filter(job=second, kind=JobEventKind.STARTED).count() == 1
