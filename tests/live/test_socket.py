"""`/ws/live/` over the real ASGI application and the real Redis channel layer (the launcher's
embedded Redis): subscribe allowed and refused, unauthenticated and unknown paths closed
without a traceback, a flood bounded, revocation within 5 s, coalescing, changes after commit."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AbstractUser, User
from django.test import Client

from console.asgi import application
from quotas import services as quota_services
from scheduling import services as job_services
from scheduling.models import Job
from workspaces import services as workspace_services
from workspaces.models import Membership

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(30)]

ORIGIN = (b"origin", b"http://testserver")


@pytest.fixture
def world(make_user: Callable[..., AbstractUser], settings: Any) -> dict[str, Any]:
    """dave is a developer of lab-a with a pending job; lab-b (not his) has one too."""
    settings.SCHEDULER_TRIGGER = "none"  # the tests decide when jobs change
    settings.SCHEDULER_PUBLISH_EVENTS = True
    settings.LIVE_RECHECK_SECONDS = 30.0  # revocation must come from the services' notification
    dave, wanda = make_user("dave"), make_user("wanda")
    quota_services.create_node(actor=None, name="gpu-1", gpus=8)
    root = quota_services.create_quota(actor=None, name="Quota1", gpus=8)
    team_a = quota_services.create_quota(actor=None, name="team-a", parent=root, gpus=4)
    team_b = quota_services.create_quota(actor=None, name="team-b", parent=root, gpus=4)
    lab_a = workspace_services.create_workspace(actor=None, name="lab-a", quotas=[team_a])
    lab_b = workspace_services.create_workspace(actor=None, name="lab-b", quotas=[team_b])
    workspace_services.add_member(actor=None, workspace=lab_a, user=dave, role="developer")
    workspace_services.add_member(actor=None, workspace=lab_b, user=wanda, role="developer")
    mine = job_services.submit_job(actor=dave, workspace=lab_a, quota=team_a, name="mine", kind="training", gpus=2)
    theirs = job_services.submit_job(actor=wanda, workspace=lab_b, quota=team_b, name="theirs", kind="training", gpus=2)
    # A job of lab-a that dave sees as a member, not as its owner (an owner keeps seeing their job).
    teams = job_services.submit_job(actor=None, workspace=lab_a, quota=team_a, name="teams", kind="training", gpus=1)
    return {
        "dave": dave,
        "wanda": wanda,
        "lab_a": lab_a,
        "mine": mine,
        "theirs": theirs,
        "teams": teams,
        "team_b": team_b,
    }


def session_cookie(user: AbstractUser) -> tuple[bytes, bytes]:
    client = Client()
    assert isinstance(user, User)  # auth.User is the user model: what force_login is typed for
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async_to_sync(scenario)()


async def connect(user: AbstractUser | None, path: str = "/ws/live/") -> WebsocketCommunicator:
    headers = [ORIGIN]
    if user is not None:
        headers.append(await sync_to_async(session_cookie)(user))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


async def next_of(communicator: WebsocketCommunicator, kind: str, timeout: float = 5) -> dict[str, Any]:
    """The next message of this type (changes of other topics may come first)."""
    deadline = time.monotonic() + timeout
    while True:
        message: dict[str, Any] = await communicator.receive_json_from(timeout=max(deadline - time.monotonic(), 0.01))
        if message["type"] == kind:
            return message


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    assert not [record for record in caplog.records if record.exc_info], "a traceback was logged"


def test_subscribe_allowed_and_refused_alike_for_foreign_and_missing(world: dict[str, Any]) -> None:
    mine, theirs = world["mine"], world["theirs"]

    async def scenario() -> None:
        socket = await connect(world["dave"])
        await socket.send_json_to(
            {
                "subscribe": [
                    f"job:{mine.pk}",
                    f"job:{theirs.pk}",
                    "job:999999",
                    "cluster",
                    f"workspace:{world['lab_a'].pk}",
                    f"quota:{world['team_b'].pk}",
                    "jobs:1",
                    "job:abc",
                ]
            }
        )
        reply = await next_of(socket, "subscription")
        assert sorted(reply["subscribed"]) == sorted([f"job:{mine.pk}", "cluster", f"workspace:{world['lab_a'].pk}"])
        refused = {entry["topic"]: entry["reason"] for entry in reply["refused"]}
        # A foreign job and a missing one get the very same answer.
        assert refused[f"job:{theirs.pk}"] == refused["job:999999"] == refused[f"quota:{world['team_b'].pk}"]
        assert set(refused) == {f"job:{theirs.pk}", "job:999999", f"quota:{world['team_b'].pk}", "jobs:1", "job:abc"}
        await socket.disconnect()

    run(scenario)


def test_unauthenticated_socket_is_closed_with_4401_and_no_traceback(
    world: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        socket = await connect(None)
        closed = await socket.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": 4401}

    run(scenario)
    assert any("not signed in" in record.getMessage() for record in caplog.records)
    no_tracebacks(caplog)


def test_unknown_path_is_closed_with_4404_and_one_line(world: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)

    async def scenario() -> None:
        for path in ("/ws/nope/", "/", "/api/v1/jobs/"):
            socket = await connect(world["dave"], path)
            assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}

    run(scenario)
    lines = [record.getMessage() for record in caplog.records if "unknown path" in record.getMessage()]
    assert len(lines) == 3 and "/ws/nope/" in lines[0]
    no_tracebacks(caplog)


def test_flood_of_subscribes_is_cut_short(
    world: dict[str, Any], caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    settings.LIVE_MAX_SUBSCRIPTIONS = 5

    async def scenario() -> None:
        socket = await connect(world["dave"])
        # More topics than a socket may hold: the extra ones are refused, naming the bound.
        await socket.send_json_to({"subscribe": ["cluster", *[f"job:{n}" for n in range(1, 40)]]})
        reply = await next_of(socket, "subscription")
        assert len(reply["subscribed"]) + len(reply["refused"]) == 40
        assert sum("at most 5 topics" in entry["reason"] for entry in reply["refused"]) == 35
        # A message too big closes the socket with 1009.
        big = await connect(world["dave"])
        await big.send_to(text_data='{"subscribe": ["' + "x" * 20000 + '"]}')
        assert (await big.receive_output(timeout=5))["code"] == 1009
        # A flood of subscribe messages: after the burst, the socket is closed with 4429.
        started = time.monotonic()
        for _ in range(200):
            await socket.send_json_to({"subscribe": ["cluster"]})
        outputs = []
        while True:
            output = await socket.receive_output(timeout=5)
            outputs.append(output)
            if output["type"] == "websocket.close":
                break
        assert output["code"] == 4429
        assert len(outputs) <= 25  # the burst was answered, the rest never reached the database
        assert time.monotonic() - started < 5

    run(scenario)
    no_tracebacks(caplog)


def test_removed_member_loses_the_job_topic_within_5_seconds(world: dict[str, Any]) -> None:
    mine = world["teams"]

    async def scenario() -> None:
        socket = await connect(world["dave"])
        await socket.send_json_to({"subscribe": [f"job:{mine.pk}", "cluster"]})
        assert (await next_of(socket, "subscription"))["subscribed"] == [f"job:{mine.pk}", "cluster"]
        membership = await sync_to_async(Membership.objects.select_related("workspace", "user").get)(
            user=world["dave"], workspace=world["lab_a"]
        )
        started = time.monotonic()
        await sync_to_async(workspace_services.remove_member)(actor=None, membership=membership)
        dropped = await next_of(socket, "dropped", timeout=5)
        assert dropped["topics"] == [f"job:{mine.pk}"]
        assert time.monotonic() - started < 5
        # And no change of that job reaches the socket any more.
        await sync_to_async(job_services.cancel_job)(actor=None, job=mine)
        assert await socket.receive_nothing(timeout=1.5)
        await socket.disconnect()

    run(scenario)


def test_deactivated_user_socket_is_closed(world: dict[str, Any]) -> None:
    from console import services as console_services

    async def scenario() -> None:
        socket = await connect(world["dave"])
        await socket.send_json_to({"subscribe": ["cluster"]})
        await next_of(socket, "subscription")
        await sync_to_async(console_services.update_user)(actor=None, user=world["dave"], is_active=False)
        assert (await next_of(socket, "signed_out", timeout=5)) == {"type": "signed_out"}
        assert (await socket.receive_output(timeout=5))["code"] == 4401

    run(scenario)


def test_job_state_change_after_commit_reaches_a_subscriber(world: dict[str, Any]) -> None:
    mine = world["mine"]

    async def scenario() -> None:
        socket = await connect(world["dave"])
        await socket.send_json_to({"subscribe": [f"job:{mine.pk}", f"workspace:{world['lab_a'].pk}"]})
        await next_of(socket, "subscription")
        before = time.time()
        await sync_to_async(job_services.cancel_job)(actor=world["dave"], job=mine)
        after = time.time()
        change = await next_of(socket, "change")
        seen = {change["topic"]: change["change"]}
        stamps = {change["committed_at"]}
        change = await next_of(socket, "change")
        seen[change["topic"]] = change["change"]
        stamps.add(change["committed_at"])
        # One commit, one stamp on both topics, taken after the commit and before the cancel returned.
        assert len(stamps) == 1
        assert before - 0.001 <= stamps.pop() <= after + 0.001
        assert seen[f"job:{mine.pk}"]["state"] == "cancelled"
        assert seen[f"job:{mine.pk}"]["state_display"] == "Cancelled"
        assert seen[f"workspace:{world['lab_a'].pk}"] == {"jobs": {str(mine.pk): "cancelled"}}
        await socket.disconnect()

    run(scenario)


@pytest.mark.timeout(40)
def test_an_idle_socket_stays_open_and_hears_the_next_change(world: dict[str, Any]) -> None:
    """A socket that hears nothing for longer than the channel layer's blocking read (5 s) is
    still there for the next change (redis-py 8's default 5 s read timeout killed it)."""
    mine = world["mine"]

    async def scenario() -> None:
        socket = await connect(world["dave"])
        await socket.send_json_to({"subscribe": [f"job:{mine.pk}"]})
        await next_of(socket, "subscription")
        assert await socket.receive_nothing(timeout=12, interval=0.5)
        await sync_to_async(job_services.cancel_job)(actor=world["dave"], job=mine)
        change = await next_of(socket, "change")
        assert change["change"]["state"] == "cancelled"
        await socket.disconnect()

    run(scenario)


def test_many_changes_in_one_second_are_one_message(world: dict[str, Any]) -> None:
    from channels.layers import get_channel_layer

    from scheduling.live import MESSAGE_TYPE, topic_group

    mine = world["mine"]
    topic = f"job:{mine.pk}"

    async def scenario() -> None:
        socket = await connect(world["dave"])
        await socket.send_json_to({"subscribe": [topic]})
        await next_of(socket, "subscription")
        layer = get_channel_layer()
        started = time.monotonic()
        for index in range(20):
            change = {"state": "running", "allocated_gpus": index}
            envelope = {"type": MESSAGE_TYPE, "topic": topic, "change": change, "committed_at": 1000.0 + index}
            await layer.group_send(topic_group(topic), envelope)
        first = await next_of(socket, "change")
        assert first["change"]["allocated_gpus"] == 0  # the first goes out at once
        assert first["committed_at"] == 1000.0
        second = await next_of(socket, "change", timeout=3)
        assert second["change"]["allocated_gpus"] == 19  # the rest, merged, when the second ends
        assert second["committed_at"] == 1019.0  # as fresh as the newest commit merged in
        assert time.monotonic() - started >= 0.9
        assert await socket.receive_nothing(timeout=1.2)
        await socket.disconnect()

    run(scenario)


def test_publish_never_fails_a_write_when_the_layer_is_down(world: dict[str, Any], settings: Any) -> None:
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]}}
    }
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    try:
        job_services.cancel_job(actor=world["dave"], job=world["mine"])
    finally:
        channel_layers.backends.clear()
    assert Job.objects.get(pk=world["mine"].pk).state == "cancelled"


