from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser

from quotas import services as quota_services
from scheduling import services as job_services
from scheduling.models import Job
from workspaces import services as workspace_services


@pytest.fixture
def cluster(make_user: Callable[..., AbstractUser], settings: Any) -> dict[str, Any]:
    """Two simulated nodes of 8 GPUs; a 2-GPU training job and a 1-GPU notebook running on them;
    dave, a developer of lab-a, sees both."""
    settings.SCHEDULER_TRIGGER = "inline"
    settings.SCHEDULER_PUBLISH_EVENTS = False
    dave = make_user("dave")
    nodes = [quota_services.create_node(actor=None, name=f"dgx-{index}", gpus=8) for index in (1, 2)]
    quota = quota_services.create_quota(actor=None, name="Quota1", gpus=16)
    lab = workspace_services.create_workspace(actor=None, name="lab-a", quotas=[quota])
    workspace_services.add_member(actor=None, workspace=lab, user=dave, role="developer")
    train = job_services.submit_job(actor=dave, workspace=lab, quota=quota, name="train", kind="training", gpus=2)
    notebook = job_services.submit_job(actor=dave, workspace=lab, quota=quota, name="nb", kind="notebook", gpus=1)
    assert isinstance(train, Job) and isinstance(notebook, Job)
    job_services.converge()
    train, notebook = Job.objects.get(pk=train.pk), Job.objects.get(pk=notebook.pk)
    assert train.state == notebook.state == "running"
    return {"dave": dave, "nodes": nodes, "train": train, "notebook": notebook, "lab": lab}
