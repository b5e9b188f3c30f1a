"""simulate of S3 arriving in 10 bursts of 1,000 jobs (target: 10 s in all, issue 26; 30 s before).

    python benchmarks/runtime_simulate_s3.py [--bursts 10] [--per-burst 1000]

Writes the scenario as a YAML file and plays it exactly as `manage.py simulate FILE --json`
does (throwaway in-memory database, simulated clock, the console's services and cycle),
timing each phase: parse, cluster set-up, each burst's submits and its convergence, and the
checkpoint read-out.
"""

from __future__ import annotations

import argparse
import io
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

TARGET_SECONDS = 10.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bursts", type=int, default=10)
    parser.add_argument("--per-burst", type=int, default=1000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s3-bursts.yaml"
        path.write_text(yaml.safe_dump(s3_burst_scenario(bursts=args.bursts, per_burst=args.per_burst)))
        started = time.perf_counter()
        cpu_started = time.process_time()
        scenario = load_scenario(path)
        parsed = time.perf_counter()
        with throwaway_database():
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
                        io.StringIO().write(str(checkpoint.as_json()))
                        checkpoint_seconds += time.perf_counter() - before
        finished = time.perf_counter()
        cpu = time.process_time() - cpu_started

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
