"""The CPU an idle console spends: web, worker, beat (and the embedded Redis), demo data, no clients.

    nice -n 10 .venv/bin/python benchmarks/idle_console_cpu.py --seconds 600 --port 18606

A whole console starts as `bin/run` would (benchmarks.console_process: launcher, scratch
SQLite file, embedded Redis, demo data). After it is healthy and `--settle` seconds have passed
(the demo's first cycles, imports), the CPU seconds (user + system, from /proc through psutil) of
every process under the launcher are read, again `--seconds` later, and the difference is
printed per role and in total, with the cycles the console recorded meanwhile. Nobody signs in
and nothing is submitted: what is spent is the beat's safety-net cycles, the executor's ticks
and the processes' own housekeeping.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
from collections import defaultdict
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.console_process import _role, running_console


def cpu_seconds(root: int) -> dict[int, tuple[str, float]]:
    """Each live process under `root` (itself included): its role and CPU seconds so far."""
    found: dict[int, tuple[str, float]] = {}
    try:
        parent = psutil.Process(root)
        family = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return found
    for process in family:
        try:
            times = process.cpu_times()
            found[process.pid] = (_role(process), times.user + times.system)
        except psutil.Error:
            continue
    return found


def spent(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds spent between the two readings, by role (a process born between counts whole)."""
    by_role: dict[str, float] = defaultdict(float)
    for pid, (role, seconds) in after.items():
        by_role[role] += seconds - before.get(pid, (role, 0.0))[1]
    return dict(by_role)


def cycles_recorded(database_url: str) -> int:
    path = database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as database:
        return int(database.execute("SELECT COUNT(*) FROM scheduling_cyclerecord").fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0, help="the measured idle window")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds after healthy before the window")
    parser.add_argument("--port", type=int, default=18606)
    arguments = parser.parse_args()
    with running_console(port=arguments.port) as console:
        time.sleep(arguments.settle)
        cycles_before = cycles_recorded(console.database_url)
        before = cpu_seconds(console.process.pid)
        started = time.monotonic()
        time.sleep(arguments.seconds)
        after = cpu_seconds(console.process.pid)
        window = time.monotonic() - started
        cycles = cycles_recorded(console.database_url) - cycles_before
    by_role = spent(before, after)
    total = sum(by_role.values())
    report = {
        "window_s": round(window, 1),
        "cpu_s_total": round(total, 2),
        "cpu_percent_of_one_core": round(100 * total / window, 2),
        "cpu_s_by_role": {role: round(seconds, 2) for role, seconds in sorted(by_role.items())},
        "cycles_committed": cycles,
        "beat_seconds": float(os.environ.get("SCHEDULER_BEAT_SECONDS", "5")),
        "machine": f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB",
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
