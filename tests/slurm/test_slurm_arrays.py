"""A wave's replicas on one node as one Slurm job array (docs/slurm.md, "Jobs"), on a real Slurm
of two nodes of two fake GPUs: a job of four one-GPU replicas is two arrays (one sbatch per
node), each task sees exactly its own GPU and its own rank, and the job's cancel ends every task.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractUser

from scheduling.models import Job, JobEvent, JobEventKind, JobState
from slurm.models import SlurmJob
from slurm.testing import job_label
from tests.slurm.conftest import Clients, SlurmCluster, logs, settle, state

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_waves_replicas_on_a_node_are_one_array_whose_tasks_each_see_their_own_gpu(
    slurm: SlurmCluster, submit: Callable[..., Job], client_for: Clients, member: AbstractUser
) -> None:
    command = 'echo "cuda=$CUDA_VISIBLE_DEVICES rank=$GQC_REPLICA_RANK of=$GQC_REPLICAS"; exec sleep 120'
    job = submit("wave", command, replicas=4, grace_seconds=1)
    settle(lambda: SlurmJob.objects.filter(job=job, state="RUNNING").count() == 4, what="the four tasks run")
    rows = list(SlurmJob.objects.filter(job=job).order_by("id"))
    arrays: dict[int | None, list[SlurmJob]] = defaultdict(list)
    for row in rows:
        arrays[row.slurm_id].append(row)
    # One array per node, its tasks 0 and 1, named after its first replica.
    assert len(arrays) == 2
    for tasks in arrays.values():
        assert sorted(row.array_task for row in tasks if row.array_task is not None) == [0, 1]
        assert len({row.node_name for row in tasks}) == 1 and len({row.name for row in tasks}) == 1
        # Two tasks on one node: one GPU each, as Slurm bound them.
        assert sorted(device for row in tasks for device in row.devices) == [0, 1]
        # Each task its own output file: the array's `<name>_%a.out`.
        folder = Path(tasks[0].output).parent
        assert sorted(row.output for row in tasks) == [str(folder / f"{tasks[0].name}_{n}.out") for n in (0, 1)]
    expected = sorted(f"cuda={row.devices[0]} rank={row.rank} of=4" for row in rows)
    settle(lambda: len(logs(client_for(member), job)) == 4, what="the four lines in the job's log")
    assert sorted(logs(client_for(member), job)) == expected
    placed = {placement.pk: placement.devices for placement in Job.objects.get(pk=job.pk).placements.all()}
    assert placed == {row.replica: row.devices for row in rows}
    started = JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).values_list("message", flat=True)
    assert sorted(started) == sorted(
        f"replica {row.rank} started on {row.node_name} as Slurm job {row.slurm_id}_{row.array_task} "
        f"(GPUs {row.devices[0]})"
        for row in rows
    )
    # The job's cancel ends each task (scancel ARRAY_TASK): none is left in Slurm.
    assert client_for(member).post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    settle(lambda: state(job) == JobState.CANCELLED, what="the job cancelled")
    live = {job_label(one) for one in slurm.live_jobs()}
    assert not live & {row.slurm_label for row in rows}
    assert Job.objects.get(pk=job.pk).allocated_gpus == 0
