"""The engine alone on the cycles of simulate's S3 in 10 bursts (issue 26): CPU per cycle, and
a digest of each cycle's decisions and reasons so that two trees can be compared.

    python benchmarks/runtime_simulate_engine.py --capture /tmp/s3-cycles.pickle   # plays the scenario once
    python benchmarks/runtime_simulate_engine.py --replay /tmp/s3-cycles.pickle [--rounds 15]

--capture plays `runtime_workloads.s3_burst_scenario` as `manage.py simulate` does and keeps
the snapshots the engine was given at a few late cycles (the queue at its fullest, where the
victim searches cost most). --replay needs no Django: it runs `engine.schedule` on each kept
snapshot `--rounds` times and prints the least CPU of a round (the least is the figure the
machine's other load disturbs least) and the digests. A capture made in one tree replays in
another: the snapshots are the engine's plain types.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import sys
import time
from pathlib import Path
from typing import Any

# The tree timed is the one it is run from (its root): a capture made in one tree replays in
# another with this file (`python /path/to/runtime_simulate_engine.py --replay FILE`).
sys.path.insert(0, str(Path.cwd()))

CYCLES = (12, 34, 47, 56, 61)  # of the 62 the run takes (1 at set-up, 61 after the bursts)


def capture(path: Path) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    import yaml

    from benchmarks.runtime_workloads import s3_burst_scenario
    from scheduling import engine
    from scheduling.simulate import parse_scenario, play, throwaway_database

    kept: list[Any] = []
    schedule = engine.schedule  # what scheduling.cycle calls, through the module
    seen = [0]

    def keeping(snapshot: Any) -> Any:
        seen[0] += 1
        if seen[0] in CYCLES:
            kept.append(snapshot)
        return schedule(snapshot)

    # the file `runtime_simulate_s3.py --write` writes, parsed as `manage.py simulate` parses it
    scenario = parse_scenario(yaml.safe_dump(s3_burst_scenario(bursts=10, per_burst=1000)))
    engine.schedule = keeping
    try:
        with throwaway_database():
            play(scenario)
    finally:
        engine.schedule = schedule
    path.write_bytes(pickle.dumps(kept))
    print(f"kept {len(kept)} snapshots of cycles {CYCLES} in {path}")


def replay(path: Path, rounds: int) -> None:
    from scheduling.engine import schedule

    snapshots = pickle.loads(path.read_bytes())
    results = [schedule(snapshot) for snapshot in snapshots]  # warm
    least = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        results = [schedule(snapshot) for snapshot in snapshots]
        least = min(least, time.process_time() - started)
    print(
        f"engine on {len(snapshots)} cycles: least CPU of {rounds} rounds {least:.3f} s "
        f"({least / len(snapshots) * 1000:.0f} ms a cycle), load average {os.getloadavg()[0]:.1f}"
    )
    for result in results:
        print("  ", hashlib.md5(repr(result).encode()).hexdigest())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--capture", type=Path)
    parser.add_argument("--replay", type=Path)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if args.capture:
        capture(args.capture)
    if args.replay:
        replay(args.replay, args.rounds)


if __name__ == "__main__":
    main()
