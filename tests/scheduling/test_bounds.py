"""Every size a submitter sends has a bound: the value at the bound is taken, the next one is a
400 naming the field, the bound and the value (quotas.bounds), in the API and in the service."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from quotas import bounds
from scheduling import services
from scheduling.models import Job
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db

Clients = Callable[[AbstractUser | None], APIClient]

# field, the largest value taken, the smallest refused, what the refusal says
JOB_BOUNDS = [
    pytest.param("gpus", bounds.JOB_GPUS_MAX, 10_001, "gpus", "at most 10,000", id="gpus"),
    pytest.param("gpus", 0.125, 0.1255, "gpus", "at most 3 decimals", id="gpu-decimals"),
    pytest.param("replicas", bounds.JOB_REPLICAS_MAX, 100_001, "replicas", "at most 100,000", id="replicas"),
    pytest.param("cpu", bounds.JOB_CPU_MAX, 4_097, "cpu", "at most 4,096", id="cpu"),
    pytest.param("memory_gib", bounds.JOB_MEMORY_GIB_MAX, 65_537, "memory_gib", "at most 65,536", id="memory"),
    pytest.param("duration", bounds.JOB_DURATION_MAX, 31_536_001, "duration", "at most 31,536,000", id="duration"),
    pytest.param("grace_seconds", bounds.GRACE_SECONDS_MAX, 86_401, "grace_seconds", "at most 86,400", id="grace"),
    pytest.param("name", "n" * 200, "n" * 201, "name", "at most 200 characters", id="name"),
    pytest.param("command", "c" * 10_000, "c" * 10_001, "command", "at most 10,000 characters", id="command"),
]


def submission(**fields: Any) -> dict[str, Any]:
    return {"name": "train", "workspace": "lab", "quota": "team-a", "kind": "training", "gpus": 1, **fields}


@pytest.mark.parametrize(("field", "at_bound", "above", "error_field", "says"), JOB_BOUNDS)
def test_a_submission_at_the_bound_is_taken_and_above_it_refused(
    client_for: Clients, member: AbstractUser, field: str, at_bound: Any, above: Any, error_field: str, says: str
) -> None:
    client = client_for(member)

    taken = client.post("/api/v1/jobs/", submission(**{field: at_bound}, dry_run=True), format="json")
    refused = client.post("/api/v1/jobs/", submission(**{field: above}), format="json")

    assert taken.status_code == 200, taken.json()
    assert refused.status_code == 400
    assert says in refused.json()[error_field][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize(("field", "at_bound", "above", "error_field", "says"), JOB_BOUNDS)
def test_the_service_refuses_the_same_sizes_whoever_calls_it(
    cluster: Cluster, field: str, at_bound: Any, above: Any, error_field: str, says: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        services.submit_job(
            actor=None,
            workspace=cluster.workspace,
            quota=cluster.quotas["team-a"],
            **{"name": "train", "kind": "training", "gpus": 1.0, field: above},
        )

    assert says in refused.value.message_dict[error_field][0]


def test_an_absurd_job_is_refused_with_a_number_a_person_can_read(client_for: Clients, member: AbstractUser) -> None:
    refused = client_for(member).post("/api/v1/jobs/", submission(gpus=1e308), format="json")

    assert refused.status_code == 400
    assert refused.json()["gpus"] == ["gpus must be at most 10,000, got 1e+308."]


def test_the_largest_job_allowed_waits_as_exceeding_the_cluster_with_readable_figures(
    cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        cluster.submit("huge", gpus=bounds.JOB_GPUS_MAX, replicas=bounds.JOB_REPLICAS_MAX)

    waiting = cluster.job("huge")
    assert (waiting.state, waiting.shown_code) == ("pending", "exceeds_cluster")
    assert waiting.shown_message == "needs 10,000 GPUs on one node; the largest node has 8", waiting.shown_message
