"""The agent's state directory belongs to one console (issue 27), and a start it does not carry out
is said, once per replica. The console here is httpx's MockTransport answering as the console's
register endpoint does (tests/scheduling/test_agent_starts.py pins that side); the processes,
signals and files are real. With a live console: tests/scheduling/test_agent_identity_live.py."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gqc.agent import IDENTITY_FILE, SET_ASIDE, Agent, FakeGpus, _alive, _start_time

OLD = "11111111-1111-4111-8111-111111111111"
NEW = "22222222-2222-4222-8222-222222222222"


def _agent(state_dir: Path, registration: dict[str, Any] | None = None) -> tuple[Agent, list[dict[str, Any]]]:
    """An agent whose console answers registrations with `registration` (and beats with nothing)."""
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        if request.url.path.endswith("/register/"):
            return httpx.Response(200, json={"heartbeat_seconds": 1, "mismatch": [], **(registration or {})})
        return httpx.Response(200, json={"starts": [], "stops": [], "heartbeat_seconds": 1})

    client = httpx.Client(base_url="http://console", transport=httpx.MockTransport(answer))
    return Agent(server="", node="n1", token="t", gpus=FakeGpus(2, "n1"), state_dir=state_dir, client=client), sent


def _start(replica: int, command: str, job: int = 7) -> dict[str, Any]:
    return {"replica": replica, "job": job, "command": command, "environment": {}, "gpus": [0], "fraction": 1.0}


def _owned_by(state_dir: Path, console: str, node_id: int = 1) -> None:
    (state_dir / IDENTITY_FILE).write_text(json.dumps({"console": console, "node_id": node_id}))


def _declines(caplog: pytest.LogCaptureFixture, replica: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.getMessage().startswith(f"declined the start of replica {replica} ")
    ]


def _wait_gone(pid: int, started: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid, started):
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still alive after {seconds} s")


def test_the_registration_says_whose_the_directory_is_and_what_it_holds(tmp_path: Path) -> None:
    _owned_by(tmp_path, OLD, 3)
    first, _sent = _agent(tmp_path, {"console": OLD, "node_id": 3, "adopt": [], "stop": []})
    first.start(_start(5, "sleep 30"))
    try:
        agent, sent = _agent(tmp_path, {"console": OLD, "node_id": 3, "adopt": [5], "stop": []})
        agent.register()
        pid = agent.held[5].pid
        assert (sent[0]["state_console"], sent[0]["state_node_id"]) == (OLD, 3)
        assert sent[0]["held"] == [{"replica": 5, "job": 7, "pid": pid}]
        # Its own console: nothing set aside, the process kept.
        assert 5 in agent.held and not (tmp_path / SET_ASIDE).exists()
    finally:
        first.stop({"replica": 5, "grace_seconds": 0})


def test_a_fresh_directory_records_its_console_at_the_first_registration(tmp_path: Path) -> None:
    agent, sent = _agent(tmp_path, {"console": NEW, "node_id": 4, "adopt": [], "stop": []})
    agent.register()
    assert (sent[0]["state_console"], sent[0]["state_node_id"], sent[0]["held"]) == ("", None, [])
    assert json.loads((tmp_path / IDENTITY_FILE).read_text()) == {"console": NEW, "node_id": 4}
    assert not (tmp_path / SET_ASIDE).exists()


def test_another_consoles_directory_is_set_aside_its_process_stopped_and_its_ids_started_anew(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The old console's agent ran replica 5 (still running, ignoring nothing) and finished 6.
    _owned_by(tmp_path, OLD)
    old, _sent = _agent(tmp_path, {"console": OLD, "node_id": 1, "adopt": [], "stop": []})
    old.start(_start(5, "echo old; sleep 60", job=70))
    old.start(_start(6, "true", job=71))
    while old.held[6].exit_code is None:
        old.watch()
        time.sleep(0.05)
    old.beat()  # reported, then forgotten: 6 is in the done list
    assert old.done == [6]
    stale = old.held[5]

    caplog.set_level(logging.INFO, logger="gqc.agent")
    agent, sent = _agent(tmp_path, {"console": NEW, "node_id": 9, "adopt": [], "stop": [5], "stop_grace_seconds": 5})
    agent.register()
    assert sent[0]["held"] == [{"replica": 5, "job": 70, "pid": stale.pid}]
    # Neither reported nor trusted: the process is stopped (SIGTERM), the done list set aside.
    _wait_gone(stale.pid, stale.started)
    assert agent.held == {} and agent.done == []
    assert agent.report()[0]["processes"] == []
    (aside,) = (tmp_path / SET_ASIDE).iterdir()
    assert aside.name.endswith(OLD)
    assert json.loads((aside / "done.json").read_text()) == [6]
    assert {p.name for p in aside.iterdir()} == {"5.json", "70-5.log", "done.json"}
    assert (aside / "70-5.log").read_text().startswith("old\n")  # its log, as far as it got
    assert json.loads((tmp_path / IDENTITY_FILE).read_text()) == {"console": NEW, "node_id": 9}
    said = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
    assert len(said) == 1 and f"belonged to console {OLD} node 1, not to console {NEW} node 9" in said[0]
    assert "done list (1 replicas) and 1 replicas set aside" in said[0]
    # The new console's replicas 5 and 6 are other replicas: both start.
    agent.start(_start(5, "echo new-5"))
    agent.start(_start(6, "echo new-6"))
    assert sorted(agent.held) == [5, 6] and _declines(caplog, 5) == _declines(caplog, 6) == []


def test_a_process_the_console_keeps_from_an_unrecorded_directory_stays_and_is_reported(tmp_path: Path) -> None:
    """A state directory from before identities (an upgrade): the console keeps what it knows."""
    old, _sent = _agent(tmp_path)
    old.start(_start(5, "sleep 60"))
    (tmp_path / "done.json").write_text("[1, 2]")
    try:
        agent, sent = _agent(tmp_path, {"console": NEW, "node_id": 1, "adopt": [5], "stop": []})
        assert agent.done == [1, 2]
        agent.register()
        assert sent[0]["state_console"] == ""
        assert list(agent.held) == [5] and agent.done == []
        assert [p["replica"] for p in agent.report()[0]["processes"]] == [5]
        assert (tmp_path / "replicas" / "5.json").exists()
    finally:
        old.stop({"replica": 5, "grace_seconds": 0})


def test_a_stopped_stranger_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    stubborn = subprocess.Popen(["sh", "-c", 'trap "" TERM; sleep 60'], start_new_session=True)
    try:
        time.sleep(0.1)
        started = _start_time(stubborn.pid)
        (tmp_path / "replicas").mkdir(parents=True)
        (tmp_path / "replicas" / "3.json").write_text(
            json.dumps({"replica": 3, "job": 1, "pid": stubborn.pid, "started": started, "gpus": [0]})
        )
        _owned_by(tmp_path, OLD)
        agent, _sent = _agent(
            tmp_path, {"console": NEW, "node_id": 1, "adopt": [], "stop": [3], "stop_grace_seconds": 0.3}
        )
        agent.register()
        time.sleep(0.5)
        assert stubborn.poll() is None  # SIGTERM ignored
        agent.watch()  # past the grace: SIGKILL
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
        agent.watch()
        assert agent.foreign == {}
    finally:
        stubborn.kill()


def test_a_start_of_a_replica_finished_here_is_declined_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gqc.agent")
    agent, _sent = _agent(tmp_path)
    agent.start(_start(2, "true"))
    while agent.held[2].exit_code is None:
        agent.watch()
        time.sleep(0.05)
    agent.beat()
    for _beat in range(3):
        agent.start(_start(2, "true"))
    assert 2 not in agent.held
    (said,) = _declines(caplog, 2)
    assert said.endswith("it ran here and finished before (the state directory's done list)")


def test_a_start_it_cannot_write_is_declined_said_once_and_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gqc.agent")
    agent, _sent = _agent(tmp_path)
    (tmp_path / "logs").rmdir()
    (tmp_path / "logs").write_text("not a directory")  # as a full or read-only disk would refuse
    for _beat in range(3):
        agent.start(_start(4, "echo hi"))
    assert agent.held == {}
    (said,) = _declines(caplog, 4)
    assert "cannot start its process" in said and "Not a directory" in said
    (tmp_path / "logs").unlink()
    (tmp_path / "logs").mkdir()
    agent.start(_start(4, "echo hi"))  # the next ask, once the directory is writable again
    assert 4 in agent.held
