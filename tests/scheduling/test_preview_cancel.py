"""preview_cancel_job runs the very cancel of cancel_job and rolls it back once the scheduler's
preview is read: the preview names what the freed GPUs admit, and nothing stays behind."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from quotas.models import AuditRecord
from scheduling import services
from scheduling.models import JobEvent, JobState
from tests.scheduling.conftest import Cluster


def test_the_preview_admits_into_the_freed_gpus_and_leaves_no_trace(
    cluster: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    cluster.submit("first", "team-a", gpus=8)
    # Two replicas of 8 GPUs: they wait for both nodes, one of which `first` holds.
    cluster.submit("second", "team-b", gpus=8, replicas=2)
    services.converge()
    assert (cluster.state("first"), cluster.state("second")) == (JobState.RUNNING, JobState.PENDING)
    events_before = JobEvent.objects.count()

    with django_capture_on_commit_callbacks() as callbacks:
        preview = services.preview_cancel_job(actor=None, job=cluster.jobs["first"])

    assert preview.valid and preview.errors == {}
    assert [entry["job"] for entry in preview.preview["admit"]] == ["second"]
    assert callbacks == []  # no cycle asked for, no live event published
    assert cluster.state("first") == JobState.RUNNING
    assert JobEvent.objects.count() == events_before
    assert not AuditRecord.objects.filter(action="job.cancel").exists()


def test_a_finished_job_is_refused_by_the_preview_as_by_the_cancel(cluster: Cluster) -> None:
    job = cluster.submit("job", gpus=1)
    services.converge()
    services.finish_job(job=job)
    with pytest.raises(ValidationError) as refused:
        services.preview_cancel_job(actor=None, job=job)
    assert "already succeeded" in refused.value.message_dict["state"][0]
