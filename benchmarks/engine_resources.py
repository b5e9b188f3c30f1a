"""CPU and memory as managed resources (issue 24): CPU time of the S3 engine cycle.

Two S3 cycles, each timed in worker processes that build the snapshot once and run one cycle
per request (CPU time, process_time, after a gc.collect), first with the collector on, then
paused as `scheduling.cycle` runs the engine (scheduling/gc_pauses.py: disabled for the cycle,
a young collection right after it counted in):

1. S3 as it is (GPUs only): 1,000 nodes x 8 GPUs, 1,110 quotas, 15,000 jobs (benchmarks/engine.py).
2. S3 with CPU and memory managed: the same cluster with 96 cores and 768 GiB per node, every
   quota guaranteed 12 cores and 96 GiB per guaranteed GPU (roots limited to 1.5 x their CPU
   guarantee), running jobs asking 12 cores and 96 GiB per GPU, pending jobs 8, 12 or 16 cores
   per GPU (so that CPU, not GPUs, stops some of them).

With --baseline (a checkout of an earlier commit: main before the change), each figure is an
A/B in one run: one worker per tree, running a cycle in turn (who goes first alternates), so
that both see the same load on a shared machine; the figure is the median of the per-pair
ratios (this tree / baseline) beside each side's median. Snapshot 2 is built by this file's
`managed_s3` in both workers, from each tree's own types. Without --baseline, this tree only.

    .venv/bin/python benchmarks/engine_resources.py --baseline /path/to/baseline/tree [--reps 15]
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TREE))

from benchmarks.engine import cluster  # noqa: E402 (the tree's root is on the path first)
from scheduling.engine import Snapshot  # noqa: E402

CORES_PER_GPU = 12
GIB_PER_GPU = 96
TARGET_MS = 100.0

# A worker: imports the engine of the tree in argv[1], builds one S3 snapshot (argv[3]: "gpus",
# or "managed" by this file, argv[2], run over that tree's modules), then times one cycle per
# line read, printing CPU ms.
WORKER = """
import gc, importlib.util, sys, time
tree, bench, case = sys.argv[1:4]
sys.path.insert(0, tree)
from benchmarks.engine import cluster
from scheduling.engine import schedule
if case == "managed":
    # this file, run over the worker tree's modules (already imported: they stay that tree's)
    spec = importlib.util.spec_from_file_location("resources_benchmark", bench)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path.remove(str(module.TREE))  # it put its own tree first: later imports stay this tree's
    assert sys.modules["scheduling"].__path__[0].startswith(tree)
    snapshot = module.managed_s3()
else:
    snapshot = cluster(5000, 10_000, 1000)
schedule(snapshot)
print("ready", flush=True)
for line in sys.stdin:
    gc.collect()
    start = time.process_time()
    if line.strip() == "paused":
        # as scheduling.cycle runs the engine (scheduling/gc_pauses.py): the collector paused,
        # and what the cycle left collected right after it, counted in (a young pass)
        gc.disable()
        try:
            schedule(snapshot)
        finally:
            gc.enable()
        gc.collect(0)
    else:
        schedule(snapshot)
    print((time.process_time() - start) * 1000, flush=True)
"""


def start_worker(tree: Path, case: str) -> subprocess.Popen[str]:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(tree), str(Path(__file__).resolve()), case],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    return worker


def cycle_ms(worker: subprocess.Popen[str], mode: str = "go") -> float:
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write(f"{mode}\n")
    worker.stdin.flush()
    return float(worker.stdout.readline())


def stop(workers: list[subprocess.Popen[str]]) -> None:
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()


Figures = tuple[float, float, float]


def paired(baseline: Path, case: str, reps: int) -> tuple[Figures, Figures]:
    """(baseline median, this tree's median, median of this ÷ baseline per pair), CPU ms: with the
    collector on, then paused as the worker runs the engine."""
    workers = [start_worker(tree, case) for tree in (baseline, TREE)]
    figures = []
    for mode in ("go", "paused"):
        pairs: list[tuple[float, float]] = []
        for rep in range(reps):
            times = [0.0, 0.0]
            # alternate who goes first, so that neither always runs right after the other
            for side in (0, 1) if rep % 2 == 0 else (1, 0):
                times[side] = cycle_ms(workers[side], mode)
            pairs.append((times[0], times[1]))
        before = statistics.median(b for b, _ in pairs)
        after = statistics.median(a for _, a in pairs)
        figures.append((before, after, statistics.median(a / b for b, a in pairs)))
    stop(workers)
    return figures[0], figures[1]


def solo(case: str, reps: int) -> float:
    """This tree's median CPU ms."""
    worker = start_worker(TREE, case)
    times = [cycle_ms(worker) for _ in range(reps)]
    stop([worker])
    return statistics.median(times)


def managed_s3() -> Snapshot:
    base = cluster(5000, 10_000, 1000)
    rng = random.Random(24)
    nodes = tuple(replace(node, cpu=8 * CORES_PER_GPU, memory_gib=8 * GIB_PER_GPU) for node in base.nodes)
    quotas = tuple(
        replace(
            quota,
            cpu=quota.gpus * CORES_PER_GPU,
            memory_gib=quota.gpus * GIB_PER_GPU,
            cpu_limit=quota.gpus * CORES_PER_GPU * 1.5 if quota.parent is None else None,
        )
        for quota in base.quotas
    )
    jobs = tuple(
        replace(
            job,
            # at most a node's 96 cores
            cpu=min(
                8 * CORES_PER_GPU, job.gpus * (CORES_PER_GPU if job.state == "running" else rng.choice((8, 12, 16)))
            ),
            memory_gib=job.gpus * GIB_PER_GPU,
        )
        for job in base.jobs
    )
    return Snapshot(nodes, quotas, jobs, base.now)


def load() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of the commit before (omit: this tree only)")
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    print(f"load average before: {load()}")
    if args.baseline is not None:
        gpus_both = paired(args.baseline, "gpus", args.reps)
        managed_both = paired(args.baseline, "managed", args.reps)
        for label, gpus, managed in zip(
            ("collector on", "collector paused, as scheduling.cycle runs the engine"),
            gpus_both,
            managed_both,
            strict=True,
        ):
            print(f"[{label}]")
            print(f"S3, GPUs only: baseline {gpus[0]:.1f} ms, this tree {gpus[1]:.1f} ms; paired ratio {gpus[2]:.3f}")
            print(
                f"S3 with CPU and memory managed: baseline {managed[0]:.1f} ms, this tree {managed[1]:.1f} ms; "
                f"paired ratio {managed[2]:.3f}; this tree / GPUs only {managed[1] / gpus[1]:.2f}; "
                f"this tree / target {TARGET_MS:.0f} ms: {managed[1] / TARGET_MS:.2f}"
            )
    else:
        gpus_only = solo("gpus", args.reps)
        alone = solo("managed", args.reps)
        print(
            f"S3 with CPU and memory managed: {alone:.1f} ms median CPU (GPUs only, same run: {gpus_only:.1f} ms, "
            f"ratio {alone / gpus_only:.2f}); target {TARGET_MS:.0f} ms: {alone / TARGET_MS:.2f}"
        )
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
