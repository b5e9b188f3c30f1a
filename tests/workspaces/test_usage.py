"""The Usage tab's selector on a small scenario whose GPU-hours are worked out by hand.

Quota1.1 guarantees 4 GPUs (the test sets it). Times are hours before `now`:

- a (alice, workspace-b, 4 GPUs): admitted at -10, still running;
- b (bob, workspace-b, 2 GPUs): admitted at -5, finished at -3;
- d (workspace-c's job on the same quota, 2 GPUs): admitted at -5, finished at -3;
- c (carol, workspace-b, 2 GPUs): admitted at -30, started at -29, evicted at -26 and requeued.

From -5 to -3 the quota holds 8 GPUs against 4: half of every job's GPUs are borrowed then.
alice: 4×5 + 4×2×½ + 4×3 = 36 within, 4×2×½ = 4 borrowed; bob: 2 within, 2 borrowed;
carol (7 days only): 2×4 = 8 within, and 2 GPUs × 3 h since her run started = 6 lost to eviction.
d is workspace-c's: it weighs on the split but is not listed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.models import Job, JobEvent, JobEventKind, JobState
from scheduling.usage import workspace_usage
from tests.workspaces.permissions import PermissionWorld, make_account
from workspaces.models import Workspace

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=datetime.now().astimezone().tzinfo).astimezone()


def _job(world: PermissionWorld, workspace: Workspace, owner: User, name: str, gpus: float, state: str) -> Job:
    return Job.objects.create(
        name=name,
        workspace=workspace,
        quota=world.quotas["Quota1.1"],
        owner=owner,
        kind="training",
        gpus=gpus,
        priority=3,
        preemptible=True,
        state=state,
        submitted_at=NOW - timedelta(hours=40),
        finished_at=NOW - timedelta(hours=3) if state == JobState.SUCCEEDED else None,
    )


def _event(job: Job, kind: str, hours_ago: float, message: str = "") -> None:
    JobEvent.objects.create(job=job, kind=kind, at=NOW - timedelta(hours=hours_ago), message=message)


@pytest.fixture
def scenario(world: PermissionWorld) -> PermissionWorld:
    quota = world.quotas["Quota1.1"]
    quota.gpus = 4
    quota.save(update_fields=["gpus"])
    world.foreign.quotas.add(quota)
    alice, bob, carol = (make_account(name) for name in ("alice", "bob", "carol"))
    a = _job(world, world.own, alice, "a", 4, JobState.RUNNING)
    _event(a, JobEventKind.SUBMITTED, 10)
    _event(a, JobEventKind.ADMITTED, 10, "1 replica(s), 4 GPUs on dgx-1")
    _event(a, JobEventKind.STARTED, 10)
    b = _job(world, world.own, bob, "b", 2, JobState.SUCCEEDED)
    _event(b, JobEventKind.ADMITTED, 5, "1 replica(s), 2 GPUs on dgx-2")
    _event(b, JobEventKind.FINISHED, 3)
    d = _job(world, world.foreign, world.foreign_users["developer"], "d", 2, JobState.SUCCEEDED)
    _event(d, JobEventKind.ADMITTED, 5, "1 replica(s), 2 GPUs on dgx-2")
    _event(d, JobEventKind.FINISHED, 3)
    c = _job(world, world.own, carol, "c", 2, JobState.PENDING)
    _event(c, JobEventKind.ADMITTED, 30, "1 replica(s), 2 GPUs on dgx-3")
    _event(c, JobEventKind.STARTED, 29)
    _event(c, JobEventKind.EVICTED, 26)
    _event(c, JobEventKind.REQUEUED, 26)
    return world


def _figures(rows: list, name: str) -> tuple[float, float, float]:  # type: ignore[type-arg]
    row = next(row for row in rows if row.name == name)
    return (round(row.within, 6), round(row.borrowed, 6), round(row.lost, 6))


def test_the_sums_of_a_known_scenario(scenario: PermissionWorld) -> None:
    day, week, month = workspace_usage(workspace=scenario.own, now=NOW)
    assert [window.label for window in (day, week, month)] == ["Last 24 hours", "Last 7 days", "Last 30 days"]
    assert _figures(day.users, "alice") == (36, 4, 0)
    assert _figures(day.users, "bob") == (2, 2, 0)
    assert [row.name for row in day.users] == ["alice", "bob"]  # carol held nothing in the last day
    assert _figures(day.quotas, "Quota1.1") == (38, 6, 0)
    assert _figures(week.users, "carol") == (8, 0, 6)
    assert _figures(week.quotas, "Quota1.1") == (46, 6, 6)
    assert (round(month.total.within, 6), round(month.total.borrowed, 6), round(month.total.lost, 6)) == (46, 6, 6)
    assert round(month.total.total, 6) == 52


def test_the_other_workspace_sees_its_own_jobs_only(scenario: PermissionWorld) -> None:
    day = workspace_usage(workspace=scenario.foreign, now=NOW)[0]
    assert [row.name for row in day.users] == ["c-developer"]
    assert _figures(day.users, "c-developer") == (2, 2, 0)  # 2 GPUs × 2 h, half borrowed


def test_a_window_cuts_a_run_that_began_before_it(scenario: PermissionWorld) -> None:
    (last_hours,) = workspace_usage(workspace=scenario.own, now=NOW, windows=[("Last 4 hours", timedelta(hours=4))])
    # alice: 1 h of the overload (2 of 4 GPUs borrowed), then 3 h alone; bob: 1 h, half borrowed.
    assert _figures(last_hours.users, "alice") == (2 + 12, 2, 0)
    assert _figures(last_hours.users, "bob") == (1, 1, 0)


def test_the_queries_do_not_grow_with_the_jobs(scenario: PermissionWorld) -> None:
    with CaptureQueriesContext(connection) as few:
        workspace_usage(workspace=scenario.own, now=NOW)
    owner = make_account("many")
    for index in range(30):
        job = _job(scenario, scenario.own, owner, f"extra-{index}", 1, JobState.RUNNING)
        _event(job, JobEventKind.ADMITTED, 2, "1 replica(s), 1 GPUs on dgx-4")
    with CaptureQueriesContext(connection) as many:
        workspace_usage(workspace=scenario.own, now=NOW)
    assert len(many) == len(few) <= 5
