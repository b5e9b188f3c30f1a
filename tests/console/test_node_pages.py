"""The Nodes page and the Quota page's Nodes tab through the Django client: platform admins only
(everyone else gets a 404, GET or POST), the GPU grid naming job, quota and fraction, the actions
through Preview and Confirm, and a constant number of queries whatever the number of nodes."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quotas import services as quota_services
from quotas.models import AuditRecord, Node, NodeExecutor, NodeState, Quota
from scheduling import services as job_services
from scheduling.models import Job
from tests.console.conftest import ROLES, quota_id
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

NODE_ACTIONS = ("cordon", "drain", "uncordon", "edit", "token")


def client_as(users: dict[str, AbstractUser], role: str) -> Client:
    client = Client()
    user = users[role]
    assert isinstance(user, User)  # auth.User is the user model: what force_login is typed for
    client.force_login(user)  # axes' backend refuses Client.login()
    return client


def node_id(name: str) -> int:
    return int(Node.objects.get(name=name).pk)


def node_of(job: str) -> str:
    return str(Job.objects.get(name=job).placements.order_by("id").first().node.name)  # type: ignore[union-attr]


@pytest.mark.parametrize("role", ROLES)
def test_the_nodes_page_is_for_platform_admins_only(pai_world: dict[str, AbstractUser], role: str) -> None:
    client = client_as(pai_world, role)
    answer = client.get("/nodes/")
    if role == "platform-admin":
        assert answer.status_code == 200
        assert b'href="/nodes/"' in answer.content  # in the navigation
    else:
        assert answer.status_code == 404
        assert b'href="/nodes/"' not in client.get("/").content


@pytest.mark.parametrize("role", [role for role in ROLES if role != "platform-admin"])
@pytest.mark.parametrize("action", NODE_ACTIONS)
def test_others_cannot_post_node_actions(pai_world: dict[str, AbstractUser], role: str, action: str) -> None:
    client = client_as(pai_world, role)
    url = f"/nodes/{node_id('gpu-1')}/{action}/"
    assert client.get(url).status_code == 404
    assert client.post(url, {"step": "confirm", "name": "x", "gpus": "1"}).status_code == 404
    assert client.post("/nodes/new/", {"step": "confirm", "name": "x", "gpus": "1"}).status_code == 404
    assert Node.objects.get(name="gpu-1").state == NodeState.READY
    assert not Node.objects.filter(name="x").exists()


def test_anonymous_is_sent_to_sign_in(pai_world: dict[str, AbstractUser]) -> None:
    answer = Client().get("/nodes/")
    assert answer.status_code == 302 and "/login/" in answer["Location"]


def test_the_grid_names_job_quota_and_fraction(pai_world: dict[str, AbstractUser]) -> None:
    workspace = Workspace.objects.get(name="workspace-b")
    team_b = Quota.objects.get(name="Quota1.1")
    for name in ("half-1", "half-2"):
        job_services.submit_job(
            actor=pai_world["developer"], workspace=workspace, quota=team_b, name=name, kind="training", gpus=0.5
        )
    job_services.converge()
    page = client_as(pai_world, "platform-admin").get("/nodes/").content.decode()
    assert page.count('data-testid="node"') == 4
    assert page.count('data-testid="gpu-cell"') == 32
    assert "train-b</a>" in page and '<span class="gpu-quota">Quota1.1</span>' in page
    # The two halves share one device: both named in one cell, each with its fraction.
    assert node_of("half-1") == node_of("half-2")
    assert page.count('<span class="fraction" title="Fraction of this GPU">0.5</span>') == 2
    assert "· 1 used</span>" in page


def test_cordon_previews_then_confirms(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    busy = node_of("train-b")
    url = f"/nodes/{node_id(busy)}/cordon/"
    preview = client.post(url, {"step": "preview"}).content.decode()
    assert "Preview: what would change" in preview and "No job is evicted." in preview
    assert "train-b (Quota1.1)" in preview  # the intro names the jobs that keep running
    assert Node.objects.get(name=busy).state == NodeState.READY
    fingerprint = preview.split('name="previewed" value="')[1].split('"')[0]
    done = client.post(url, {"step": "confirm", "previewed": fingerprint})
    assert done.status_code == 302
    assert Node.objects.get(name=busy).state == NodeState.CORDONED
    assert AuditRecord.objects.get(action="node.cordon").actor == pai_world["platform-admin"]
    assert Job.objects.get(name="train-b").state == "running"


def test_drain_preview_names_the_jobs_it_evicts(pai_world: dict[str, AbstractUser]) -> None:
    busy = node_of("train-b")
    preview = (
        client_as(pai_world, "platform-admin")
        .post(f"/nodes/{node_id(busy)}/drain/", {"step": "preview"})
        .content.decode()
    )
    assert 'data-testid="preview-eviction"' in preview
    assert f"train-b (Quota1.1), by the drain rule: node {busy} is draining" in preview
    assert Node.objects.get(name=busy).state == NodeState.READY


def test_add_and_edit_a_node(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    fields = {"name": "gpu-5", "gpus": "4", "gpu_model": "H100", "cpu": "64", "memory_gib": "512", "labels": "zone=a"}
    fields["executor"] = "simulated"  # the select always sends one
    preview = client.post("/nodes/new/", {**fields, "step": "preview"}).content.decode()
    fingerprint = preview.split('name="previewed" value="')[1].split('"')[0]
    client.post("/nodes/new/", {**fields, "step": "confirm", "previewed": fingerprint})
    node = Node.objects.get(name="gpu-5")
    assert (node.gpus, node.gpu_model, node.labels, node.devices.count()) == (4, "H100", {"zone": "a"}, 4)

    refused = client.post(f"/nodes/{node.pk}/edit/", {**fields, "name": "gpu-1", "step": "preview"}).content.decode()
    assert "A node named &#x27;gpu-1&#x27; already exists" in refused
    bad_labels = client.post(f"/nodes/{node.pk}/edit/", {**fields, "labels": "zone", "step": "preview"})
    assert "Line 1 must read name=value" in bad_labels.content.decode()
    too_many = client.post(f"/nodes/{node.pk}/edit/", {**fields, "gpus": "65", "step": "preview"})
    assert "GPUs must be at most 64" in too_many.content.decode()
    unknown = client.post(f"/nodes/{node.pk}/edit/", {**fields, "executor": "kubelet", "step": "preview"})
    said = unknown.content.decode()
    assert "Runs jobs with must be Simulated or Node agent, not kubelet." in said
    assert "Slurm nodes are not added by hand: they come from the Slurm cluster&#x27;s inventory" in said


def test_edit_node_keeps_the_gpus_a_job_holds(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    quota_services.create_node(actor=None, name="gpu-5", gpus=8)  # room for Quota1's 32, so only the job refuses
    name = node_of("train-b")
    node = Node.objects.get(name=name)
    fields = {"name": name, "gpus": "4", "executor": "simulated", "labels": ""}
    refused = client.post(f"/nodes/{node.pk}/edit/", {**fields, "step": "preview"}).content.decode()
    assert (
        f"{name} cannot go down to 4 GPUs while jobs hold the GPUs it would lose "
        "(GPU 4 by train-b; GPU 5 by train-b; GPU 6 by train-b; GPU 7 by train-b)"
    ) in refused
    assert Node.objects.get(pk=node.pk).gpus == 8


def test_edit_node_hands_a_node_to_its_agent_and_back(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    node = Node.objects.get(name="gpu-4")
    form = client.get(f"/nodes/{node.pk}/edit/").content.decode()
    assert 'value="simulated" selected' in form  # the node's own executor, as Edit node opens
    fields = {"name": node.name, "gpus": str(node.gpus), "executor": "agent", "labels": ""}
    preview = client.post(f"/nodes/{node.pk}/edit/", {**fields, "step": "preview"}).content.decode()
    fingerprint = preview.split('name="previewed" value="')[1].split('"')[0]
    client.post(f"/nodes/{node.pk}/edit/", {**fields, "step": "confirm", "previewed": fingerprint})
    assert Node.objects.get(pk=node.pk).executor == NodeExecutor.AGENT
    record = AuditRecord.objects.filter(action="node.update", object_id=node.pk).latest("pk")
    assert (record.before, record.after) == ({"executor": "simulated"}, {"executor": "agent"})


def test_a_down_node_is_refused_in_words(pai_world: dict[str, AbstractUser]) -> None:
    node = Node.objects.get(name="gpu-4")
    quota_services.set_node_state(actor=None, node=node, state=NodeState.NOT_READY)
    answer = client_as(pai_world, "platform-admin").post(f"/nodes/{node.pk}/drain/", {"step": "preview"})
    assert "gpu-4 is not ready (down)" in answer.content.decode()


def _queries_for(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_the_nodes_page_takes_a_constant_number_of_queries(pai_world: dict[str, AbstractUser]) -> None:
    client = client_as(pai_world, "platform-admin")
    few = _queries_for(client, "/nodes/")
    quota_services.create_nodes(actor=None, nodes=[quota_services.NewNode(name=f"more-{i}", gpus=8) for i in range(40)])
    workspace = Workspace.objects.get(name="workspace-b")
    for index in range(6):
        job_services.submit_job(
            actor=pai_world["developer"],
            workspace=workspace,
            quota=Quota.objects.get(name="Quota1.1"),
            name=f"more-{index}",
            kind="training",
            gpus=0.25,
        )
    job_services.converge()
    assert _queries_for(client, "/nodes/") == few


def test_the_quota_nodes_tab_lists_the_gpus_its_subtree_holds(pai_world: dict[str, AbstractUser]) -> None:
    job_services.submit_job(
        actor=pai_world["developer"],
        workspace=Workspace.objects.get(name="workspace-b"),
        quota=Quota.objects.get(name="Quota1.1"),
        name="half",
        kind="training",
        gpus=0.5,
    )
    job_services.converge()
    admin = client_as(pai_world, "platform-admin")
    tab = admin.get(f"/quotas/{quota_id('Quota1')}/?tab=nodes", headers={"HX-Request": "true"})
    body = tab.content.decode()
    assert tab.status_code == 200 and "<html" not in body  # an htmx partial
    assert body.count('data-testid="quota-node"') == 4  # train-b: 3 replicas × 8 GPUs; half on the fourth
    assert "train-b</a> (Quota1.1): GPUs 0, 1, 2, 3, 4, 5, 6, 7</li>" in body
    assert "half</a> (Quota1.1): GPU 0, 0.5 of it</li>" in body
    assert "24.5 GPUs in all" in body
    full = admin.get(f"/quotas/{quota_id('Quota1')}/?tab=nodes").content.decode()
    assert 'data-tab="nodes" class="active"' in full
    other = admin.get(f"/quotas/{quota_id('Quota1.2')}/?tab=nodes", headers={"HX-Request": "true"})
    assert "No job of Quota1.2" in other.content.decode()
    # A member of the quota's workspace reads the same; an outsider does not see the quota at all.
    member = client_as(pai_world, "developer").get(f"/quotas/{quota_id('Quota1.1')}/?tab=nodes").content.decode()
    assert "train-b</a> (Quota1.1)" in member
    assert client_as(pai_world, "outsider").get(f"/quotas/{quota_id('Quota1.1')}/?tab=nodes").status_code == 404


def test_the_nodes_tab_does_not_name_jobs_the_reader_may_not_see(pai_world: dict[str, AbstractUser]) -> None:
    from workspaces import services as workspace_services

    other = workspace_services.create_workspace(
        actor=None, name="workspace-c", quotas=[Quota.objects.get(name="Quota1.1")]
    )
    workspace_services.add_member(actor=None, workspace=other, user=pai_world["outsider"], role="developer")
    job_services.submit_job(
        actor=pai_world["developer"],
        workspace=Workspace.objects.get(name="workspace-b"),
        quota=Quota.objects.get(name="Quota1.1"),
        name="secret",
        kind="training",
        gpus=1,
    )
    job_services.converge()
    body = client_as(pai_world, "outsider").get(f"/quotas/{quota_id('Quota1.1')}/?tab=nodes").content.decode()
    assert "secret" not in body and "train-b" not in body
    # Whose it is, by workspace beside its quota (issue 28), never by name.
    assert "a job of workspace-b (Quota1.1): GPU " in body
    assert "25 GPUs in all" in body
