"""What the workspace tabs do: Members (add, change role, remove after a preview, custom roles),
Quotas (bind, unbind after a preview), Scheduling Configurations (PAI's Resource Usage table)
and Usage."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta

from django.test import Client

from scheduling.clock import get_clock
from scheduling.models import Job, JobEvent, JobEventKind, JobState
from tests.workspaces.permissions import PermissionWorld
from workspaces import services
from workspaces.models import Membership
from workspaces.permissions import role_capabilities


def _client(world: PermissionWorld, persona: str) -> Client:
    client = Client()
    user = world.user(persona)
    assert user is not None
    client.force_login(user)
    return client


def _running_job(world: PermissionWorld, persona: str, name: str, state: str = JobState.RUNNING) -> Job:
    now = get_clock().now()
    job = Job.objects.create(
        name=name,
        workspace=world.own,
        quota=world.quotas["Quota1.1"],
        owner=world.user(persona),
        kind="training",
        gpus=2,
        priority=3,
        preemptible=True,
        state=state,
        allocated_gpus=2 if state == JobState.RUNNING else 0,
        submitted_at=now - timedelta(hours=2),
    )
    if state == JobState.RUNNING:
        JobEvent.objects.create(job=job, kind=JobEventKind.ADMITTED, at=now - timedelta(hours=2), message="2 GPUs")
    return job


def test_a_workspace_admin_adds_a_member_and_changes_the_role(world: PermissionWorld) -> None:
    admin = _client(world, "workspace_admin")
    answer = admin.post(f"/workspaces/{world.own.pk}/members/add/", {"username": "stranger", "role": "visitor"})
    assert answer.status_code == 302
    membership = Membership.objects.get(workspace=world.own, user__username="stranger")
    assert membership.role == "visitor"
    answer = admin.post(
        f"/workspaces/{world.own.pk}/members/{membership.pk}/role/", {f"member-{membership.pk}-role": "operator"}
    )
    assert answer.status_code == 302
    membership.refresh_from_db()
    assert membership.role == "operator"
    page = admin.get(f"/workspaces/{world.own.pk}/").content.decode()
    assert "stranger is now operator in workspace-b." in page


def test_adding_an_unknown_user_or_a_member_twice_says_so_beside_the_field(world: PermissionWorld) -> None:
    admin = _client(world, "workspace_admin")
    unknown = admin.post(f"/workspaces/{world.own.pk}/members/add/", {"username": "nobody", "role": "developer"})
    assert unknown.status_code == 400
    assert "No user is called &#x27;nobody&#x27;" in unknown.content.decode()
    twice = admin.post(f"/workspaces/{world.own.pk}/members/add/", {"username": "b-developer", "role": "developer"})
    assert twice.status_code == 400
    assert "b-developer is already a member of workspace-b." in twice.content.decode()


def test_removing_a_member_previews_their_jobs_then_confirms(world: PermissionWorld) -> None:
    _running_job(world, "developer", "train-1")
    _running_job(world, "developer", "train-2")
    _running_job(world, "developer", "wait-1", state=JobState.PENDING)
    membership = Membership.objects.get(workspace=world.own, user=world.user("developer"))
    admin = _client(world, "workspace_admin")
    url = f"/workspaces/{world.own.pk}/members/{membership.pk}/remove/"
    preview = admin.get(url).content.decode()
    assert "2 running jobs (train-1, train-2) keep running until they end or are cancelled." in preview
    assert "new submits are refused" in preview
    assert "1 pending job (wait-1) stays in the queue" in preview
    assert Membership.objects.filter(pk=membership.pk).exists()  # the preview changed nothing
    assert admin.post(url).status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert Job.objects.get(name="train-1").state == JobState.RUNNING


def test_a_custom_role_is_built_on_a_basic_role(world: PermissionWorld) -> None:
    admin = _client(world, "workspace_admin")
    answer = admin.post(
        f"/workspaces/{world.own.pk}/roles/new/",
        {"name": "lead", "based_on": "operator", "permissions": ["workspace.manage"]},
    )
    assert answer.status_code == 302
    assert role_capabilities(world.own, "lead") == {"job.submit", "job.manage_all", "workspace.manage"}
    page = admin.get(f"/workspaces/{world.own.pk}/").content.decode()
    assert 'data-role="lead"' in page
    assert '<option value="lead">lead (custom)</option>' in page  # offered in the role selects
    refused = admin.post(f"/workspaces/{world.own.pk}/roles/new/", {"name": "developer"})
    assert refused.status_code == 400
    assert "is a basic role; pick another name" in refused.content.decode()


def test_a_platform_admin_binds_and_unbinds_after_a_preview(world: PermissionWorld) -> None:
    _running_job(world, "developer", "train-1")
    root = _client(world, "platform_admin")
    assert root.post(f"/workspaces/{world.own.pk}/quotas/", {"quota": world.quotas["Quota1"].pk}).status_code == 302
    assert set(world.own.quotas.values_list("name", flat=True)) == {"Quota1", "Quota1.1"}
    url = f"/workspaces/{world.own.pk}/quotas/{world.quotas['Quota1.1'].pk}/unbind/"
    preview = root.get(url).content.decode()
    assert "1 running job (train-1) keeps running until it ends or is cancelled." in preview
    assert "its 1 scheduling rule for Quota1.1 is deleted" in preview
    assert root.post(url).status_code == 302
    assert list(world.own.quotas.values_list("name", flat=True)) == ["Quota1"]
    assert Job.objects.get(name="train-1").state == JobState.RUNNING


def test_the_resource_usage_table_has_a_row_per_bound_quota(world: PermissionWorld) -> None:
    services.bind_quota(actor=None, workspace=world.own, quota=world.quotas["Quota1"])
    page = _client(world, "workspace_admin").get(f"/workspaces/{world.own.pk}/scheduling/").content.decode()
    rows = page.split("<template")[0].count('data-testid="rule-form-row"')  # the +Add template aside
    assert rows == 2  # Quota1.1's rule, and Quota1 without a rule
    assert '<option value="Quota1" selected>Quota1</option>' in page
    visitor = _client(world, "visitor").get(f"/workspaces/{world.own.pk}/scheduling/").content.decode()
    assert visitor.count('data-testid="rule-row"') == 2
    assert "(no rule)" in visitor
    assert "<select" not in visitor  # read only


def _table_post(rows: Sequence[Mapping[str, object]], **extra: str) -> dict[str, object]:
    post: dict[str, object] = {"form-TOTAL_FORMS": str(len(rows)), "form-INITIAL_FORMS": "0", **extra}
    for index, row in enumerate(rows):
        post.update({f"form-{index}-{key}": value for key, value in row.items()})
    return post


def test_saving_the_table_keeps_an_untouched_quota_open_and_says_how_many_rules(world: PermissionWorld) -> None:
    services.bind_quota(actor=None, workspace=world.own, quota=world.quotas["Quota1"])
    admin = _client(world, "workspace_admin")
    untouched = {"quota": "Quota1", "roles": ["admin", "developer", "operator", "labeling_admin", "submitter"]}
    edited = {"quota": "Quota1.1", "roles": ["developer", "__non_members__"], "caps": "1-9 job=16"}
    answer = admin.post(f"/workspaces/{world.own.pk}/scheduling/", _table_post([edited, untouched], save="1"))
    assert answer.status_code == 302
    config = services.scheduling_config(world.own)
    assert [(rule["quota"], rule["roles"], rule["non_members"]) for rule in config] == [
        ("Quota1.1", ["developer"], True)
    ]
    page = admin.get(answer["Location"]).content.decode()
    assert "Saved 1 scheduling rule of workspace-b." in page
    assert "1-9 job=16" in page and "16.0" not in page


def test_add_without_javascript_returns_the_table_with_one_more_row(world: PermissionWorld) -> None:
    admin = _client(world, "workspace_admin")
    rows = [{"quota": "Quota1.1", "roles": ["developer"]}]
    answer = admin.post(f"/workspaces/{world.own.pk}/scheduling/", _table_post(rows, add_row="1"))
    assert answer.status_code == 200
    assert answer.content.decode().split("<template")[0].count('data-testid="rule-form-row"') == 2
    assert len(services.scheduling_config(world.own)) == 1  # +Add saves nothing


def test_caps_read_as_whole_numbers(world: PermissionWorld) -> None:
    services.set_scheduling_config(
        actor=None,
        workspace=world.own,
        rules=[
            {
                "quota": "Quota1.1",
                "roles": ["developer"],
                "caps": [{"priority_min": 1, "priority_max": 9, "max_gpus_per_job": 16.0, "max_gpus_per_user": 0.5}],
            }
        ],
    )
    page = _client(world, "developer").get(f"/workspaces/{world.own.pk}/scheduling/").content.decode()
    assert "1–9: 16 GPUs per job, 0.5 per user" in page


def test_the_usage_tab_shows_gpu_hours(world: PermissionWorld) -> None:
    _running_job(world, "developer", "train-1")
    page = _client(world, "visitor").get(f"/workspaces/{world.own.pk}/usage/").content.decode()
    assert page.count('data-testid="usage-window"') == 3
    assert '<tr data-name="b-developer"><th scope="row">b-developer</th><td class="num">4</td>' in page


def test_resource_quotas_tells_a_member_which_counts_are_hers(world: PermissionWorld) -> None:
    world.foreign.quotas.add(world.quotas["Quota1.1"])
    _running_job(world, "developer", "mine")
    theirs = _running_job(world, "developer", "theirs")
    Job.objects.filter(pk=theirs.pk).update(workspace=world.foreign, owner=world.foreign_users["developer"])
    page = _client(world, "workspace_admin").get("/quotas/").content.decode()
    row = page[page.index('data-quota="Quota1.1"') :]
    row = row[: row.index("</tr>")]
    # The running count is a live cell (quota:<id>:running); the member's own count follows it.
    assert re.search(r'<td class="num"><span data-testid="running"[^>]*>2</span><br><a class="yours"', row)
    assert ">1 yours to see</a>" in row
    assert f'href="/quotas/{world.quotas["Quota1.1"].pk}/?tab=jobs"' in row
    assert "yours to see" not in _client(world, "platform_admin").get("/quotas/").content.decode()
