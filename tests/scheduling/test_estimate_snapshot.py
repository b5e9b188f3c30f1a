"""The estimate's cluster read (selectors.estimate_snapshot) is the cycle's (build_snapshot) at
every moment: reused while nothing changed, the changed jobs read again after submits, cancels
and cycles, the nodes and quotas read again after their changes, everything read again after a
rename of a node the jobs name or any other audited change (a workspace's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser, User
from django.db import transaction

from quotas import services as quota_services
from quotas.models import Node, Quota
from scheduling import estimate_base, selectors
from scheduling import services as job_services
from scheduling.clock import get_clock
from scheduling.models import Job
from tests.scheduling.test_pages import build_pai
from workspaces import services as workspace_services
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


def assert_same_as_the_cycle_would_read(owner: AbstractUser, workspace_name: str = "workspace-b") -> None:
    workspace, quota = Workspace.objects.get(name=workspace_name), Quota.objects.get(name="Quota1.1")
    now = get_clock().now()
    with transaction.atomic():
        assert isinstance(owner, User)  # auth.User is the user model: what Job.owner is typed for
        probe = Job.objects.create(
            name="probe",
            workspace=workspace,
            quota=quota,
            owner=owner,
            kind="training",
            gpus=1,
            priority=3,
            preemptible=True,
            submitted_at=now,
        )
        estimated, estimated_index = selectors.estimate_snapshot(now, job_pk=probe.pk)
        full, full_index = selectors.build_snapshot(now)
        transaction.set_rollback(True)
    assert estimated == full
    assert {key: seen.name for key, seen in estimated_index.jobs.items()} == {
        key: seen.name for key, seen in full_index.jobs.items()
    }


def test_the_estimate_reads_the_cluster_as_the_cycle_does(
    make_user: Callable[..., AbstractUser], settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.SCHEDULER_TRIGGER = "inline"
    users = build_pai(make_user)
    full_reads: list[int] = []
    read_in_full = estimate_base._full_estimate_base

    def counted(*args: Any, **kwargs: Any) -> Any:
        full_reads.append(1)
        return read_in_full(*args, **kwargs)

    monkeypatch.setattr(estimate_base, "_full_estimate_base", counted)
    dave = users["dave"]
    assert_same_as_the_cycle_would_read(dave)  # the first read: in full
    assert_same_as_the_cycle_would_read(dave)  # nothing changed: reused
    job_services.cancel_job(actor=None, job=Job.objects.get(name="train-b"))  # frees 24; huge-b waits on
    assert_same_as_the_cycle_would_read(dave)
    workspace, quota = Workspace.objects.get(name="workspace-b"), Quota.objects.get(name="Quota1.1")
    job_services.submit_job(actor=dave, workspace=workspace, quota=quota, name="new", kind="notebook", gpus=0.5)
    assert_same_as_the_cycle_would_read(dave)
    job_services.converge()  # cycles admit and place: revisions move
    assert_same_as_the_cycle_would_read(dave)
    assert len(full_reads) == 1  # the first estimate
    quota_services.set_node_state(actor=None, node=Node.objects.get(name="gpu-4"), state="cordoned")
    assert_same_as_the_cycle_would_read(dave)  # an audited node change: the nodes read again
    quota_services.scale_quota(actor=None, quota=Quota.objects.get(name="Quota1.2"), gpus=16)
    assert_same_as_the_cycle_would_read(dave)  # an audited quota change: the quotas read again
    assert len(full_reads) == 1
    quota_services.update_node(actor=None, node=Node.objects.get(name="gpu-1"), name="gpu-1b")
    assert_same_as_the_cycle_would_read(dave)  # a node the jobs name renamed: read in full again
    assert len(full_reads) == 2
    workspace_services.update_workspace(actor=None, workspace=Workspace.objects.get(name="workspace-b"), name="lab-b")
    assert_same_as_the_cycle_would_read(dave, workspace_name="lab-b")  # a workspace change: in full
    assert len(full_reads) == 3
