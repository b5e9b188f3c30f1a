"""Node tokens from the Nodes page (issue 13): Create or Rotate token through Preview and Confirm,
the token shown once (never on a reload), audited as the API does, and the old token refused by
the agent endpoints at once; the page shows each node's executor, last heartbeat and token."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth.models import AbstractUser, User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from quotas import services as quota_services
from quotas.models import AuditRecord, Node, NodeAgent
from quotas.node_agents import agent_for_token, issue_node_token
from scheduling.node_views import seconds_ago
from workspaces import services as workspace_services
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

REGISTER = "/api/v1/agent/register/"


def _admin(users: dict[str, AbstractUser]) -> Client:
    client = Client()
    admin = users["platform-admin"]
    assert isinstance(admin, User)  # auth.User is the user model: what force_login is typed for
    client.force_login(admin)
    return client


def _node(name: str = "gpu-1") -> Node:
    return Node.objects.get(name=name)


def _issued(client: Client, node: Node) -> tuple[str, dict[str, str]]:
    """Open the token action, Preview, Confirm: the page answered and the Confirm that was sent."""
    url = f"/nodes/{node.pk}/token/"
    opened = client.get(url)
    assert opened.status_code == 200
    issued = opened.context["form"]["issued"].value()
    preview = client.post(url, {"step": "preview", "issued": issued})
    assert preview.status_code == 200
    confirm = {"step": "confirm", "issued": issued, "previewed": preview.context["previewed"]}
    answer = client.post(url, confirm)
    assert answer.status_code == 200
    return answer.content.decode(), confirm


def _register(token: str, node: str = "gpu-1") -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    gpus = [{"index": index, "uuid": f"GPU-{index}", "model": "", "memory_mib": 81920} for index in range(8)]
    return int(client.post(REGISTER, {"node": node, "gpus": gpus}, format="json").status_code)


def test_create_previews_then_shows_the_token_once(pai_world: dict[str, AbstractUser]) -> None:
    client = _admin(pai_world)
    node = _node()
    page = client.get("/nodes/").content.decode()
    assert 'Create token<span class="visually-hidden"> of gpu-1</span>' in page
    preview = client.post(f"/nodes/{node.pk}/token/", {"step": "preview", "issued": "none"}).content.decode()
    assert "Confirm: create token" in preview
    assert "The token is shown once, after Confirm" in preview
    assert "runs on the simulated executor" in preview
    assert not NodeAgent.objects.filter(node=node).exists()  # the preview changed nothing

    shown, confirm = _issued(client, node)
    agent = NodeAgent.objects.get(node=node)
    token = shown.split('data-testid="node-token" ', 1)[0].rsplit('value="', 1)[1].split('"', 1)[0]
    assert token.startswith("gqn_") and agent_for_token(token) == agent
    assert "it is shown this once" in shown
    assert "python manage.py agent --server http://testserver --node gpu-1 --token-file /etc/gqc/node.token" in shown
    record = AuditRecord.objects.filter(action="node.token", object_id=node.pk).get()
    assert record.actor_id == pai_world["platform-admin"].pk
    assert record.after is not None
    assert token not in str(record.after) and str(record.after["token"]).startswith(token[:12])

    # A reload re-sends the Confirm: refused in words, no token shown, the issued one still works.
    again = client.post(f"/nodes/{node.pk}/token/", confirm)
    assert again.status_code == 200
    body = again.content.decode()
    assert "changed since this form was opened" in body and "gqn_" not in body.replace(agent.token_prefix, "")
    assert agent_for_token(token) is not None
    assert AuditRecord.objects.filter(action="node.token").count() == 1
    nodes = client.get("/nodes/").content.decode()
    assert token not in nodes
    assert f"<code>{agent.token_prefix}…</code>" in nodes
    assert 'Rotate token<span class="visually-hidden"> of gpu-1</span>' in nodes


def test_the_token_answer_is_never_cached(pai_world: dict[str, AbstractUser]) -> None:
    client = _admin(pai_world)
    node = _node()
    issued = "none"
    preview = client.post(f"/nodes/{node.pk}/token/", {"step": "preview", "issued": issued})
    answer = client.post(
        f"/nodes/{node.pk}/token/",
        {"step": "confirm", "issued": issued, "previewed": preview.context["previewed"]},
        HTTP_HX_REQUEST="true",
    )
    assert "no-store" in answer["Cache-Control"]
    assert 'data-testid="node-token"' in answer.content.decode()
    assert "<html" not in answer.content.decode()  # the dialog's partial


def test_rotating_refuses_the_old_token_at_once(pai_world: dict[str, AbstractUser]) -> None:
    node = _node()
    quota_services.update_node(actor=None, node=node, executor="agent")
    old = issue_node_token(actor=None, node=node)
    assert _register(old) == 200
    client = _admin(pai_world)
    opened = client.get(f"/nodes/{node.pk}/token/").content.decode()
    assert "Rotate token of gpu-1" in opened
    assert "stops working at once" in opened and "restarted with the new token" in opened
    shown, _confirm = _issued(client, node)
    new = shown.split('data-testid="node-token" ', 1)[0].rsplit('value="', 1)[1].split('"', 1)[0]
    assert _register(old) == 401
    assert _register(new) == 200


def test_the_page_shows_executor_heartbeat_and_token(pai_world: dict[str, AbstractUser]) -> None:
    node = _node("gpu-2")
    quota_services.update_node(actor=None, node=node, executor="agent")
    Node.objects.filter(pk=node.pk).update(last_heartbeat=timezone.now() - timedelta(seconds=12))
    page = _admin(pai_world).get("/nodes/").content.decode()
    card = page.split('data-node="gpu-2"', 1)[1].split("</section>", 1)[0]
    assert "Executor: Node agent" in card
    assert "Last heartbeat: <time" in card and ("12 s ago" in card or "13 s ago" in card)
    assert "Token: none yet" in card
    simulated = page.split('data-node="gpu-3"', 1)[1].split("</section>", 1)[0]
    assert "Executor: Simulated" in simulated and "Last heartbeat" not in simulated


def test_seconds_ago_reads_as_a_person_would() -> None:
    now = timezone.now()
    assert seconds_ago(now - timedelta(seconds=12), now) == "12 s ago"
    assert seconds_ago(now - timedelta(minutes=5), now) == "5 min ago"
    assert seconds_ago(now - timedelta(hours=3), now) == "3 h ago"
    assert seconds_ago(now - timedelta(days=4), now) == "4 days ago"
    assert seconds_ago(now + timedelta(seconds=3), now) == "0 s ago"  # a host clock slightly ahead


@pytest.mark.parametrize("persona", ["workspace-admin", "developer", "outsider", "visitor", "anonymous"])
def test_only_platform_admins_reach_the_token_action(
    pai_world: dict[str, User], make_user: Callable[..., User], persona: str
) -> None:
    client = Client()
    if persona == "visitor":
        visitor = make_user("vera")
        workspace_services.add_member(
            actor=None, workspace=Workspace.objects.get(name="workspace-b"), user=visitor, role="visitor"
        )
        client.force_login(visitor)
    elif persona != "anonymous":
        client.force_login(pai_world[persona])
    url = f"/nodes/{_node().pk}/token/"
    for answer in (client.get(url), client.post(url, {"step": "confirm", "issued": "none", "previewed": "x"})):
        if persona == "anonymous":
            assert answer.status_code == 302 and "/login/" in answer["Location"]
        else:
            assert answer.status_code == 404
    assert not NodeAgent.objects.exists()
