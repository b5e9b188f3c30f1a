"""When the node agent beats and how long it sleeps in between (gqc/node_agent.py's loop)."""

from __future__ import annotations

import random
from typing import Any

# How often the loop looks at processes no SIGCHLD tells it about (adopted after a restart, another
# console's being stopped) and at stop deadlines. Its own children wake it at once (SIGCHLD), so
# an agent whose processes are all its children sleeps until the next beat, at most IDLE_SECONDS:
# polling every 0.1 s cost 2.3 ms of CPU a second per agent, 0.6 of a core for 256 agents.
POLL_SECONDS = 0.1
IDLE_SECONDS = 1.0
# An exit is reported this soon rather than at once: the replicas started by one answer often end
# together, and one beat carrying all their exits costs the console one write instead of several.
EXIT_GATHER_SECONDS = 0.2
# Each beat comes a heartbeat later, give or take this share of it. Agents whose beats were
# answered together (after the console was slow or away) would otherwise beat in step for good:
# a thousand of them at once every few seconds, and next to nothing in between.
BEAT_JITTER = 0.1


def beat_delay(heartbeat_seconds: float) -> float:
    """Seconds until the next beat: the heartbeat, give or take BEAT_JITTER of it."""
    return heartbeat_seconds * random.uniform(1 - BEAT_JITTER, 1 + BEAT_JITTER)


class ReadingsPace:
    """How often a beat carries the GPUs' readings. Each reading costs the console a row per GPU,
    and the agent reading the GPUs and sending them: in every 2 s beat, 2.5 times as often as the
    console samples its simulated nodes (TELEMETRY_SAMPLE_SECONDS, 5 s). So a console says in its
    answers (registration and beats) how often it wants them, `samples_seconds`, and a beat carries
    them once that long has passed since the last the console received, less the beats' jitter
    (BEAT_JITTER of it: at an interval equal to the heartbeat, a beat that came early would skip
    them): every third beat at 2 s beats and 5 s, or an exit beat in between. A console that does
    not say (older than the field) gets them in every beat, as before."""

    def __init__(self) -> None:
        self.seconds = 0.0  # 0: in every beat
        self.received_at: float | None = None  # time.monotonic() of the last the console received

    def due(self, now: float) -> bool:
        due_after = self.seconds * (1 - BEAT_JITTER)
        return self.seconds <= 0 or self.received_at is None or now - self.received_at >= due_after

    def follow(self, answer: dict[str, Any]) -> None:
        self.seconds = max(0.0, float(answer.get("samples_seconds", self.seconds)))
