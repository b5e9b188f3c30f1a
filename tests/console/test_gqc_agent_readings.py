"""Which beats carry the GPUs' readings (gqc.pace.ReadingsPace): at most every `samples_seconds`
the console's answers name, and every beat for a console that names none (older than the field).
The console is httpx's MockTransport answering as the console does (its side:
tests/scheduling/test_agent_api.py, the answers' samples_seconds)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gqc.agent import Agent, FakeGpus
from gqc.console_link import ConsoleUnreachable


def _agent(
    state_dir: Path, pace: dict[str, Any], *, down: list[bool] | None = None
) -> tuple[Agent, list[dict[str, Any]]]:
    """An agent whose console adds `pace` to every answer; the beats it received, in order. While
    `down[0]` is true the console does not answer."""
    beats: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if down and down[0]:
            raise httpx.ConnectError("the console is away")
        if request.url.path.endswith("/register/"):
            return httpx.Response(200, json={"heartbeat_seconds": 2, "mismatch": [], **pace})
        beats.append(json.loads(request.content))
        return httpx.Response(200, json={"starts": [], "stops": [], "heartbeat_seconds": 2, **pace})

    client = httpx.Client(base_url="http://console", transport=httpx.MockTransport(answer))
    agent = Agent(server="", node="n1", token="t", gpus=FakeGpus(8, "n1"), state_dir=state_dir, client=client)
    return agent, beats


def _carried(beats: list[dict[str, Any]]) -> list[bool]:
    return ["samples" in beat for beat in beats]


def test_an_older_console_that_names_no_interval_gets_readings_in_every_beat(tmp_path: Path) -> None:
    agent, beats = _agent(tmp_path, {})
    agent.register()
    for _ in range(3):
        agent.beat()
    assert _carried(beats) == [True, True, True]
    assert [len(beat["samples"]) for beat in beats] == [8, 8, 8]


def test_readings_go_at_most_every_samples_seconds_the_console_names(tmp_path: Path) -> None:
    agent, beats = _agent(tmp_path, {"samples_seconds": 5.0})
    agent.register()  # registration's answer already sets the pace
    agent.beat()
    agent.beat()
    agent.beat()
    assert _carried(beats) == [True, False, False]
    agent.readings.received_at = time.monotonic() - 4.4  # two early beats on: not yet
    agent.beat()
    agent.readings.received_at = time.monotonic() - 4.6  # the interval less the beats' jitter: due, once
    agent.beat()
    agent.beat()
    assert _carried(beats) == [True, False, False, False, True, False]


def test_a_beat_answer_can_change_the_pace_without_a_registration(tmp_path: Path) -> None:
    pace: dict[str, Any] = {}
    agent, beats = _agent(tmp_path, pace)
    agent.register()
    agent.beat()
    pace["samples_seconds"] = 5.0  # the console restarted with the setting; the agent did not register again
    agent.beat()
    agent.beat()
    assert _carried(beats) == [True, True, False]


def test_readings_a_beat_could_not_deliver_go_in_the_next_one(tmp_path: Path) -> None:
    down = [False]
    agent, beats = _agent(tmp_path, {"samples_seconds": 5.0}, down=down)
    agent.register()
    down[0] = True
    with pytest.raises(ConsoleUnreachable):
        agent.beat()
    down[0] = False
    agent.beat()
    agent.beat()
    assert _carried(beats) == [True, False]
