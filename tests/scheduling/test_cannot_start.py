"""A job that can never start as asked (a replica above every node, more GPUs than the pool)
says so: "Cannot start: …" in the estimate, beside a Submit button that still queues it; on the
Jobs page under the State filter "Cannot start", in its row and on its page; in the API's list
filter `reason=exceeds_cluster`. PAI's cluster: 4 nodes × 8 GPUs, 32 in the pool."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from rest_framework.test import APIClient

from scheduling import services as job_services
from scheduling.models import Job
from tests.scheduling.test_job_pages import client_as, job_form, world

pytestmark = pytest.mark.django_db
__all__ = ["world"]  # the fixture, shared with the Submit job and Jobs pages' tests


@pytest.mark.parametrize(
    ("fields", "sentence"),
    [
        (
            {"gpus": "12"},
            "Cannot start: needs 12 GPUs on one node; the largest node has 8 (#2 in the queue, exceeds_cluster).",
        ),
        (
            {"gpus": "8", "replicas": "5"},
            "Cannot start: asks 40 GPUs, the pool has 32 (#2 in the queue, exceeds_cluster).",
        ),
    ],
    ids=["larger-than-any-node", "larger-than-the-pool"],
)
def test_the_estimate_says_cannot_start_and_still_offers_submit(
    world: dict[str, AbstractUser], fields: dict[str, Any], sentence: str
) -> None:
    estimate = client_as("dave").post("/jobs/new/estimate/", job_form(**fields)).content.decode()
    assert 'data-verdict="cannot_start"' in estimate
    assert sentence in estimate
    assert 'data-testid="cannot-start-warning"' in estimate and "Submit still queues it" in estimate
    page = client_as("dave").post("/jobs/new/", job_form(step="estimate", **fields)).content.decode()
    assert sentence in page and '<button type="submit" name="step" value="submit">Submit</button>' in page


def test_a_job_that_merely_waits_still_says_waits(world: dict[str, AbstractUser]) -> None:
    estimate = client_as("dave").post("/jobs/new/estimate/", job_form(gpus="8")).content.decode()
    assert 'data-verdict="waits"' in estimate and "Cannot start" not in estimate


def test_submitted_it_is_listed_under_cannot_start_and_its_page_says_why(world: dict[str, AbstractUser]) -> None:
    dave = client_as("dave")
    assert dave.post("/jobs/new/", job_form(name="wide", gpus="12")).status_code == 302
    job_services.converge()  # the cycle its commit asks for (the test's transaction never commits)
    wide = Job.objects.get(name="wide")
    assert (wide.state, wide.shown_code) == ("pending", "exceeds_cluster")

    listed = dave.get("/jobs/?state=cannot_start").content.decode()
    # huge-b (5 × 8 GPUs on a 32-GPU pool) cannot start either; train-b runs and is left out.
    assert sorted(part.split('"')[0] for part in listed.split('data-job="')[1:]) == ["huge-b", "wide"]
    assert "<strong>Cannot start:</strong> needs 12 GPUs on one node; the largest node has 8" in listed
    assert '<option value="cannot_start" selected>Cannot start</option>' in listed
    assert dave.get("/jobs/?state=pending").content.decode().count('data-testid="job-row"') == 2

    page = dave.get(f"/jobs/{wide.pk}/").content.decode()
    assert "<dt>Why it cannot start</dt>" in page
    assert "It asks more than the cluster has and waits until the cluster grows" in page


def test_the_api_lists_them_by_reason_and_refuses_an_unknown_one(world: dict[str, AbstractUser]) -> None:
    api = APIClient()
    api.force_authenticate(world["dave"])
    listed = api.get("/api/v1/jobs/", {"reason": "exceeds_cluster"}).json()
    assert [job["name"] for job in listed["results"]] == ["huge-b"]
    assert listed["results"][0]["reason"]["code"] == "exceeds_cluster"
    unknown = api.get("/api/v1/jobs/", {"reason": "too_big"})
    assert unknown.status_code == 400 and "reason" in unknown.json()
