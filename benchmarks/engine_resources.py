"""CPU and memory as managed resources (issue 24): CPU time of the S3 engine cycle.

1. S3 as it is (GPUs only), this tree against a baseline tree (the commit before, checked out
   elsewhere), measured in one run: two worker processes, one per tree, each holding S3 built
   once, run one cycle in turn, so that both see the same load on a shared machine; the figure
   is the median of the per-pair ratios, beside each side's median.
2. S3 with CPU and memory managed (this tree): the same cluster with 96 cores and 768 GiB per
   node, every quota guaranteed 12 cores and 96 GiB per guaranteed GPU (roots limited to 1.5 ×
   their CPU guarantee), running jobs asking 12 cores and 96 GiB per GPU, pending jobs 8, 12 or
   16 cores per GPU (so that CPU, not GPUs, stops some of them). Median CPU ms of the cycle.

    .venv/bin/python benchmarks/engine_resources.py --baseline /path/to/baseline/tree [--reps 15]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

TREE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TREE))

from benchmarks.engine import cluster  # noqa: E402 (the tree's root is on the path first)
from scheduling.engine import Quota, Snapshot, schedule  # noqa: E402

CORES_PER_GPU = 12
GIB_PER_GPU = 96

# A worker: builds S3 from its own tree once, then times one cycle per line read, printing ms.
WORKER = """
import gc, sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.engine import cluster
from scheduling.engine import schedule
s3 = cluster(5000, 10_000, 1000)
schedule(s3)
print("ready", flush=True)
for _line in sys.stdin:
    gc.collect()
    start = time.process_time()
    schedule(s3)
    print((time.process_time() - start) * 1000, flush=True)
"""


def paired_gpu_only(baseline: Path, reps: int) -> tuple[float, float, float]:
    """(baseline median, this tree's median, median of this ÷ baseline per pair), CPU ms."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(tree)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for tree in (baseline, TREE)
    ]
    for worker in workers:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    pairs: list[tuple[float, float]] = []
    for rep in range(reps):
        times = [0.0, 0.0]
        # alternate who goes first, so that neither always runs right after the other
        for side in (0, 1) if rep % 2 == 0 else (1, 0):
            worker = workers[side]
            assert worker.stdin is not None and worker.stdout is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
            times[side] = float(worker.stdout.readline())
        pairs.append((times[0], times[1]))
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.close()
        worker.wait()
    before = statistics.median(b for b, _ in pairs)
    after = statistics.median(a for _, a in pairs)
    return before, after, statistics.median(a / b for b, a in pairs)


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


def median_cpu_ms(snapshot: Snapshot, reps: int) -> float:
    schedule(snapshot)
    times = []
    for _ in range(reps):
        gc.collect()
        start = time.process_time()
        schedule(snapshot)
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of the commit before (omit: skip the A/B)")
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    if args.baseline is not None:
        before, after, ratio = paired_gpu_only(args.baseline, args.reps)
        print(f"S3, GPUs only: baseline {before:.1f} ms, this tree {after:.1f} ms; paired ratio {ratio:.3f}")
    snapshot = managed_s3()
    assert all(isinstance(quota, Quota) and quota.cpu is not None for quota in snapshot.quotas)
    gpus_only = median_cpu_ms(cluster(5000, 10_000, 1000), args.reps)
    managed = median_cpu_ms(snapshot, args.reps)
    print(
        f"S3 with CPU and memory managed: {managed:.1f} ms median CPU (GPUs only, same run: {gpus_only:.1f} ms, "
        f"ratio {managed / gpus_only:.2f}); target 100 ms: {managed / 100:.2f}"
    )


if __name__ == "__main__":
    main()
