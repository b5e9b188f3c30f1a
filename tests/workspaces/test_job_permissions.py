"""restrict() on jobs (any model with workspace_field/owner_field): who sees and who manages."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.models import Job
from tests.workspaces.permissions import PERSONAS, PermissionWorld
from workspaces import services
from workspaces.models import Membership
from workspaces.permissions import can, denial_reason, restrict


def _job(world: PermissionWorld, name: str, *, foreign: bool = False, owner: str = "developer") -> Job:
    return Job.objects.create(
        name=name,
        workspace=world.foreign if foreign else world.own,
        quota=world.quotas["Quota1.2" if foreign else "Quota1.1"],
        owner=world.foreign_users["developer"] if foreign else world.user(owner),
        kind="training",
        gpus=1,
        priority=3,
        preemptible=True,
        submitted_at=timezone.now(),
    )


# (sees own-team job, sees foreign job, manages the developer's job, manages own job as its owner)
JOB_TABLE = {
    "platform_admin": (True, True, True, True),
    "workspace_admin": (True, False, True, True),
    "developer": (True, False, True, True),
    "operator": (True, False, True, True),
    "labeling_admin": (True, False, False, True),
    "visitor": (True, False, False, False),
    "custom_role": (True, False, False, True),
    "authorized_non_member": (False, False, False, True),
    "non_member": (False, False, False, False),
    "anonymous": (False, False, False, False),
}


@pytest.mark.parametrize("persona", PERSONAS)
def test_who_sees_and_manages_which_job(world: PermissionWorld, persona: str) -> None:
    team_job = _job(world, "train-b")  # the developer's
    foreign_job = _job(world, "train-c", foreign=True)
    user = world.user(persona)
    own_job = _job(world, f"{persona}-job", owner=persona) if user is not None else None
    visible = set(restrict(Job.objects.filter(name__in=["train-b", "train-c"]), user).values_list("name", flat=True))
    sees_team, sees_foreign, manages_team, manages_own = JOB_TABLE[persona]
    assert ("train-b" in visible, "train-c" in visible) == (sees_team, sees_foreign)
    assert can(user, "manage", team_job) is manages_team
    assert (own_job is not None and can(user, "manage", own_job)) is manages_own
    assert can(user, "manage", foreign_job) is (persona == "platform_admin")


def test_a_demoted_owner_still_sees_but_no_longer_manages_their_job(world: PermissionWorld) -> None:
    job = _job(world, "train-b")
    developer = world.user("developer")
    services.change_member_role(
        actor=None, membership=Membership.objects.get(user=developer, workspace=world.own), role="visitor"
    )
    assert can(developer, "view", job)
    assert not can(developer, "manage", job)
    assert denial_reason(developer, "manage", job).startswith("Role 'visitor' in workspace-b may not manage jobs")


def test_listing_jobs_is_one_query_whatever_the_number_of_workspaces(world: PermissionWorld) -> None:
    for index in range(20):
        _job(world, f"train-c-{index}", foreign=True)
    with CaptureQueriesContext(connection) as queries:
        names = list(restrict(Job.objects.all(), world.user("visitor")).values_list("name", flat=True))
    assert (len(queries), names) == (1, [])
