"""The console over a real Slurm (tests/slurm/conftest.py): jobs submitted, cancelled and read
through the API run as Slurm batch jobs on two emulated nodes of two fake GPUs each.

The console's side runs in the test's thread, as the worker would run it: each poll ticks the
executor and runs a cycle (what beat's tick and the triggers do), then checks the condition, up to
a deadline. Nothing is mocked: sbatch, squeue, sinfo and scancel answer from slurmctld.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client
from pytest_django.live_server_helper import LiveServer

from gqc.cli import cli
from quotas.models import Node, NodeExecutor, NodeState
from quotas.node_agents import installation_identity
from scheduling.models import Job, JobEvent, JobEventKind, JobState
from scheduling.node_views import SLURM_STATE_LABEL
from scheduling.snapshot_rows import GPUS_OUTSIDE_LABEL
from slurm import executor, inventory
from slurm.models import SlurmJob
from slurm.testing import job_label
from tests.conftest import PASSWORD
from tests.scheduling.conftest import Cluster
from tests.slurm.conftest import (
    GPUS_PER_NODE,
    NODE_NAMES,
    PARTITION,
    Clients,
    SlurmCluster,
    console_turn,
    logs,
    settle,
    state,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


def slurm_ids(job: Job) -> list[str]:
    return executor.slurm_ids_of(job)


def live_in_slurm(slurm: SlurmCluster, job: Job) -> list[str]:
    ids = set(slurm_ids(job))
    return [job_label(one) for one in slurm.live_jobs() if job_label(one) in ids]


def test_slurm_nodes_become_console_nodes_with_their_gpus_cpus_memory_and_partition(lab: Cluster) -> None:
    nodes = {node.name: node for node in Node.objects.filter(executor=NodeExecutor.SLURM)}
    assert sorted(nodes) == list(NODE_NAMES)
    for node in nodes.values():
        assert (node.gpus, node.gpu_model, node.cpu, node.state) == (GPUS_PER_NODE, "fake", 4.0, NodeState.READY)
        assert node.memory_gib == pytest.approx(4000 / 1024, abs=0.001)
        assert node.labels[inventory.PARTITION] == PARTITION
        assert node.pool.name == PARTITION
        # Slurm's own state, which the Nodes page shows beside the console's.
        assert node.labels[SLURM_STATE_LABEL] == "IDLE"
        assert list(node.devices.values_list("index", flat=True)) == list(range(GPUS_PER_NODE))


def test_a_job_sees_exactly_the_gpus_slurm_gave_it_and_succeeds(
    submit: Callable[..., Job],
    client_for: Clients,
    member: AbstractUser,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    # The console's own environment (its database URL, say) is not the job's.
    monkeypatch.setenv("CONSOLE_ONLY_SECRET", "leaked")
    # The job waits for the test to have looked at it running, then exits 0.
    release = tmp_path / "release"
    job = submit(
        "cuda",
        'echo "cuda=$CUDA_VISIBLE_DEVICES rank=$GQC_REPLICA_RANK quota=$GQC_QUOTA secret=${CONSOLE_ONLY_SECRET:-none}"'
        f"; while [ ! -e {release} ]; do sleep 0.1; done",
        gpus=2,
    )
    row = settle(lambda: SlurmJob.objects.filter(job=job, state="RUNNING").first(), what="seen running")
    devices = ",".join(map(str, row.devices))
    assert len(row.devices) == 2
    # The placement says which GPUs Slurm bound, so that the Nodes grid shows them.
    assert Job.objects.get(pk=job.pk).placements.get().devices == row.devices
    settle(lambda: logs(client_for(member), job), what="its line in the log")
    assert logs(client_for(member), job) == [f"cuda={devices} rank=0 quota=team-a secret=none"]
    release.touch()
    settle(lambda: state(job) == JobState.SUCCEEDED, what="the job succeeded")
    row.refresh_from_db()
    assert (row.state, row.exit_code) == ("COMPLETED", 0)
    started = JobEvent.objects.get(job=job, kind=JobEventKind.STARTED)
    assert f"Slurm job {row.slurm_id}_0" in started.message and row.array_task == 0
    assert Job.objects.get(pk=job.pk).allocated_gpus == 0


def test_a_failing_command_fails_the_job_with_its_exit_code_and_the_page_and_gqc_name_its_slurm_job(
    submit: Callable[..., Job],
    client_for: Clients,
    member: AbstractUser,
    live_server: LiveServer,
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    job = submit("bad", "echo broken >&2; exit 3")
    settle(lambda: state(job) == JobState.FAILED, what="the job failed")
    failed = JobEvent.objects.get(job=job, kind=JobEventKind.FAILED)
    assert "exited with code 3" in failed.message and "broken" in failed.message
    assert JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count() == 1
    (slurm_id,) = slurm_ids(job)
    assert client_for(member).get(f"/api/v1/jobs/{job.pk}/").json()["slurm_job_ids"] == [slurm_id]
    page = Client()
    page.force_login(get_user_model().objects.get(pk=member.pk))
    assert f"Slurm job {slurm_id}" in page.get(f"/jobs/{job.pk}/").content.decode()
    monkeypatch.setenv("GQC_CONFIG_DIR", str(tmp_path / "gqc"))
    runner = CliRunner()
    signed = runner.invoke(
        cli, ["login", live_server.url, "-u", member.username, "--password-stdin"], input=PASSWORD + "\n"
    )
    assert signed.exit_code == 0, signed.output
    described = runner.invoke(cli, ["describe", str(job.pk)])
    assert described.exit_code == 0 and f"Slurm job {slurm_id}" in described.output
    assert "Slurm jobs:" in described.output


def test_a_cancel_stops_the_slurm_job_and_frees_the_gpus_only_once_it_is_gone(
    slurm: SlurmCluster, submit: Callable[..., Job], client_for: Clients, member: AbstractUser
) -> None:
    # Four GPUs in all: the follower fits only once the sleeper's GPUs are free. The sleeper
    # ignores SIGTERM: only the SIGKILL at the end of its grace ends it.
    # Long enough that the cancel request (its cycles and ticks) returns well within it, even on a
    # loaded machine: the job is still releasing when it answers.
    grace = 4.0
    sleeper = submit("sleeper", 'trap "" TERM; echo ready; sleep 120', gpus=2, grace_seconds=grace)
    other = submit("other", "sleep 120", gpus=2)
    settle(lambda: logs(client_for(member), sleeper) == ["ready"], what="the sleeper runs")
    follower = submit("follower", "echo follower; sleep 120", gpus=2)
    assert state(follower) == JobState.PENDING
    answer = client_for(member).post(f"/api/v1/jobs/{sleeper.pk}/cancel/")
    cancelled_at = time.monotonic()
    assert answer.status_code == 200, answer.content
    assert state(sleeper) == JobState.RELEASING  # cancelled, its GPUs held until Slurm says it ended

    def follower_runs() -> bool:
        running = state(follower) == JobState.RUNNING
        # Never both: the follower holds the GPUs only once the sleeper's Slurm job is gone.
        assert not (running and live_in_slurm(slurm, sleeper))
        return running

    settle(follower_runs, what="the follower admitted on the freed GPUs")
    assert time.monotonic() - cancelled_at >= grace
    assert state(sleeper) == JobState.CANCELLED and live_in_slurm(slurm, sleeper) == []
    settle(lambda: logs(client_for(member), follower) == ["follower"], what="the follower runs")
    assert state(other) == JobState.RUNNING


def test_a_reclaim_ends_the_borrowers_slurm_job_and_starts_the_owners(
    slurm: SlurmCluster, submit: Callable[..., Job], client_for: Clients, member: AbstractUser
) -> None:
    borrowers = [submit(f"borrow-{n}", "echo lent; sleep 120", gpus=2, quota="team-b", grace_seconds=1) for n in (1, 2)]
    settle(lambda: all(logs(client_for(member), job) == ["lent"] for job in borrowers), what="both borrowers run")
    owner = submit("owner", "echo mine; sleep 120", gpus=2)
    settle(lambda: logs(client_for(member), owner) == ["mine"], what="the owner runs")
    evicted = [job for job in borrowers if state(job) != JobState.RUNNING]
    assert len(evicted) == 1
    assert state(evicted[0]) == JobState.PENDING
    assert live_in_slurm(slurm, evicted[0]) == []
    assert len(live_in_slurm(slurm, owner)) == 1
    assert JobEvent.objects.filter(job=evicted[0], kind=JobEventKind.REQUEUED).exists()


def test_a_node_drained_in_slurm_drains_in_the_console_and_its_job_moves(
    slurm: SlurmCluster, submit: Callable[..., Job], client_for: Clients, member: AbstractUser
) -> None:
    job = submit("mover", 'echo "on $SLURMD_NODENAME"; sleep 120', gpus=2, grace_seconds=1)
    (first,) = settle(lambda: logs(client_for(member), job), what="it runs")
    drained = first.removeprefix("on ")
    other = next(name for name in NODE_NAMES if name != drained)
    slurm.command("scontrol", "update", f"nodename={drained}", "state=drain", "reason=fan broken")
    node = settle(lambda: Node.objects.filter(name=drained, state=NodeState.DRAINING).first(), what="draining")
    assert node.labels[inventory.REASON] == "fan broken"
    assert Node.objects.get(name=other).state == NodeState.READY
    # The console evicts its job there (SIGTERM through Slurm), and places it again elsewhere.
    # Between the two runs' lines, slurmstepd's own ("*** JOB 1 ON n1 CANCELLED AT …").
    settle(lambda: logs(client_for(member), job)[-1] == f"on {other}", what="it runs on the other node")
    assert logs(client_for(member), job)[0] == first
    assert JobEvent.objects.filter(job=job, kind=JobEventKind.REQUEUED).exists()
    slurm.command("scontrol", "update", f"nodename={drained}", "state=resume")
    settle(lambda: Node.objects.get(name=drained).state == NodeState.READY, what="ready again")


def test_a_slurm_job_cancelled_by_hand_fails_the_console_job_with_the_reason(
    slurm: SlurmCluster, submit: Callable[..., Job], client_for: Clients, member: AbstractUser
) -> None:
    job = submit("victim", "echo up; sleep 120")
    settle(lambda: logs(client_for(member), job) == ["up"], what="it runs")
    slurm.command("scancel", *map(str, slurm_ids(job)))
    settle(lambda: state(job) == JobState.FAILED, what="the console job failed")
    failed = JobEvent.objects.get(job=job, kind=JobEventKind.FAILED)
    assert "CANCELLED outside the console" in failed.message


def test_a_restarted_console_adopts_its_running_slurm_job_and_starts_it_not_twice(
    slurm: SlurmCluster, submit: Callable[..., Job], tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    job = submit("long", f"echo x >> {starts}; sleep 120", grace_seconds=1)
    settle(lambda: starts.exists(), what="the job started")
    (first_id,) = slurm_ids(job)
    # The console dies right after sbatch answered, before it wrote the id down, and starts again
    # with nothing in memory: the row without an id is matched to Slurm's job by its name.
    SlurmJob.objects.filter(job=job).update(slurm_id=None)
    executor.forget_last_sync()
    inventory.forget_warnings()
    settle(lambda: slurm_ids(job) == [first_id], what="the Slurm job adopted by its name")
    for _turn in range(5):
        console_turn()
    assert starts.read_text() == "x\n"
    assert len(live_in_slurm(slurm, job)) == 1 and state(job) == JobState.RUNNING
    assert JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count() == 1


def test_another_consoles_slurm_jobs_with_the_same_numbers_are_never_adopted_nor_stopped(
    slurm: SlurmCluster,
    submit: Callable[..., Job],
    client_for: Clients,
    member: AbstractUser,
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = submit("mine", "echo mine; sleep 120", grace_seconds=1)
    settle(lambda: logs(client_for(member), job) == ["mine"], what="the console's job runs")
    row = SlurmJob.objects.get(job=job)
    assert row.name == f"gqc-{installation_identity()}-{job.pk}-{row.replica}"
    # Another console on the same cluster, with the same job and replica numbers: one of today's
    # names, and one from before names carried an identity. Submitted as that console would.
    theirs = [f"gqc-{uuid.uuid4()}-{job.pk}-{row.replica}", f"gqc-{job.pk}-{row.replica}"]
    foreign_ids = [
        int(
            slurm.command(
                "sbatch",
                "--parsable",
                f"--job-name={name}",
                f"--nodelist={row.node_name}",
                "--output=/dev/null",
                "--wrap=sleep 120",
            )
            .strip()
            .split(";")[0]
        )
        for name in theirs
    ]
    wait_until(
        lambda: {int(one["job_id"]) for one in slurm.live_jobs() if one["job_state"] == "RUNNING"} >= set(foreign_ids),
        what="the other console's jobs run",
    )
    # This console lost sbatch's answer and restarts: it adopts its own job by its name, not theirs.
    (own_id,) = slurm_ids(job)
    SlurmJob.objects.filter(job=job).update(slurm_id=None)
    executor.forget_last_sync()
    with caplog.at_level(logging.INFO, logger="slurm"):
        settle(lambda: slurm_ids(job) == [own_id], what="its own Slurm job adopted")
        for _turn in range(5):
            console_turn()
    assert state(job) == JobState.RUNNING
    assert JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count() == 1
    assert SlurmJob.objects.filter(job=job).count() == 1
    for foreign_id, name in zip(foreign_ids, theirs, strict=True):
        said = [record.getMessage() for record in caplog.records if f"Slurm job {foreign_id} " in record.getMessage()]
        # Once, over the six syncs that saw it.
        assert len(said) == 1 and f"({name}, RUNNING)" in said[0] and "not this console's: left alone" in said[0], said
    # Cancelling the console's job ends its own Slurm job only.
    assert client_for(member).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    settle(lambda: state(job) == JobState.CANCELLED, what="the console's job cancelled")
    live = {job_label(one) for one in slurm.live_jobs()}
    assert own_id not in live and set(map(str, foreign_ids)) <= live


def test_gpus_a_slurm_job_outside_the_console_holds_are_not_free_to_the_console(
    slurm: SlurmCluster, submit: Callable[..., Job], client_for: Clients, member: AbstractUser
) -> None:
    # Someone submits straight to Slurm, outside the console: both GPUs of n1.
    outside = int(
        slurm.command(
            "sbatch",
            "--parsable",
            "--job-name=by-hand",
            "--nodelist=n1",
            f"--gres=gpu:{GPUS_PER_NODE}",
            "--output=/dev/null",
            "--wrap=sleep 120",
        )
        .strip()
        .split(";")[0]
    )
    every_gpu = ",".join(map(str, range(GPUS_PER_NODE)))
    settle(
        lambda: Node.objects.get(name="n1").labels.get(GPUS_OUTSIDE_LABEL) == every_gpu, what="n1's GPUs held outside"
    )
    assert GPUS_OUTSIDE_LABEL not in Node.objects.get(name="n2").labels
    first = submit("first", 'echo "on $SLURMD_NODENAME"; sleep 120', gpus=GPUS_PER_NODE)
    settle(lambda: logs(client_for(member), first) == ["on n2"], what="the first job on n2, the node left free")
    # No node has a free GPU now: the second job waits in the console rather than counting as
    # running on n1 while Slurm keeps it pending.
    second = submit("second", 'echo "on $SLURMD_NODENAME"; sleep 120', gpus=1)
    for _turn in range(3):
        console_turn()
    assert state(second) == JobState.PENDING and not SlurmJob.objects.filter(job=second).exists()
    slurm.command("scancel", str(outside))
    settle(lambda: logs(client_for(member), second) == ["on n1"], what="the second job on n1 once it is free")
    assert GPUS_OUTSIDE_LABEL not in Node.objects.get(name="n1").labels
    assert state(first) == JobState.RUNNING


def test_a_silent_slurmctld_makes_the_nodes_not_ready_without_a_traceback(
    slurm: SlurmCluster, lab: Cluster, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.NODE_LOST_SECONDS = 1.0
    # A client command waits about MessageTimeout for a dead slurmctld; the console's bound is shorter.
    settings.SLURM_COMMAND_SECONDS = 1.0
    slurm.stop_controller()
    try:
        with caplog.at_level(logging.WARNING):
            settle(
                lambda: (
                    set(Node.objects.filter(executor=NodeExecutor.SLURM).values_list("state", flat=True))
                    == {NodeState.NOT_READY}
                ),
                what="the Slurm nodes not ready",
            )
        node = Node.objects.get(name="n1")
        assert node.labels[inventory.AVAILABILITY] == "unreachable"
        assert node.labels[inventory.REASON].startswith("Slurm did not answer: ")
        said = [record for record in caplog.records if record.name.startswith("slurm")]
        assert said and all(record.exc_info is None for record in said)
    finally:
        slurm.start_controller(fresh=False)
    settings.SLURM_COMMAND_SECONDS = 10.0
    settle(
        lambda: (
            set(Node.objects.filter(executor=NodeExecutor.SLURM).values_list("state", flat=True)) == {NodeState.READY}
        ),
        what="ready again once slurmctld answers",
    )


def test_an_output_directory_that_cannot_be_made_holds_the_submission_back_with_a_warning(
    slurm: SlurmCluster,
    submit: Callable[..., Job],
    client_for: Clients,
    member: AbstractUser,
    settings: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    settings.SLURM_OUTPUT_DIR = str(blocker / "output")
    with caplog.at_level(logging.WARNING):
        job = submit("held", "echo finally")
        console_turn()
    assert SlurmJob.objects.filter(job=job).count() == 0
    assert any("SLURM_OUTPUT_DIR" in record.getMessage() and record.exc_info is None for record in caplog.records)
    settings.SLURM_OUTPUT_DIR = str(tmp_path / "output")
    settle(lambda: logs(client_for(member), job) == ["finally"], what="submitted once the directory can be made")
