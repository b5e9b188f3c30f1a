"""The agent process's own rules, without a console: starts are idempotent, the log tail is
bounded, a stop keeps its first deadline, and `manage.py agent` needs no database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gqc.agent import BEAT_JITTER, LOG_LINES_PER_BEAT, Agent, FakeGpus, beat_delay, command_line
from tests.console.agent_exits import wait_exit

ROOT = Path(__file__).resolve().parents[2]


def _agent(tmp_path: Path, answers: list[dict[str, Any]] | None = None) -> tuple[Agent, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        sent.append(json.loads(request.content))
        answer = (answers or [{}]).pop(0) if answers else {}
        return httpx.Response(200, json={"starts": [], "stops": [], "heartbeat_seconds": 1, **answer})

    client = httpx.Client(base_url="http://console", transport=httpx.MockTransport(handler))
    return Agent(server="", node="n1", token="t", gpus=FakeGpus(2, "n1"), state_dir=tmp_path, client=client), sent


def _start(replica: int, command: str) -> dict[str, Any]:
    return {"replica": replica, "job": 7, "command": command, "environment": {}, "gpus": [1], "fraction": 0.5}


def test_a_start_twice_runs_once_and_the_fraction_reaches_the_environment(tmp_path: Path) -> None:
    agent, _sent = _agent(tmp_path)
    command = 'echo "$CUDA_VISIBLE_DEVICES $GPU_QUOTA_FRACTION $GPU_QUOTA_MEMORY_MIB" >> out; exit 3'
    agent.start(_start(1, command))
    agent.start(_start(1, command))
    assert wait_exit(agent, 1) == 3
    assert (tmp_path / "out").read_text() == f"1 0.5 {FakeGpus.MEMORY_MIB // 2}\n"


def test_the_jobs_environment_reaches_the_process_under_the_agents_own(tmp_path: Path) -> None:
    agent, _sent = _agent(tmp_path)
    start = _start(1, 'echo "$EPOCHS|$CUDA_VISIBLE_DEVICES|$GPU_QUOTA_FRACTION" >> out')
    # The console refuses these names at submit; were one to arrive, the agent's value still wins.
    start["environment"] = {"EPOCHS": "3", "CUDA_VISIBLE_DEVICES": "0,1", "GPU_QUOTA_FRACTION": "1"}
    agent.start(start)
    assert wait_exit(agent, 1) == 0
    assert (tmp_path / "out").read_text() == "3|1|0.5\n"


def test_the_devices_are_numbered_as_nvml_numbers_them(tmp_path: Path) -> None:
    # CUDA's default order (fastest first) can differ from NVML's on a host of mixed GPUs.
    agent, _sent = _agent(tmp_path)
    agent.start(_start(1, 'echo "$CUDA_DEVICE_ORDER" >> out'))
    assert wait_exit(agent, 1) == 0
    assert (tmp_path / "out").read_text() == "PCI_BUS_ID\n"


def test_the_agent_registers_with_the_packages_version(tmp_path: Path) -> None:
    import tomllib

    import gqc

    agent, sent = _agent(tmp_path)
    agent.register()
    assert sent[0]["version"] == gqc.__version__
    # pip's metadata comes from the same attribute, so what `pip show` says is what the console shows.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gqc.__version__"}


def test_the_log_shipped_per_beat_is_bounded(tmp_path: Path) -> None:
    agent, sent = _agent(tmp_path)
    agent.start(_start(2, f"seq 1 {LOG_LINES_PER_BEAT + 50}"))
    wait_exit(agent, 2)
    agent.beat()
    (process,) = sent[-1]["processes"]
    assert process["state"] == "exited" and process["exit_code"] == 0
    assert len(process["log"]) == LOG_LINES_PER_BEAT and process["log_truncated"] is True
    assert process["log"][-1] == str(LOG_LINES_PER_BEAT + 50)
    agent.beat()
    assert sent[-1]["processes"] == []  # reported once, then forgotten, never started again
    agent.start(_start(2, "true"))
    assert 2 not in agent.held


def test_a_stop_keeps_its_first_deadline_then_kills(tmp_path: Path) -> None:
    agent, _sent = _agent(tmp_path)
    agent.start(_start(3, 'trap "" TERM; sleep 30'))
    time.sleep(0.2)
    agent.stop({"replica": 3, "grace_seconds": 0.5})
    first = agent.held[3].stop_deadline
    agent.stop({"replica": 3, "grace_seconds": 60})
    assert agent.held[3].stop_deadline == first
    assert wait_exit(agent, 3) == -signal.SIGKILL


def test_manage_py_agent_needs_no_database(tmp_path: Path) -> None:
    environment = {
        **os.environ,
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    shown = subprocess.run(
        [sys.executable, "manage.py", "agent", "--help"], cwd=ROOT, env=environment, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert "--fake-gpus" in shown.stdout and "--token-file" in shown.stdout


def test_without_nvml_the_agent_says_so_in_one_sentence_and_exits_2(tmp_path: Path) -> None:
    from gqc.agent import NvmlGpus, NvmlUnavailable

    try:
        NvmlGpus()
    except NvmlUnavailable:
        pass
    else:
        pytest.skip("this host has NVML: benchmarks/agent_gpu_check.py checks the agent on it")
    token_file = tmp_path / "node.token"
    token_file.write_text("gqn_unused")
    command = command_line(
        server="http://127.0.0.1:1", node="n1", token_file=token_file, state_dir=tmp_path, fake_gpus=None
    )
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert finished.returncode == 2
    assert finished.stderr.startswith("agent: NVML does not answer on this host (")
    assert finished.stderr.strip().endswith("without a GPU, run the agent with --fake-gpus N.")
    assert len(finished.stderr.strip().splitlines()) == 1 and "Traceback" not in finished.stderr


def test_beats_come_a_heartbeat_apart_give_or_take_a_tenth() -> None:
    delays = [beat_delay(5.0) for _ in range(500)]
    assert all(5.0 * (1 - BEAT_JITTER) <= delay <= 5.0 * (1 + BEAT_JITTER) for delay in delays)
    # Spread over the whole band, so agents answered together drift apart within a few beats.
    assert max(delays) - min(delays) > 5.0 * BEAT_JITTER


def test_a_childs_exit_ends_the_agents_sleep_at_once() -> None:
    """The loop sleeps until its next beat (no polling); SIGCHLD wakes it when a process ends."""
    from gqc.replicas import child_wakeups

    with child_wakeups() as sleep:
        child = subprocess.Popen(["sh", "-c", "sleep 0.2"])
        began = time.monotonic()
        sleep(10.0)
        assert time.monotonic() - began < 5.0
        child.wait()
        began = time.monotonic()
        sleep(0.1)  # nothing more to wake it: the whole time
        assert time.monotonic() - began >= 0.09


def test_the_run_loop_reports_exits_soon_and_together(tmp_path: Path) -> None:
    """Replicas started by one answer and ending together are reported in one beat, well before
    the heartbeat (30 s here), though the loop no longer polls every 0.1 s."""
    beats: list[tuple[float, dict[str, Any]]] = []
    agent: Agent | None = None

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        body = json.loads(request.content)
        if request.url.path.endswith("/register/"):
            return httpx.Response(200, json={"heartbeat_seconds": 30, "mismatch": []})
        beats.append((time.monotonic(), body))
        starts = [_start(r, "sleep 0.3") for r in (1, 2)] if len(beats) == 1 else []
        if any(process["state"] == "exited" for process in body["processes"]):
            assert agent is not None
            agent.stopping = True
        return httpx.Response(200, json={"starts": starts, "stops": [], "heartbeat_seconds": 30})

    client = httpx.Client(base_url="http://console", transport=httpx.MockTransport(handler))
    agent = Agent(server="", node="n1", token="t", gpus=FakeGpus(2, "n1"), state_dir=tmp_path, client=client)
    agent.run()
    (asked, _first), *_middle, (reported, last) = beats
    assert reported - asked < 5.0  # not the 30 s heartbeat
    assert sorted((p["replica"], p["state"]) for p in last["processes"]) == [(1, "exited"), (2, "exited")]


def test_a_restart_reports_the_wrappers_code_and_one_beat_forgets_all_its_exits(tmp_path: Path) -> None:
    """The exit code lives in the wrapper's file, not in a rewrite of the state file: an agent
    restarted before the console had the exit reports the same code. The console's answer to a
    beat of several exits moves them all to the done list at once, and their files go."""
    agent, _sent = _agent(tmp_path)
    for replica, code in ((1, 3), (2, 0), (3, 7)):
        agent.start(_start(replica, f"exit {code}"))
    assert [wait_exit(agent, replica) for replica in (1, 2, 3)] == [3, 0, 7]
    assert json.loads((tmp_path / "replicas" / "1.json").read_text())["exit_code"] is None
    restarted, _sent = _agent(tmp_path)
    report = {p["replica"]: (p["state"], p.get("exit_code")) for p in restarted.report()[0]["processes"]}
    assert report == {1: ("exited", 3), 2: ("exited", 0), 3: ("exited", 7)}
    restarted.beat()
    assert sorted(restarted.done) == [1, 2, 3] and restarted.held == {}
    assert sorted(json.loads((tmp_path / "done.json").read_text())) == [1, 2, 3]
    # Their state and exit-code files are kept empty for the next replicas (*.spare); the logs go.
    assert all(p.name.endswith(".spare") and p.stat().st_size == 0 for p in (tmp_path / "replicas").iterdir())
    assert list((tmp_path / "logs").iterdir()) == []
    restarted.start(_start(2, "true"))  # finished here: never again
    assert 2 not in restarted.held
