"""One process the node agent started, as its state directory keeps it, and whether that process
is still the one it started (same pid and same start time, so a reused pid is never adopted);
what of its log a beat ships; the agent's sleep that a child's exit ends."""

from __future__ import annotations

import contextlib
import os
import select
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# What one beat ships per process, within the console's bounds (quotas.bounds AGENT_*).
LOG_LINES_PER_BEAT = 200
LOG_LINE_MAX_LENGTH = 2_000
LOG_BYTES_PER_BEAT = 256 * 1024


@dataclass
class Replica:
    """One process this agent started, as kept in the state directory."""

    replica: int
    job: int
    pid: int
    started: str  # the process's start time (/proc/PID/stat), so a reused pid is never adopted
    gpus: list[int]
    log_offset: int = 0
    stop_deadline: float | None = None
    killed: bool = False
    exit_code: int | None = None


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None  # field 22: starttime


def _alive(pid: int, started: str) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        state = stat.read_text()
    except OSError:
        return False
    if state[state.rindex(")") + 2 :].startswith("Z"):
        return False  # a zombie has exited; its parent reaps it
    return _start_time(pid) == started


def new_log(path: Path, replica: Replica) -> tuple[list[str], bool, int]:
    """The lines of the replica's log (at `path`) written since the last beat (bounded), whether
    some were dropped, and the new offset."""
    try:
        with open(path, "rb") as log:
            log.seek(replica.log_offset)
            chunk = log.read(LOG_BYTES_PER_BEAT)
    except OSError:
        return [], False, replica.log_offset
    truncated = len(chunk) == LOG_BYTES_PER_BEAT
    finished = replica.exit_code is not None and not truncated
    end = len(chunk) if finished else chunk.rfind(b"\n") + 1  # a half-written line waits
    lines = chunk[:end].decode(errors="replace").splitlines()
    if len(lines) > LOG_LINES_PER_BEAT:
        lines, truncated = lines[-LOG_LINES_PER_BEAT:], True
    return [line[:LOG_LINE_MAX_LENGTH] for line in lines], truncated, replica.log_offset + end


@contextlib.contextmanager
def child_wakeups() -> Iterator[Callable[[float], None]]:
    """A sleep that a signal ends at once: SIGCHLD (a child exited) and any signal with a Python
    handler (SIGTERM) write to a pipe that the sleep waits on (signal.set_wakeup_fd), so the agent
    reports an exit at once yet does not poll in between. Main thread only, as signals are."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    previous_fd = signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    previous_handler = signal.signal(signal.SIGCHLD, _noticed)

    def sleep(seconds: float) -> None:
        select.select([wake_read], [], [], seconds)
        with contextlib.suppress(BlockingIOError):
            os.read(wake_read, 4096)  # what woke it: a signal arriving later wakes the next sleep

    try:
        yield sleep
    finally:
        signal.signal(signal.SIGCHLD, previous_handler)
        signal.set_wakeup_fd(previous_fd)
        os.close(wake_read)
        os.close(wake_write)


def _noticed(signum: int, frame: object) -> None:
    """SIGCHLD's handler: nothing to do; its wake-up byte ends the sleep, and the agent's loop reaps."""