def test_logout_closes_that_sessions_socket_only(world: dict[str, Any]) -> None:
    """Django's logout view: the signed-out tab's socket closes within 5 s; another tab stays."""
    dave = world["dave"]

    async def scenario() -> None:
        browser = Client()
        await sync_to_async(browser.force_login)(dave)
        cookie = (b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode())
        leaving = WebsocketCommunicator(application, "/ws/live/", headers=[ORIGIN, cookie])
        assert (await leaving.connect(timeout=5))[0]
        staying = await connect(dave)
        for socket in (leaving, staying):
            await socket.send_json_to({"subscribe": ["cluster"]})
            await next_of(socket, "subscription")
        started = time.monotonic()
        assert (await sync_to_async(browser.post)("/logout/")).status_code == 302
        await next_of(leaving, "signed_out", timeout=5)
        assert (await leaving.receive_output(timeout=5))["code"] == 4401
        assert time.monotonic() - started < 5
        assert await staying.receive_nothing(timeout=1.5)
        await staying.disconnect()

    run(scenario)


def test_sign_out_everywhere_closes_every_socket(world: dict[str, Any]) -> None:
    from console import services as console_services

    async def scenario() -> None:
        sockets = [await connect(world["dave"]), await connect(world["dave"])]
        wanda = await connect(world["wanda"])
        for socket in (*sockets, wanda):
            await socket.send_json_to({"subscribe": ["cluster"]})
            await next_of(socket, "subscription")
        await sync_to_async(console_services.sign_out_everywhere)(actor=world["dave"], user=world["dave"])
        for socket in sockets:
            await next_of(socket, "signed_out", timeout=5)
        assert await wanda.receive_nothing(timeout=1.5)
        await wanda.disconnect()

    run(scenario)


