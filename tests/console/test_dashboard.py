"""The dashboard's numbers per role, each page a constant number of queries."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quotas import services as quota_services
from quotas.models import Node, Quota
from scheduling import services as job_services
from workspaces import services as workspace_services
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db


def page_of(user: AbstractUser) -> tuple[str, int]:
    client = Client()
    assert isinstance(user, User)  # auth.User is the user model: what force_login is typed for
    client.force_login(user)  # axes' backend refuses Client.login()
    with CaptureQueriesContext(connection) as queries:
        answer = client.get("/")
    assert answer.status_code == 200
    return answer.content.decode(), len(queries)


def figure(body: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}">(.*?)</dd>', body, re.S)
    assert match is not None, testid
    return " ".join(re.sub(r"<[^>]+>", " ", match[1]).split())


def test_platform_admin_sees_gpus_in_use_guaranteed_idle_and_nodes_down(
    pai_world: dict[str, AbstractUser],
) -> None:
    body, _ = page_of(pai_world["platform-admin"])
    # 4 nodes × 8 GPUs; Quota1 guarantees 32; train-b holds 3 × 8.
    assert figure(body, "gpus-in-use") == "24 of 32"
    assert figure(body, "gpus-guaranteed") == "32"
    assert figure(body, "gpus-idle") == "8"
    assert figure(body, "nodes-down") == "0 of 4"
    assert 'data-testid="my-quotas"' not in body

    idle_node = next(node for node in Node.objects.all() if not node.placements.exists())
    quota_services.set_node_state(actor=None, node=idle_node, state="not_ready")
    body, _ = page_of(pai_world["platform-admin"])
    assert figure(body, "nodes-down") == "1 of 4"
    assert figure(body, "gpus-idle") == "0"  # a down node's GPUs are not idle


def test_a_member_sees_their_jobs_by_state_and_their_quotas_usage(pai_world: dict[str, AbstractUser]) -> None:
    body, _ = page_of(pai_world["developer"])
    assert 'data-testid="cluster-figures"' not in body
    jobs = re.search(r'data-testid="my-jobs">(.*?)</dl>', body, re.S)
    assert jobs is not None and re.sub(r"<[^>]+>|\s+", " ", jobs[1]).split() == ["Running", "1"]
    row = re.search(r'<tr data-quota="Quota1.1">(.*?)</tr>', body, re.S)
    assert row is not None
    cells = re.findall(r'<td class="num"[^>]*>([^<]*)</td>', row[1])
    assert cells[0] == "12" and cells[2] == "24" and cells[3] == "1"  # guaranteed, allocated, running
    assert 'data-quota="Quota1.2"' not in body  # not bound to any workspace of dave's

    outsider, _ = page_of(pai_world["outsider"])
    assert "You have no jobs yet." in outsider
    assert "No quota is open to you yet" in outsider


@pytest.mark.parametrize("role", ["platform-admin", "developer"])
def test_the_query_count_does_not_grow_with_the_cluster(pai_world: dict[str, AbstractUser], role: str) -> None:
    _, before = page_of(pai_world[role])
    root = Quota.objects.get(name="Quota1")
    workspace = Workspace.objects.get(name="workspace-b")
    for index in range(5, 13):
        quota_services.create_node(actor=None, name=f"gpu-{index}", gpus=8)
    for index in range(3):
        quota = quota_services.create_quota(actor=None, name=f"Extra{index}", parent=root, gpus=0)
        workspace_services.update_workspace(actor=None, workspace=workspace, quotas=[*workspace.quotas.all(), quota])
    team_b = Quota.objects.get(name="Quota1.1")
    for index in range(6):
        job_services.submit_job(
            actor=pai_world["developer"], workspace=workspace, quota=team_b, name=f"more-{index}",
            kind="inference", gpus=4, replicas=1,
        )  # fmt: skip
    job_services.converge()
    body, after = page_of(pai_world[role])
    assert after == before
    if role == "developer":
        assert 'data-quota="Extra2"' in body


@pytest.mark.parametrize(
    ("role", "offered"),
    [("platform-admin", True), ("workspace-admin", True), ("developer", True), ("visitor", False), ("outsider", False)],
)
def test_submit_job_is_on_the_dashboard_for_whoever_may_submit_somewhere(
    pai_world: dict[str, AbstractUser], make_user: Any, role: str, offered: bool
) -> None:
    if role == "visitor":
        pai_world["visitor"] = make_user("victor")
        workspace = Workspace.objects.get(name="workspace-b")
        workspace_services.add_member(actor=None, workspace=workspace, user=pai_world["visitor"], role="visitor")
    body, _ = page_of(pai_world[role])
    button = '<a class="button" href="/jobs/new/">Submit job</a>'
    assert (button in body) is offered
    user = pai_world[role]
    assert isinstance(user, User)
    jobs_page = Client()
    jobs_page.force_login(user)
    assert (button in jobs_page.get("/jobs/").content.decode()) is offered  # the Jobs page asks the same
