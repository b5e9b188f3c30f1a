"""The claims of a wave's replicas (slurm.submitting._claim_all) when another process claimed some
of them first: no Slurm needed, only the database. The cycle's submission and a sync's meet on a
wave in a drain; the replicas taken are left out, the rest claimed together."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm import submitting
from slurm.models import SlurmJob
from tests.scheduling.conftest import build_cluster

pytestmark = pytest.mark.django_db


def _group(job_ids: list[int], replicas: list[int], node: str, output_dir: Path) -> submitting._Group:
    from scheduling.models import Job

    jobs = {job.pk: job for job in Job.objects.filter(pk__in=job_ids)}
    name = f"gqc-test-{replicas[0]}"
    tasks = []
    for task, (job_id, replica) in enumerate(zip(job_ids, replicas, strict=True)):
        one = submitting._Placed(replica, job_id, node, (task,), 1.0, "gpu")
        row = submitting._claim_row(one, jobs[job_id], name, task, {}, output_dir)
        tasks.append(submitting._Task(one, jobs[job_id], row))
    return submitting._Group(node, "gpu", 1, 0, 0, name, str(output_dir / f"{name}_%a.out"), tasks)


def test_a_conflict_leaves_out_only_the_replicas_taken(tmp_path: Path, django_assert_max_num_queries: Any) -> None:
    cluster = build_cluster(tree=(("team-a", None, 8.0),))
    jobs = [cluster.submit(f"j{number}", "team-a").pk for number in range(22)]
    first = _group(jobs[:20], list(range(101, 121)), "gpu-1", tmp_path)
    second = _group(jobs[20:], [121, 122], "gpu-2", tmp_path)
    # Another process claimed replica 102 (of the first group) and all of the second before us.
    taken = [_group([jobs[1]], [102], "gpu-1", tmp_path), _group(jobs[20:], [121, 122], "gpu-2", tmp_path)]
    assert submitting._claim_all(taken) == taken

    # The rest in one more statement, not one INSERT a replica (a few with the savepoints).
    with django_assert_max_num_queries(10):
        kept = submitting._claim_all([first, second])

    assert kept == [first]
    assert [task.row.replica for task in first.tasks] == [101, *range(103, 121)]
    assert all(task.row.pk is not None for task in first.tasks)
    assert [task.row.array_task for task in first.tasks] == [0, *range(2, 20)]
    assert SlurmJob.objects.count() == 22
    assert set(SlurmJob.objects.filter(name=first.name).values_list("replica", flat=True)) == {101, *range(103, 121)}
