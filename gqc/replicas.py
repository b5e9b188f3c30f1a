"""One process the node agent started, as its state directory keeps it, and whether that process
is still the one it started (same pid and same start time, so a reused pid is never adopted)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
