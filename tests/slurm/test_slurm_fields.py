"""Where the console shows Slurm (issue 25), without a cluster: the jobs API's `slurm_job_ids`
(the Slurm jobs of a job's replicas, oldest first; empty for other executors), the job page's
"Slurm jobs", `gqc describe`, and the Nodes page's badge with a Slurm node's own state. The
real-Slurm tests (test_slurm_executor.py) check the same fields for a job Slurm ran."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.test import Client
from django.utils import timezone

from gqc.cli import job_description
from quotas.models import NodeExecutor
from quotas.services.nodes import NewNode, create_nodes
from scheduling.models import Job
from scheduling.node_views import SLURM_STATE_LABEL
from slurm.models import SlurmJob
from tests.console.conftest import pai_world  # noqa: F401 - the world these pages are read in

pytestmark = pytest.mark.django_db


def as_user(users: dict[str, AbstractUser], role: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(pk=users[role].pk))
    return client


def ran_on_slurm(job: Job, first_id: int) -> list[str]:
    ids = []
    for rank, placement in enumerate(job.placements.order_by("id")):
        SlurmJob.objects.create(
            job=job,
            replica=placement.pk,
            rank=rank,
            node_name=placement.node.name,
            name=f"gqc-test-{job.pk}-{placement.pk}",
            slurm_id=first_id,
            array_task=rank,
            state="RUNNING",
            output="/dev/null",
            submitted_at=timezone.now(),
        )
        ids.append(f"{first_id}_{rank}")
    # A replica whose sbatch has not answered yet has no id: not listed.
    return ids


def test_the_jobs_api_lists_the_slurm_job_ids_of_a_jobs_replicas_and_none_for_others(
    pai_world: dict[str, AbstractUser],  # noqa: F811
) -> None:
    job = Job.objects.get(name="train-b")
    client = as_user(pai_world, "developer")
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["slurm_job_ids"] == []
    ids = ran_on_slurm(job, 812)
    assert ids == ["812_0", "812_1", "812_2"]
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["slurm_job_ids"] == ids
    listed = {row["name"]: row for row in client.get("/api/v1/jobs/").json()["results"]}
    assert listed["train-b"]["slurm_job_ids"] == ids


def test_the_job_page_and_gqc_describe_name_the_slurm_jobs(pai_world: dict[str, AbstractUser]) -> None:  # noqa: F811
    job = Job.objects.get(name="train-b")
    client = as_user(pai_world, "developer")
    assert 'data-testid="slurm-job-ids"' not in client.get(f"/jobs/{job.pk}/").content.decode()
    ran_on_slurm(job, 812)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert '<dt>Slurm jobs</dt>\n    <dd data-testid="slurm-job-ids">812_0, 812_1, 812_2</dd>' in page
    answer = client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert "Slurm jobs:" in job_description(answer) and "812_0, 812_1, 812_2" in job_description(answer)
    assert "Slurm jobs" not in job_description({**answer, "slurm_job_ids": []})


def test_the_nodes_page_shows_a_slurm_nodes_own_state_beside_the_consoles(
    pai_world: dict[str, AbstractUser],  # noqa: F811
) -> None:
    create_nodes(actor=None, nodes=[NewNode("n1", 2, executor=NodeExecutor.SLURM, labels={SLURM_STATE_LABEL: "MIXED"})])
    page = as_user(pai_world, "platform-admin").get("/nodes/").content.decode()
    assert page.count('data-testid="slurm-state"') == 1
    assert ">Slurm MIXED</span>" in page
