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

from gqc.replica_process import read_small

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


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the third (the state) on, or None when there is no such process."""
    try:
        stat = read_small(f"/proc/{pid}/stat")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    return stat[stat.rindex(b")") + 2 :].decode().split()


def _start_time(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None  # field 22: starttime


def _alive(pid: int, started: str) -> bool:
    fields = _stat_fields(pid)
    if fields is None or fields[0] == "Z":
        return False  # gone, or a zombie: it has exited, and its parent reaps it
    return len(fields) > 19 and fields[19] == started


def new_log(path: str | Path, replica: Replica) -> tuple[list[str], bool, int]:
    """The lines of the replica's log (at `path`) written since the last beat (bounded), whether
    some were dropped, and the new offset."""
    try:
        if os.stat(path).st_size <= replica.log_offset:
            return [], False, replica.log_offset  # nothing new: no open, no read (most beats)
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
