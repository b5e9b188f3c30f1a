"""Real agents (`python -m gqc.agent --fake-gpus`) as subprocesses against a live console: real
processes, signals, exit codes, logs, restarts and lost nodes. Heartbeats are short here (0.3 s)
so that each test stays within a few seconds.

They run on PostgreSQL only (see pytestmark). The `unlocked` retries below date from when they
also ran on SQLite's in-memory test database; on PostgreSQL they never retry."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import AbstractUser
from django.db import OperationalError, connection
from django.utils import timezone
from pytest_django.live_server_helper import LiveServer

from console.services import issue_token
from gqc.agent import command_line
from quotas.models import Node, NodeExecutor, NodeState
from quotas.node_agents import issue_node_token
from scheduling import services
from scheduling.executors import get_executor
from scheduling.models import Job, JobEvent, JobEventKind, JobState
from tests.scheduling.conftest import Cluster, build_cluster

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL: on SQLite's in-memory test database Django's live server thread shares "
        "the test's own connection, so the agents' beats interleave with the test's transactions (a "
        "FOREIGN KEY failure at a commit of the test's setup, once in a full run); CI runs these on "
        "PostgreSQL, and bin/run's file database has no such sharing",
    ),
]
ROOT = Path(__file__).resolve().parents[2]
BEAT = 0.3


class Agents:
    """Starts, kills and restarts agents; at the end, kills every process they left behind."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.tmp_path = tmp_path
        self.running: dict[str, subprocess.Popen[bytes]] = {}

    def state_dir(self, node: str) -> Path:
        return self.tmp_path / f"state-{node}"

    def start(self, node: str, *, gpus: int, issue: bool = True) -> subprocess.Popen[bytes]:
        token_file = self.tmp_path / f"{node}.token"
        if issue:
            token_file.write_text(unlocked(lambda: issue_node_token(actor=None, node=Node.objects.get(name=node))))
        process = subprocess.Popen(
            command_line(
                server=self.url, node=node, token_file=token_file, state_dir=self.state_dir(node), fake_gpus=gpus
            ),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp_path / f"{node}.agent.log", "ab"),  # noqa: SIM115 - the child keeps it
        )
        self.running[node] = process
        return process

    def stop(self, node: str, signum: int = signal.SIGTERM) -> None:
        process = self.running.pop(node)
        process.send_signal(signum)
        process.wait(timeout=10)

    def pids(self, node: str) -> list[int]:
        return [json.loads(p.read_text())["pid"] for p in (self.state_dir(node) / "replicas").glob("*.json")]

    def close(self) -> None:
        for node in list(self.running):
            self.stop(node, signal.SIGKILL)
        for state in self.tmp_path.glob("state-*"):
            for pid in self.pids(state.name.removeprefix("state-")):
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie that its new parent (PID 1 in a container) has not reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].startswith("Z")


def unlocked(action: Callable[[], Any]) -> Any:
    """`action()`, again while the in-memory SQLite's shared cache says a table is locked."""
    for _attempt in range(100):
        try:
            return action()
        except OperationalError as error:
            if "locked" not in str(error):
                raise
            # A lock met inside a write can leave SQLite's own transaction open under Django's
            # autocommit: end it, or every later BEGIN fails ("transaction within a transaction").
            raw = connection.connection
            if raw is not None and raw.in_transaction and not connection.in_atomic_block:
                raw.rollback()
            time.sleep(0.05)
    return action()


def wait_for(condition: Callable[[], Any], *, seconds: float = 10.0, what: str = "") -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = unlocked(condition)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {what}")


@pytest.fixture
def live(settings: Any, live_server: LiveServer, tmp_path: Path) -> Iterator[Agents]:
    settings.AGENT_HEARTBEAT_SECONDS = BEAT
    settings.NODE_LOST_SECONDS = 2.0
    settings.NODE_LOST_GRACE_SECONDS = 1.0
    agents = Agents(live_server.url, tmp_path)
    yield agents
    agents.close()


def agent_nodes(*gpus: int, tree: tuple[tuple[str, str | None, float], ...] = ()) -> Cluster:
    cluster = build_cluster(node_gpus=gpus, tree=tree)
    Node.objects.update(executor=NodeExecutor.AGENT, last_heartbeat=timezone.now())
    return cluster


def state(job: Job) -> str:
    return str(unlocked(lambda: Job.objects.get(pk=job.pk).state))


