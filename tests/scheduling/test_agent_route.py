"""The heartbeat's own ASGI route (console.agent_route): it answers a well-formed beat exactly as
AgentHeartbeatView does through Django, and leaves every other request to Django untouched.

Each case is sent twice, first through the route and then through Django's ASGI application
alone; a beat is idempotent, so both must answer the same status and body. The route's counters
say which of the two answered the first."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AbstractUser
from django.core.asgi import get_asgi_application
from django.utils import timezone

from console.agent_route import BEAT_PATH, AgentBeatRoute
from console.asgi import application, django_asgi_app
from console.services import issue_token
from quotas.models import Node, NodeExecutor
from quotas.node_agents import issue_node_token
from scheduling import services
from scheduling.models import AgentProcess, Job, JobState
from tests.scheduling.conftest import Cluster, build_cluster

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[bytes, bytes] = field(default_factory=dict)


async def _ask(
    app: Any, *, method: str, path: str, body: bytes, headers: list[tuple[bytes, bytes]], query: bytes
) -> Answer:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }
    # The body arrives in two pieces, as a client's may.
    pieces = [body[: len(body) // 2], body[len(body) // 2 :]]

    async def receive() -> dict[str, Any]:
        if pieces:
            piece = pieces.pop(0)
            return {"type": "http.request", "body": piece, "more_body": bool(pieces)}
        await asyncio.Event().wait()  # the client stays until answered (Django listens for it leaving)
        raise AssertionError("unreachable")

    answer = Answer(status=0, body=b"")
    content: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer.status = message["status"]
            answer.headers = dict(message["headers"])
        elif message["type"] == "http.response.body":
            content.append(message.get("body", b""))

    await app(scope, receive, send)
    raw = b"".join(content)
    try:
        answer.body = json.loads(raw)
    except ValueError:
        answer.body = raw
    return answer


def ask(app: Any, *, token: str | None, body: Any, method: str = "POST", query: bytes = b"", **header: str) -> Answer:
    encoded = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"host": "127.0.0.1:8000", "content-type": "application/json"}
    headers.update({name.replace("_", "-"): value for name, value in header.items()})
    if token is not None:
        headers["authorization"] = token
    listed = [(name.encode(), value.encode()) for name, value in headers.items() if value]
    listed.append((b"content-length", str(len(encoded)).encode()))
    return async_to_sync(_ask)(app, method=method, path=BEAT_PATH, body=encoded, headers=listed, query=query)


@pytest.fixture
def agents() -> Cluster:
    cluster = build_cluster()
    Node.objects.update(executor=NodeExecutor.AGENT, last_heartbeat=timezone.now())
    return cluster


def _samples(busy: bool) -> list[dict[str, Any]]:
    return [{"index": i, "utilization": 90.0 if busy else 0.0, "memory_used_mib": 100} for i in range(8)]


def test_the_asgi_application_sends_http_through_the_route() -> None:
    assert isinstance(application.application_mapping["http"], AgentBeatRoute)


def test_a_job_starts_runs_and_succeeds_through_the_route_alone(agents: Cluster) -> None:
    route = AgentBeatRoute(django_asgi_app)
    job = agents.submit("quick", gpus=2, replicas=2, command="true")
    services.converge()
    node = Job.objects.get(pk=job.pk).placements.first().node.name  # type: ignore[union-attr]
    token = f"Node {issue_node_token(actor=None, node=Node.objects.get(name=node))}"

    first = ask(route, token=token, body={"node": node, "processes": [], "samples": _samples(False)})
    starts = first.body["starts"]
    assert first.status == 200 and len(starts) == 2
    assert first.headers[b"content-type"] == b"application/json"
    running = [{"replica": s["replica"], "state": "running", "pid": 100 + s["rank"]} for s in starts]
    assert ask(route, token=token, body={"node": node, "processes": running}).status == 200
    assert AgentProcess.objects.filter(job_id=job.pk, state="running").count() == 2
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING

    exited = [{"replica": s["replica"], "state": "exited", "exit_code": 0, "log": [f"r{s['rank']}"]} for s in starts]
    done = ask(route, token=token, body={"node": node, "processes": exited, "samples": _samples(True)})
    assert done.status == 200 and done.body["starts"] == [] and done.body["stops"] == []
    assert Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED
    assert (route.answered, route.passed_on) == (3, 0)


@pytest.mark.parametrize(
    ("case", "answered_here"),
    [
        ("a steady beat", True),
        ("a beat whose process started", True),
        ("charset utf-8 named", True),
        ("Accept: */*", True),
        ("Accept with an indent", False),
        ("form-encoded body", False),
        ("no Authorization", False),
        ("a user's token", False),
        ("an unknown node token", False),
        ("another node's token", False),
        ("a body that is not JSON", False),
        ("NaN in a sample", False),
        ("processes not a list", False),
        ("a replica twice", False),
        ("a query string", False),
        ("GET", False),
        ("a Host not allowed", False),
        ("two Authorization headers", False),
    ],
)
def test_the_route_and_django_answer_every_request_alike(
    case: str, answered_here: bool, agents: Cluster, platform_admin: AbstractUser
) -> None:
    job = agents.submit("alike", gpus=1, command="sleep 60")
    services.converge()
    node = Job.objects.get(pk=job.pk).placements.first().node.name  # type: ignore[union-attr]
    other = "gpu-2" if node == "gpu-1" else "gpu-1"
    token = f"Node {issue_node_token(actor=None, node=Node.objects.get(name=node))}"
    other_token = f"Node {issue_node_token(actor=None, node=Node.objects.get(name=other))}"
    replica = Job.objects.get(pk=job.pk).placements.get().pk
    steady = {"node": node, "processes": [], "samples": _samples(False)}
    started = {"node": node, "processes": [{"replica": replica, "state": "running", "pid": 7}]}
    requests: dict[str, dict[str, Any]] = {
        "a steady beat": {"token": token, "body": steady},
        "a beat whose process started": {"token": token, "body": started},
        "charset utf-8 named": {"token": token, "body": steady, "content_type": "application/json; charset=utf-8"},
        "Accept: */*": {"token": token, "body": steady, "accept": "*/*"},
        "Accept with an indent": {"token": token, "body": steady, "accept": "application/json; indent=4"},
        "form-encoded body": {"token": token, "body": b"node=x", "content_type": "application/x-www-form-urlencoded"},
        "no Authorization": {"token": None, "body": steady},
        "a user's token": {"token": f"Token {issue_token(user=platform_admin).key}", "body": steady},
        "an unknown node token": {"token": "Node gqn_not-a-token", "body": steady},
        "another node's token": {"token": other_token, "body": steady},
        "a body that is not JSON": {"token": token, "body": b"{not json"},
        "NaN in a sample": {"token": token, "body": json.dumps(steady).replace("0.0", "NaN", 1).encode()},
        "processes not a list": {"token": token, "body": {**steady, "processes": {"replica": 1}}},
        "a replica twice": {"token": token, "body": {**started, "processes": started["processes"] * 2}},
        "a query string": {"token": token, "body": steady, "query": b"format=json"},
        "GET": {"token": token, "body": b"", "method": "GET"},
        "a Host not allowed": {"token": token, "body": steady, "host": "evil.example"},
    }
    request = requests.get(case, {"token": token, "body": steady})
    route = AgentBeatRoute(django_asgi_app)
    if case == "two Authorization headers":
        first = _twice_authorized(route, token, steady)
        again = _twice_authorized(django_asgi_app, token, steady)
    else:
        first = ask(route, **request)
        again = ask(django_asgi_app, **request)
    assert (first.status, first.body) == (again.status, again.body), case
    assert route.answered == int(answered_here), case
    assert route.passed_on == int(not answered_here), case


def _twice_authorized(app: Any, token: str, body: dict[str, Any]) -> Answer:
    encoded = json.dumps(body).encode()
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"authorization", token.encode()),
        (b"authorization", token.encode()),
        (b"content-length", str(len(encoded)).encode()),
    ]
    return async_to_sync(_ask)(app, method="POST", path=BEAT_PATH, body=encoded, headers=headers, query=b"")


def test_a_body_over_djangos_limit_goes_to_django_whole(agents: Cluster, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64
    token = f"Node {issue_node_token(actor=None, node=Node.objects.get(name='gpu-1'))}"
    body = {"node": "gpu-1", "processes": [], "samples": _samples(False)}
    route = AgentBeatRoute(django_asgi_app)
    first, again = ask(route, token=token, body=body), ask(django_asgi_app, token=token, body=body)
    assert (first.status, first.body) == (again.status, again.body)
    assert first.status == 400
    assert (route.answered, route.passed_on) == (0, 1)


def test_plain_http_is_sent_to_https_where_django_would(agents: Cluster, settings: Any) -> None:
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    token = f"Node {issue_node_token(actor=None, node=Node.objects.get(name='gpu-1'))}"
    body = {"node": "gpu-1", "processes": []}
    # Django's middleware reads the setting when it is built: build it again.
    route = AgentBeatRoute(get_asgi_application())
    assert ask(route, token=token, body=body).status == 301
    assert ask(route, token=token, body=body, x_forwarded_proto="https").status == 200
    assert (route.answered, route.passed_on) == (1, 1)
