"""Issue 27 with a real agent (`python -m gqc.agent --fake-gpus`) against a live console: a state
directory left by another console neither skips this console's starts nor passes its processes off
as this console's, and a start the agent cannot carry out is requeued within AGENT_START_BEATS
heartbeats, with the reason, and a warning on the node. PostgreSQL only, as test_agent_live.py
(which holds the restart adoption tests, unchanged) says why."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_django.live_server_helper import LiveServer

from gqc.agent import IDENTITY_FILE, SET_ASIDE, _start_time
from quotas.models import AuditRecord, NodeAgent
from quotas.node_agents import installation_identity
from scheduling.models import Job, JobEvent, JobEventKind, JobState
from tests.scheduling.test_agent_live import BEAT, Agents, agent_nodes, gone, logs, state, unlocked, wait_for
from tests.scheduling.test_agent_live import pytestmark as live_marks

pytestmark = live_marks
START_BEATS = 3


@pytest.fixture
def live(settings: Any, live_server: LiveServer, tmp_path: Path) -> Iterator[Agents]:
    settings.AGENT_HEARTBEAT_SECONDS = BEAT
    settings.AGENT_START_BEATS = START_BEATS
    settings.NODE_LOST_SECONDS = 2.0
    settings.NODE_LOST_GRACE_SECONDS = 1.0
    agents = Agents(live_server.url, tmp_path)
    yield agents
    agents.close()


def _replica(job: Job) -> int:
    return int(unlocked(lambda: Job.objects.get(pk=job.pk).placements.get().pk))


def test_a_state_directory_of_another_console_skips_none_of_its_starts_and_keeps_none_of_its_processes(
    live: Agents, live_server: LiveServer, platform_admin: Any
) -> None:
    cluster = agent_nodes(4)
    first = unlocked(lambda: cluster.submit("first", gpus=1, command="echo hello from the new console"))
    second = unlocked(lambda: cluster.submit("second", gpus=1, command="echo and the second"))
    finished, running = _replica(first), _replica(second)
    # What the other console's agent left on this host: its identity, the replicas it finished
    # (one of them numbered as this console's first), and a process under the second's number.
    directory = live.state_dir("gpu-1")
    (directory / "replicas").mkdir(parents=True)
    (directory / IDENTITY_FILE).write_text(json.dumps({"console": str(uuid.uuid4()), "node_id": 1}))
    (directory / "done.json").write_text(json.dumps([finished - 1, finished, finished + 5]))
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        time.sleep(0.1)
        record = {
            "replica": running,
            "job": 999,
            "pid": stranger.pid,
            "started": _start_time(stranger.pid),
            "gpus": [3],
        }
        (directory / "replicas" / f"{running}.json").write_text(json.dumps(record))
        live.start("gpu-1", gpus=4)
        wait_for(
            lambda: state(first) == JobState.SUCCEEDED and state(second) == JobState.SUCCEEDED,
            seconds=20,
            what="both jobs ran and succeeded",
        )
        assert logs(live_server, platform_admin, first) == ["hello from the new console"]
        assert logs(live_server, platform_admin, second) == ["and the second"]
        assert stranger.wait(timeout=10) is not None and gone(stranger.pid)  # told to stop, and stopped
    finally:
        stranger.kill()
    claim = unlocked(lambda: AuditRecord.objects.get(action="node.agent_state"))
    assert claim.after is not None and claim.after["stopped"] == [running] and claim.after["adopted"] == []
    owner = json.loads((directory / IDENTITY_FILE).read_text())
    assert owner == {"console": unlocked(installation_identity), "node_id": cluster.nodes["gpu-1"].pk}
    (aside,) = (directory / SET_ASIDE).iterdir()
    assert json.loads((aside / "done.json").read_text()) == [finished - 1, finished, finished + 5]
    said = (live.tmp_path / "gpu-1.agent.log").read_text()
    assert said.count("set aside") == 1 and "declined" not in said


def test_a_start_the_agent_cannot_carry_out_is_requeued_with_the_reason_within_the_beats(
    live: Agents, live_server: LiveServer, platform_admin: Any
) -> None:
    cluster = agent_nodes(4)
    live.start("gpu-1", gpus=4)
    directory = live.state_dir("gpu-1")
    wait_for(lambda: (directory / IDENTITY_FILE).exists(), what="the agent registered")
    # A state directory it cannot write a log in: every start fails (ENOTDIR), as on a full disk.
    (directory / "logs").rmdir()
    (directory / "logs").write_text("")
    job = unlocked(lambda: cluster.submit("stuck", gpus=1, command="echo at last"))
    first = _replica(job)
    submitted = time.monotonic()
    deadline = START_BEATS * BEAT
    reason = f"the agent on gpu-1 did not start it within {deadline:g} s"
    wait_for(
        lambda: JobEvent.objects.filter(job=job, kind=JobEventKind.REQUEUED, message=reason).exists(),
        what="requeued with the reason",
    )
    # Asked at the agent's next beat, given up at the first beat past the deadline: a few tenths
    # beyond it, and a second for a machine whose two cores are shared.
    assert time.monotonic() - submitted < deadline + 2 * BEAT + 1.0
    agent = unlocked(lambda: NodeAgent.objects.get(node__name="gpu-1"))
    assert agent.start_missed_at is not None and agent.start_missed.startswith("did not start job")
    said = (live.tmp_path / "gpu-1.agent.log").read_text()
    assert said.count(f"declined the start of replica {first} of job {job.pk}: cannot start its process") == 1
    assert "Not a directory" in said
    # The directory mended, the next placement of the job runs, and the warning goes.
    (directory / "logs").unlink()
    (directory / "logs").mkdir()
    wait_for(lambda: state(job) == JobState.SUCCEEDED, seconds=15, what="it ran at last")
    assert logs(live_server, platform_admin, job) == ["at last"]
    assert unlocked(lambda: NodeAgent.objects.get(node__name="gpu-1").start_missed) == ""