def logs(live_server: LiveServer, user: AbstractUser, job: Job) -> list[str]:
    token = unlocked(lambda: issue_token(user=user).key)
    for _attempt in range(50):
        answer = httpx.get(f"{live_server.url}/api/v1/jobs/{job.pk}/logs/", headers={"Authorization": f"Token {token}"})
        if answer.status_code != 500:  # 500: the shared cache's lock (module docstring)
            break
        time.sleep(0.05)
    assert answer.status_code == 200, answer.text
    lines: list[str] = answer.json()["lines"]
    return lines


def test_each_replica_sees_only_its_own_devices(live: Agents, live_server: LiveServer, platform_admin: Any) -> None:
    cluster = agent_nodes(8)
    live.start("gpu-1", gpus=8)
    job = unlocked(
        lambda: cluster.submit(
            "two", gpus=2, replicas=2, command='echo "rank=$GQC_REPLICA_RANK cuda=$CUDA_VISIBLE_DEVICES"; sleep 30'
        )
    )
    wait_for(lambda: len(logs(live_server, platform_admin, job)) == 2, what="both replicas' output")
    placed = unlocked(lambda: sorted(tuple(p.devices) for p in Job.objects.get(pk=job.pk).placements.all()))
    seen = sorted(logs(live_server, platform_admin, job))
    assert seen == [f"rank={rank} cuda={','.join(map(str, devices))}" for rank, devices in enumerate(placed)]
    assert unlocked(lambda: JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count()) == 2


def test_an_eviction_sends_sigterm_honours_the_grace_then_kills(
    live: Agents, live_server: LiveServer, platform_admin: Any
) -> None:
    cluster = agent_nodes(4, tree=(("Quota1", None, 4), ("team-a", "Quota1", 4), ("team-b", "Quota1", 0)))
    live.start("gpu-1", gpus=4)
    polite = unlocked(
        lambda: cluster.submit(
            "polite",
            "team-b",
            gpus=2,
            grace_seconds=2,
            command='trap "echo got-term; exit 0" TERM; echo ready; while true; do sleep 0.1; done',
        )
    )
    stubborn = unlocked(
        lambda: cluster.submit(
            "stubborn", "team-b", gpus=2, grace_seconds=2, command='trap "" TERM; echo ready; sleep 60; echo survived'
        )
    )
    for job in (polite, stubborn):

        def ready(job: Job = job) -> bool:
            return logs(live_server, platform_admin, job) == ["ready"]

        wait_for(ready, what=f"{job.name} ready")
    high = unlocked(lambda: cluster.submit("high", "team-a", gpus=4, command="echo high; sleep 30"))
    evicted_at = time.monotonic()
    assert state(polite) == state(stubborn) == JobState.RELEASING
    wait_for(lambda: state(polite) == JobState.PENDING or state(polite) == JobState.RUNNING, what="polite let go")
    assert "got-term" in logs(live_server, platform_admin, polite)
    wait_for(lambda: state(high) == JobState.RUNNING, what="high admitted")
    # The stubborn one held its devices through its whole grace, then SIGKILL ended it.
    assert time.monotonic() - evicted_at >= 2.0
    assert "survived" not in logs(live_server, platform_admin, stubborn)
    assert unlocked(lambda: Job.objects.get(pk=stubborn.pk).preemptions) == 1
    wait_for(lambda: logs(live_server, platform_admin, high) == ["high"], what="high running")


def test_exit_codes_become_succeeded_and_failed(live: Agents, live_server: LiveServer) -> None:
    cluster = agent_nodes(8)
    live.start("gpu-1", gpus=8)
    good = unlocked(lambda: cluster.submit("good", command="echo fine; exit 0"))
    bad = unlocked(lambda: cluster.submit("bad", command="echo broken >&2; exit 3"))
    wait_for(lambda: state(good) == JobState.SUCCEEDED and state(bad) == JobState.FAILED, what="both ended")
    failed = unlocked(lambda: JobEvent.objects.get(job=bad, kind=JobEventKind.FAILED))
    assert "exited with code 3" in failed.message and "broken" in failed.message
    assert unlocked(lambda: [Job.objects.get(pk=j.pk).allocated_gpus for j in (good, bad)]) == [0, 0]