async def watch_quotas(user: AbstractUser, *quotas: Any) -> WebsocketCommunicator:
    """A socket of `user` subscribed to the quotas' topics."""
    socket = await connect(user)
    await socket.send_json_to({"subscribe": [f"quota:{quota.pk}" for quota in quotas]})
    await next_of(socket, "subscription")
    return socket


async def publish_allocated(quota: Any, allocated: float, committed_at: float) -> None:
    """One quota change as a commit publishes it: one group message per topic."""
    from channels.layers import get_channel_layer

    from scheduling.live import MESSAGE_TYPE, topic_group

    envelope = {
        "type": MESSAGE_TYPE,
        "topic": f"quota:{quota.pk}",
        "change": {"allocated": allocated},
        "committed_at": committed_at,
    }
    await get_channel_layer().group_send(topic_group(f"quota:{quota.pk}"), envelope)


def allocated_by_topic(messages: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return sorted((message["topic"], message["change"]["allocated"]) for message in messages)


def test_the_quota_topics_share_one_window_so_a_moved_gpu_never_counts_twice(
    world: dict[str, Any], make_user: Callable[..., AbstractUser]
) -> None:
    """A reclaim moves GPUs from team-b to team-a in one commit. team-a's topic sent a moment ago,
    so its change waits for the window; team-b's must wait with it, not go out first (the
    Overview's stacked chart would count the GPUs in both for up to a second)."""
    from quotas.models import Quota

    team_a = Quota.objects.get(name="team-a")
    team_b = world["team_b"]
    admin = make_user("overseer", platform_admin=True)

    async def scenario() -> None:
        socket = await watch_quotas(admin, team_a, team_b)
        await publish_allocated(team_a, 0.0, 1000.0)
        first = await next_of(socket, "change")
        assert (first["topic"], first["change"]["allocated"]) == (f"quota:{team_a.pk}", 0.0)
        # One commit: team-a rises, team-b falls.
        await publish_allocated(team_a, 4.0, 1001.0)
        await publish_allocated(team_b, 0.0, 1001.0)
        assert await socket.receive_nothing(timeout=0.5)  # team-b's fall is held with team-a's rise
        together = [await next_of(socket, "change", timeout=2), await next_of(socket, "change", timeout=1)]
        assert allocated_by_topic(together) == sorted([(f"quota:{team_a.pk}", 4.0), (f"quota:{team_b.pk}", 0.0)])
        assert {message["committed_at"] for message in together} == {1001.0}
        await socket.disconnect()

    run(scenario)


def test_a_commits_quota_changes_leave_together_when_the_window_is_open(
    world: dict[str, Any], make_user: Callable[..., AbstractUser]
) -> None:
    """No window is running: the first quota change of a commit does not leave alone. Its
    commit's other quota arrives a moment later, as its own group message, and both go out
    together, not the second a whole window after the first (journey 6 on a loaded machine)."""
    from quotas.models import Quota

    team_a = Quota.objects.get(name="team-a")
    team_b = world["team_b"]
    admin = make_user("overseer", platform_admin=True)

    async def scenario() -> None:
        socket = await watch_quotas(admin, team_a, team_b)
        for quota, allocated in ((team_a, 4.0), (team_b, 0.0)):
            await publish_allocated(quota, allocated, 1001.0)
            await asyncio.sleep(0.02)  # the second group message of the commit, a moment later
        # Within the gather, well inside the one-second window the second would otherwise wait.
        together = [await next_of(socket, "change", timeout=0.5), await next_of(socket, "change", timeout=0.1)]
        assert allocated_by_topic(together) == sorted([(f"quota:{team_a.pk}", 4.0), (f"quota:{team_b.pk}", 0.0)])
        await socket.disconnect()

    run(scenario)
