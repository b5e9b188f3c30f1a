"""Keeps the launcher's processes running: restart with backoff, give up on a crash loop.

The policy is plain functions of a process's crash history and how long its last run lasted,
so it is tested without waiting. `Supervisor` applies it to real processes, each in its own
process group, reading time from an injected clock.

Why our own and not a library: supervisord runs as a separate daemon configured by a file,
honcho stops everything when one process exits (the behaviour this replaces), and circus
brings ZeroMQ, tornado and control ports; none of them lives inside a launcher that also owns
the embedded Redis and must stop it last.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from console.lifeline import die_with_parent

STOP_TIMEOUT_SECONDS = 15.0


@dataclass(frozen=True)
class RestartPolicy:
    """Exponential backoff between restarts, reset by a long enough run; give up on a crash loop."""

    first_delay_seconds: float = 1.0
    max_delay_seconds: float = 30.0
    # A run this long means the process was healthy: the next crash starts the backoff again at 1 s.
    stable_after_seconds: float = 60.0
    # A run shorter than this is a fast crash; this many in a row is a crash loop, not bad luck.
    fast_crash_seconds: float = 10.0
    fast_crashes_to_give_up: int = 5


@dataclass(frozen=True)
class CrashHistory:
    """What the policy remembers of one process between its runs."""

    crashes_since_stable_run: int = 0
    fast_crashes_in_a_row: int = 0


@dataclass(frozen=True)
class Restart:
    delay_seconds: float


@dataclass(frozen=True)
class GiveUp:
    fast_crashes: int


def backoff_seconds(policy: RestartPolicy, crashes_since_stable_run: int) -> float:
    """1 s after the first crash, then 2 s, 4 s, … up to the cap."""
    doublings = max(0, crashes_since_stable_run - 1)
    # Cap the exponent too: 2**1000 is a float overflow long before the cap applies.
    return min(policy.first_delay_seconds * 2.0 ** min(doublings, 64), policy.max_delay_seconds)


def after_exit(
    policy: RestartPolicy, history: CrashHistory, uptime_seconds: float
) -> tuple[CrashHistory, Restart | GiveUp]:
    """The history after a process ran `uptime_seconds` and exited, and what to do about it."""
    stable = uptime_seconds >= policy.stable_after_seconds
    fast = uptime_seconds < policy.fast_crash_seconds
    updated = CrashHistory(
        crashes_since_stable_run=1 if stable else history.crashes_since_stable_run + 1,
        fast_crashes_in_a_row=history.fast_crashes_in_a_row + 1 if fast else 0,
    )
    if updated.fast_crashes_in_a_row >= policy.fast_crashes_to_give_up:
        return updated, GiveUp(fast_crashes=updated.fast_crashes_in_a_row)
    return updated, Restart(delay_seconds=backoff_seconds(policy, updated.crashes_since_stable_run))


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
        return f"was killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Child:
    """One named command and its current run; `process` is None while it waits to restart."""

    name: str
    command: Sequence[str]
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    history: CrashHistory = field(default_factory=CrashHistory)


# Told of each change: the process name and a sentence that completes "the worker process …".
ChangeListener = Callable[[str, str], None]


def _ignore_change(name: str, sentence: str) -> None:
    return None


class Supervisor:
    """Runs named commands, each in its own process group; restarts one that exits on its own."""

    def __init__(
        self,
        commands: Mapping[str, Sequence[str]],
        *,
        cwd: Path,
        policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_change: ChangeListener = _ignore_change,
    ) -> None:
        self.children = {name: Child(name=name, command=list(command)) for name, command in commands.items()}
        self.cwd = cwd
        self.policy = policy or RestartPolicy()
        self.clock = clock
        self.on_change = on_change
        self.stopping = False

    def start(self) -> None:
        for child in self.children.values():
            self._spawn(child)

    def process(self, name: str) -> subprocess.Popen[bytes] | None:
        return self.children[name].process

    def tend(self) -> str | None:
        """One pass: notice exits, restart what is due. Returns a sentence when it gives up."""
        if self.stopping:
            return None
        now = self.clock()
        for child in self.children.values():
            if child.process is not None:
                code = child.process.poll()
                if code is None:
                    continue
                verdict = self._exited(child, code, now)
                if verdict is not None:
                    return verdict
            if child.restart_at is not None and now >= child.restart_at:
                self._spawn(child)
                self.on_change(child.name, f"was restarted (pid {self._pid(child)})")
        return None

    def _exited(self, child: Child, code: int, now: float) -> str | None:
        assert child.process is not None
        # A leader's group may outlive it (Celery's pool children): clear it before the next run.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.process.pid, signal.SIGKILL)
        child.process = None
        uptime = now - child.started_at
        child.history, decision = after_exit(self.policy, child.history, uptime)
        how = describe_exit(code)
        if isinstance(decision, GiveUp):
            return (
                f"the {child.name} process crashed {decision.fast_crashes} times in a row, each within "
                f"{self.policy.fast_crash_seconds:g} s of starting (last: it {how}); giving up and stopping the others."
            )
        child.restart_at = now + decision.delay_seconds
        self.on_change(child.name, f"{how} after {uptime:.0f} s; restarting it in {decision.delay_seconds:g} s")
        return None

    def _spawn(self, child: Child) -> None:
        # Its own session: Ctrl-C at the terminal reaches the launcher only, which stops children in order.
        child.process = subprocess.Popen(
            child.command, cwd=self.cwd, start_new_session=True, preexec_fn=die_with_parent
        )
        child.started_at = self.clock()
        child.restart_at = None

    @staticmethod
    def _pid(child: Child) -> int:
        assert child.process is not None
        return child.process.pid

    def stop(self) -> None:
        """SIGTERM every child, wait for them, then SIGKILL what is left of each group.

        The signal goes to each child's main process, not its group: a Celery worker's warm
        shutdown stops its own pool after the tasks in hand, and a SIGTERM to the whole group
        killed the pool under it (a WorkerLostError traceback per busy process at every stop).
        """
        self.stopping = True
        running = [child.process for child in self.children.values() if child.process is not None]
        for process in running:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for process in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
        for process in running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait()
