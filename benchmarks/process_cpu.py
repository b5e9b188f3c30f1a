"""CPU seconds a span of a benchmark cost, split by kind of process (issue 25's drain, part (c)).

On the 2-core test machine the agents' drain is bound by CPU, so what each kind of process spends
per job is the figure to cut: the web processes, the worker, the PostgreSQL backends of the
benchmark's database, the Redis server, the agents (with the wrappers and jobs they reaped) and
the benchmark's own driver. Read from /proc through psutil (utime + stime; an agent's reaped
children too), sampled every second while the span runs so that a process that exits during it
keeps what it spent up to its last sample.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psutil

# A kind of process -> the processes of that kind now; called at every sample.
Groups = Callable[[], dict[str, list[psutil.Process]]]


def _spent(process: psutil.Process, children: bool) -> float | None:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    spent = times.user + times.system
    if children:
        spent += times.children_user + times.children_system
    return float(spent)


class CpuTally:
    """The CPU each group's processes spent between `start` and `stop`. A process first seen after
    the start counts from zero (it began within the span)."""

    def __init__(self, groups: Groups, *, with_children: frozenset[str] = frozenset(), every: float = 1.0) -> None:
        self._groups = groups
        self._with_children = with_children
        self._every = every
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._group_of: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, first: bool) -> None:
        for group, processes in self._groups().items():
            for process in processes:
                spent = _spent(process, group in self._with_children)
                if spent is None:
                    continue
                self._group_of[process.pid] = group
                if process.pid not in self._first:
                    self._first[process.pid] = spent if first else 0.0
                self._last[process.pid] = spent

    def start(self) -> None:
        self._sample(first=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self._sample(first=False)

    def stop(self) -> dict[str, float]:
        """CPU seconds by group over the span."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample(first=False)
        spent: dict[str, float] = {}
        for pid, group in self._group_of.items():
            spent[group] = spent.get(group, 0.0) + self._last[pid] - self._first[pid]
        return spent


def family(root: int) -> list[psutil.Process]:
    """`root` and its descendants now; none once it is gone."""
    try:
        parent = psutil.Process(root)
        return [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return []


class Census:
    """The processes of each kind, each found once and then kept for the span's samples.

    A walk of every process on the machine (psutil's `children`, `process_iter`) at each sample
    cost the driver most of its CPU at 256 agents: a drain's machine holds thousands of processes,
    the agents' jobs among them. So the processes known to stay (the agents, the Redis server) are
    given once, the launcher's family is walked again only every `rewalk_seconds` (its web, worker
    and beat processes live as long as the console), and PostgreSQL's backends of the drain's
    database, which come and go with the worker's connections, are asked of the server itself
    (`pg_stat_activity`, one short query) rather than found by a walk. A process gone reads as
    nothing in `_spent`, so it keeps what it had spent up to its last sample."""

    def __init__(
        self, *, launcher: int, classify: Callable[[psutil.Process], str], rewalk_seconds: float = 10.0
    ) -> None:
        self._launcher = launcher
        self._classify = classify
        self._rewalk_seconds = rewalk_seconds
        self._walked_at: float | None = None
        self._kind_of: dict[int, tuple[str, psutil.Process]] = {}

    def keep(self, kind: str, processes: Iterable[psutil.Process]) -> None:
        for process in processes:
            self._kind_of.setdefault(process.pid, (kind, process))

    def keep_pids(self, kind_of_pid: Mapping[int, str]) -> None:
        """Processes known by pid (PostgreSQL's backends): each new one is looked up once."""
        for pid, kind in kind_of_pid.items():
            if pid not in self._kind_of:
                with contextlib.suppress(psutil.Error):
                    self._kind_of[pid] = (kind, psutil.Process(pid))

    def knows(self, pid: int) -> bool:
        return pid in self._kind_of

    def groups(self) -> dict[str, list[psutil.Process]]:
        now = time.monotonic()
        if self._walked_at is None or now - self._walked_at >= self._rewalk_seconds:
            self._walked_at = now
            for process in family(self._launcher):
                if process.pid not in self._kind_of:
                    self._kind_of[process.pid] = (self._classify(process), process)
        found: dict[str, list[psutil.Process]] = {}
        for kind, process in self._kind_of.values():
            found.setdefault(kind, []).append(process)
        return found


def postgres_backend_pids(cursor: Any, database: str) -> list[int]:
    """The server processes serving `database`, as the server lists them."""
    cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [database])
    return [int(pid) for (pid,) in cursor.fetchall()]


def redis_servers() -> list[psutil.Process]:
    """Every redis-server on the machine: the benchmark's Redis is a database of a shared server,
    so this counts the other users' commands too."""
    return [process for process in psutil.process_iter(["name"]) if process.info["name"] == "redis-server"]


def command_of(process: psutil.Process) -> str:
    """Its command line; empty once it is gone."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def this_process() -> list[psutil.Process]:
    return [psutil.Process(os.getpid())]


def line(spent: dict[str, float], jobs: int, seconds: float) -> str:
    """`web 12.3 s (6.1 ms/job), …, all 40.1 s (20.0 ms/job, 1.9 of 2 cores)`, the largest first."""
    parts = [
        f"{group} {cpu:.1f} s ({1000 * cpu / max(1, jobs):.2f} ms/job)"
        for group, cpu in sorted(spent.items(), key=lambda item: -item[1])
    ]
    total = sum(spent.values())
    cores = total / seconds if seconds else 0.0
    return (
        f"{', '.join(parts)}; all {total:.1f} s ({1000 * total / max(1, jobs):.2f} ms/job, "
        f"{cores:.2f} of {psutil.cpu_count()} cores)"
    )