def test_a_killed_agent_restarted_adopts_its_processes_and_starts_none_twice(live: Agents, tmp_path: Path) -> None:
    cluster = agent_nodes(8)
    live.start("gpu-1", gpus=8)
    count = tmp_path / "starts"
    job = unlocked(lambda: cluster.submit("long", command=f"echo x >> {count}; sleep 60", grace_seconds=1))
    wait_for(lambda: count.exists(), what="the job started")
    (pid,) = live.pids("gpu-1")
    live.stop("gpu-1", signal.SIGKILL)
    live.start("gpu-1", gpus=8, issue=False)
    time.sleep(BEAT * 6)
    assert count.read_text() == "x\n"
    assert live.pids("gpu-1") == [pid]
    assert state(job) == JobState.RUNNING
    assert unlocked(lambda: JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count()) == 1
    # The adopted process is still the agent's to stop.
    unlocked(lambda: services.cancel_job(actor=None, job=job))
    wait_for(lambda: not live.pids("gpu-1"), what="the adopted process stopped and forgotten")
    assert gone(pid)


def test_a_node_whose_agent_is_gone_goes_not_ready_and_its_jobs_run_elsewhere(live: Agents) -> None:
    cluster = agent_nodes(4, 4, tree=(("Quota1", None, 8), ("team-a", "Quota1", 4), ("team-b", "Quota1", 4)))
    live.start("gpu-1", gpus=4)
    live.start("gpu-2", gpus=4)
    job = unlocked(lambda: cluster.submit("moving", gpus=4, command="sleep 60"))
    wait_for(lambda: JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).exists(), what="started")
    first = unlocked(lambda: Job.objects.get(pk=job.pk).placements.get().node.name)
    other = "gpu-2" if first == "gpu-1" else "gpu-1"
    live.stop(first)  # for good; its process stays behind, as on a host that lost its network

    def ticked(check: Callable[[], bool]) -> Callable[[], bool]:
        def tick_then_check() -> bool:
            get_executor().tick(timezone.now())  # what beat's executor tick does every second
            return check()

        return tick_then_check

    wait_for(ticked(lambda: Node.objects.get(name=first).state == NodeState.NOT_READY), what="not ready")
    wait_for(
        ticked(lambda: Job.objects.get(pk=job.pk).placements.filter(node__name=other).exists()), what="placed again"
    )
    requeued = JobEvent.objects.filter(job=job, kind=JobEventKind.REQUEUED, message__contains="lost")
    assert unlocked(requeued.exists)
    wait_for(lambda: JobEvent.objects.filter(job=job, kind=JobEventKind.STARTED).count() == 2, what="runs elsewhere")


def test_node_tokens_are_refused_on_other_nodes_and_on_the_user_api(live: Agents, live_server: LiveServer) -> None:
    agent_nodes(4, 4)
    token = issue_node_token(actor=None, node=Node.objects.get(name="gpu-1"))
    headers = {"Authorization": f"Node {token}"}
    beat = httpx.post(
        f"{live_server.url}/api/v1/agent/heartbeat/", json={"node": "gpu-2", "processes": []}, headers=headers
    )
    assert beat.status_code == 403
    assert httpx.get(f"{live_server.url}/api/v1/jobs/", headers=headers).status_code == 401
    assert httpx.get(f"{live_server.url}/api/v1/nodes/", headers={"Authorization": f"Token {token}"}).status_code == 401


def test_a_cancel_keeps_the_devices_until_the_process_is_gone(live: Agents, live_server: LiveServer) -> None:
    cluster = agent_nodes(4)
    live.start("gpu-1", gpus=4)
    # Ignores SIGTERM: only the SIGKILL at the end of its 2 s grace ends it.
    stubborn = unlocked(
        lambda: cluster.submit("stubborn", gpus=4, grace_seconds=2, command='trap "" TERM; echo ready; sleep 60')
    )
    wait_for(lambda: live.pids("gpu-1"), what="stubborn started")
    (pid,) = live.pids("gpu-1")
    follower = unlocked(lambda: cluster.submit("follower", gpus=4, command="echo follower; sleep 30"))
    unlocked(lambda: services.cancel_job(actor=None, job=stubborn))
    cancelled_at = time.monotonic()
    assert state(stubborn) == JobState.RELEASING  # cancelled, still holding its devices
    # The follower starts only once the process is gone, and the cancelled job ends cancelled.
    wait_for(lambda: state(follower) == JobState.RUNNING, what="the follower admitted")
    assert gone(pid) and time.monotonic() - cancelled_at >= 2.0
    assert state(stubborn) == JobState.CANCELLED
    assert unlocked(lambda: Job.objects.get(pk=stubborn.pk).preemptions) == 0
