"""simulate of S3 arriving in 10 bursts of 1,000 jobs (target: 10 s in all, issue 26; 30 s before).

    python benchmarks/runtime_simulate_s3.py [--bursts 10] [--per-burst 1000] [--profile FILE]
    python benchmarks/runtime_simulate_s3.py --write s3-bursts.yaml   # the file alone, for A/B runs of
        manage.py simulate s3-bursts.yaml --json  (docs/benchmarks-runtime.md has the A/B command)

Writes the scenario as a YAML file and plays it exactly as `manage.py simulate FILE --json`
does (load_scenario, throwaway in-memory database, simulated clock, the console's services and
cycle, the collector as `play` sets it, each checkpoint through json.dumps), timing each phase:
parse, cluster set-up, each burst's submits and its convergence (cycles, and what a cycle costs),
and the checkpoint read-out. --profile writes cProfile statistics of the whole run to FILE.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

import django

django.setup()

from benchmarks.runtime_workloads import s3_burst_scenario  # noqa: E402
from scheduling.clock import SimulatedClock, use_clock  # noqa: E402
from scheduling.simulate import (  # noqa: E402
    SIMULATION_START,
    CheckpointStep,
    ScenarioRunner,
    SubmitStep,
    load_scenario,
    throwaway_database,
)
from scheduling.simulate.collector import batch_collection  # noqa: E402

TARGET_SECONDS = 10.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bursts", type=int, default=10)
    parser.add_argument("--per-burst", type=int, default=1000)
    parser.add_argument("--profile", type=Path, help="write cProfile statistics of the run to this file")
    parser.add_argument("--write", type=Path, help="only write the scenario file here and stop")
    args = parser.parse_args()
    document = yaml.safe_dump(s3_burst_scenario(bursts=args.bursts, per_burst=args.per_burst))
    if args.write:
        args.write.write_text(document)
        return

    profiler = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s3-bursts.yaml"
        path.write_text(document)
        if profiler is not None:
            profiler.enable()
        started = time.perf_counter()
        cpu_started = time.process_time()
        scenario = load_scenario(path)
        parsed = time.perf_counter()
        # As `play` does: the simulated clock, and the collector tuned for the batch.
        with throwaway_database(), batch_collection():
            schema = time.perf_counter()
            clock = SimulatedClock(SIMULATION_START)
            with use_clock(clock):
                runner = ScenarioRunner(scenario, clock=clock)
                runner.set_up()
                set_up = time.perf_counter()
                rows = []
                checkpoint_seconds = 0.0
                for step in scenario.steps:
                    if isinstance(step, SubmitStep):
                        before = time.perf_counter()
                        runner.apply(step)
                        submitted = time.perf_counter()
                        cycles_before = runner.cycles
                        runner.converge()
                        converged = time.perf_counter()
                        rows.append(
                            (len(step.jobs), submitted - before, converged - submitted, runner.cycles - cycles_before)
                        )
                    elif isinstance(step, CheckpointStep):
                        before = time.perf_counter()
                        checkpoint = runner.checkpoint(step.name)
                        io.StringIO().write(json.dumps(checkpoint.as_json(), separators=(", ", ": ")) + "\n")
                        checkpoint_seconds += time.perf_counter() - before
        finished = time.perf_counter()
        cpu = time.process_time() - cpu_started
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(args.profile)

    total = finished - started
    running = sum(1 for job in checkpoint.jobs.values() if job["state"] == "running")
    print(
        f"simulate S3 in {args.bursts} bursts of {args.per_burst}: {total:.1f} s in all "
        f"(target {TARGET_SECONDS:.0f} s, "
        f"ratio {total / TARGET_SECONDS:.2f}); CPU {cpu:.1f} s (ratio {cpu / TARGET_SECONDS:.2f}), "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"  parse {parsed - started:.2f} s, schema {schema - parsed:.2f} s, set-up (1,000 nodes, 1,110 quotas, "
        f"10 workspaces) {set_up - schema:.2f} s, checkpoints {checkpoint_seconds:.2f} s"
    )
    cycles = sum(row[3] for row in rows)
    converging = sum(row[2] for row in rows)
    print(
        f"  {cycles} cycles after the bursts (each until one changes nothing): {converging:.2f} s, "
        f"{converging / cycles * 1000:.0f} ms a cycle with its executor tick"
    )
    print("  | burst | jobs | submit s | converge s | cycles |")
    print("  |---|---|---|---|---|")
    for number, (jobs, submit_s, converge_s, cycles) in enumerate(rows, start=1):
        print(f"  | {number} | {jobs} | {submit_s:.2f} | {converge_s:.2f} | {cycles} |")
    print(
        f"  at the end: {running} jobs running, {len(checkpoint.jobs) - running} pending; "
        f"allocated {sum(q['allocated'] for n, q in checkpoint.quotas.items() if '.' not in n)} GPUs of 8000"
    )


if __name__ == "__main__":
    main()
