"""Kueue's published scheduler baseline replayed on the engine alone, in simulated time.

    python benchmarks/engine_kueue_replay.py [--arrivals t0|kueue] [--fraction 1.0] [--cycle-seconds 0]

The workload of benchmarks/runtime_kueue_replay.py (30 nodes x 20 GPUs, 30 child quotas, 15,000
jobs of 1, 5 and 20 GPUs running 0.2, 0.5 and 1 s), but no database, executor or wall clock: a
cycle runs at each event (a job ends, a job arrives; at least `--cycle-seconds` apart), its
decisions are applied (engine.simulate.apply) and the clock jumps to the next event. So the waits
and the makespan measure the scheduling policy alone, the same on a quiet or a loaded machine,
where the real-time replay also measures how long each cycle takes (on a shared machine, most of
what it reports). Waits count from each job's arrival, as Kueue's do.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.runtime_workloads import (
    KUEUE_CLASSES,
    KUEUE_CREATION_INTERVAL_S,
    KUEUE_GPUS_PER_NODE,
    KUEUE_NODES,
    kueue_jobs,
    kueue_quotas,
)
from scheduling.engine import Admit, Evict, Job, Node, Quota, Snapshot, schedule
from scheduling.engine.simulate import apply

KUEUE_WAIT_S = {"large": 6.7, "medium": 76.8, "small": 215.0}
TARGET_WAIT_S = {"large": 6.7, "medium": 76.8, "small": 215.0}
TARGET_MAKESPAN_S = 75.0
FLOOR_S = 66.0


def size_of(name: str) -> str:
    return name.split(".")[-1].rsplit("-", 1)[0]


def arrival(name: str, arrivals: str) -> float:
    if arrivals == "t0":
        return 0.0
    return KUEUE_CREATION_INTERVAL_S[size_of(name)] * int(name.rsplit("-", 1)[1])


def engine_quotas() -> tuple[Quota, ...]:
    built: list[Quota] = []
    for parent in kueue_quotas():
        built.append(Quota(parent["name"], None, parent["gpus"], created_order=len(built)))
        for child in parent["children"]:
            built.append(
                Quota(child["name"], parent["name"], child["gpus"], limit=child["limit"], created_order=len(built))
            )
    return tuple(built)


# The engine learns a job's expected run time from Job.duration where it has that field (the
# reservations); the replay keeps the durations itself, so that it also runs on an older engine.
ENGINE_KNOWS_DURATIONS = "duration" in Job.__dataclass_fields__


def replay(arrivals: str, fraction: float, cycle_seconds: float) -> dict[str, float]:
    keep = {size: max(1, round(count * fraction)) for size, _, _, _, count in KUEUE_CLASSES}
    specs = [spec for spec in kueue_jobs() if int(spec["name"].rsplit("-", 1)[1]) < keep[size_of(spec["name"])]]
    specs.sort(key=lambda spec: arrival(spec["name"], arrivals))
    nodes = tuple(Node(f"node-{n}", KUEUE_GPUS_PER_NODE) for n in range(KUEUE_NODES))
    snapshot = Snapshot(nodes, engine_quotas(), (), 0.0)
    now = 0.0
    submitted = 0
    first_admit: dict[str, float] = {}
    duration: dict[str, float] = {}
    arrived: dict[str, float] = {}
    cycles = preemptions = 0
    last_end = 0.0
    started = time.process_time()
    while submitted < len(specs) or snapshot.jobs:
        new: list[Job] = []
        while submitted < len(specs) and arrival(specs[submitted]["name"], arrivals) <= now + 1e-9:
            spec = specs[submitted]
            arrived[spec["name"]] = arrival(spec["name"], arrivals)
            duration[spec["name"]] = spec["duration"]
            known = {"duration": spec["duration"]} if ENGINE_KNOWS_DURATIONS else {}
            new.append(
                Job(
                    spec["name"],
                    spec["quota"],
                    spec["gpus"],
                    priority=spec["priority"],
                    preemptible=True,
                    submitted_at=arrived[spec["name"]],
                    **known,
                )
            )
            submitted += 1
        snapshot = replace(snapshot, jobs=snapshot.jobs + tuple(new), now=now)
        result = schedule(snapshot)
        cycles += 1
        for decision in result.decisions:
            if isinstance(decision, Admit):
                first_admit.setdefault(decision.job_id, now)
            elif isinstance(decision, Evict) and decision.rule != "consolidation":
                preemptions += 1
        snapshot = apply(snapshot, result, now)
        ends = [
            job.started_at + duration[job.id]
            for job in snapshot.jobs
            if job.state == "running" and job.started_at is not None
        ]
        upcoming = [min(ends)] if ends else []
        if submitted < len(specs):
            upcoming.append(arrival(specs[submitted]["name"], arrivals))
        if not upcoming:
            break  # nothing runs and nothing arrives: what is left never starts
        now = max(min(upcoming), now + cycle_seconds)
        still = []
        for job in snapshot.jobs:
            end = (job.started_at or 0.0) + duration[job.id]
            if job.state == "running" and end <= now + 1e-9:
                last_end = max(last_end, end)
                continue
            still.append(job)
        snapshot = replace(snapshot, jobs=tuple(still))
    cpu = time.process_time() - started
    waits: dict[str, list[float]] = defaultdict(list)
    for name, at in first_admit.items():
        waits[size_of(name)].append(at - arrived[name])
    figures = {size: sum(values) / len(values) for size, values in waits.items()}
    figures["makespan"] = last_end
    work = sum(spec["gpus"] * spec["duration"] for spec in specs)
    print(
        f"Kueue baseline on the engine, simulated time ({arrivals} arrivals): {len(specs)} jobs, {work:.0f} "
        f"GPU-seconds, capacity floor {work / (KUEUE_NODES * KUEUE_GPUS_PER_NODE):.0f} s"
    )
    print(f"  makespan {last_end:.1f} s (target {TARGET_MAKESPAN_S:.0f} s: ratio {last_end / TARGET_MAKESPAN_S:.2f})")
    for size in ("large", "medium", "small"):
        print(
            f"  average wait to admission, {size}: {figures.get(size, float('nan')):.1f} s "
            f"(Kueue {KUEUE_WAIT_S[size]} s; {len(waits[size])} jobs)"
        )
    print(f"  {cycles} cycles, {preemptions} evictions, {cpu:.0f} s of CPU; unstarted: {len(specs) - len(first_admit)}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arrivals", choices=("t0", "kueue"), default="t0")
    parser.add_argument("--fraction", type=float, default=1.0, help="share of each class's jobs (quick runs)")
    parser.add_argument("--cycle-seconds", type=float, default=0.0, help="least simulated time between cycles")
    args = parser.parse_args()
    replay(args.arrivals, args.fraction, args.cycle_seconds)


if __name__ == "__main__":
    main()
