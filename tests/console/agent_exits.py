"""Waiting for a replica's exit in the node agent's own tests (test_gqc_agent*, no console)."""

from __future__ import annotations

import time

from gqc.node_agent import Agent


def wait_exit(agent: Agent, replica: int, seconds: float = 10.0) -> int:
    """The replica's exit code once the agent has seen it end (its `watch`), within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        agent.watch()
        code = agent.held[replica].exit_code
        if code is not None:
            return code
        time.sleep(0.02)
    raise AssertionError(f"replica {replica} did not exit within {seconds:g} s")
