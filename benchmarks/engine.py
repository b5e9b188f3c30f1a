"""Benchmark of the scheduling engine (issue 4 figures).

S3: 1,000 nodes x 8 GPUs, 1,110 quotas in 3 levels (10 roots x 10 children x 10 grandchildren),
5,000 running and 10,000 pending jobs of 1-8 GPUs. Prints a markdown report.

    python benchmarks/engine.py            # everything (about a minute)
    python benchmarks/engine.py --quick    # S3 cycle and fair share only
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.engine import Job, Node, Quota, ReplicaPlacement, Snapshot, schedule
from scheduling.engine.fairshare import (
    MILLI,
    QuotaTree,
    divide,
    fractional_nodes,
    requests_by_leaf,
    subtree_requests,
)

CYCLE_TARGET_MS = 100.0
FAIR_SHARE_TARGET_MS = 10.0
MEMORY_TARGET_MB = 200.0


def quota_tree(roots: int, children: int, grandchildren: int, capacity: int) -> tuple[Quota, ...]:
    quotas: list[Quota] = []
    root_g = capacity // roots
    child_g = root_g // children
    leaf_g = child_g // grandchildren
    for r in range(roots):
        root = f"r{r}"
        quotas.append(Quota(root, None, root_g, created_order=len(quotas)))
        for c in range(children):
            child = f"{root}.{c}"
            quotas.append(Quota(child, root, child_g, created_order=len(quotas)))
            for g in range(grandchildren):
                quotas.append(Quota(f"{child}.{g}", child, leaf_g, created_order=len(quotas)))
    return tuple(quotas)


def cluster(running: int, pending: int, node_count: int, seed: int = 4) -> Snapshot:
    """A pool with `running` placed jobs (first fit) and `pending` jobs of 1-8 GPUs."""
    rng = random.Random(seed)
    nodes = tuple(Node(f"node-{n:05d}", 8) for n in range(node_count))
    roots = 10
    per_root = max(1, round((node_count * 8 / 8) ** 0.0 * 10))
    quotas = quota_tree(roots, per_root, 10, node_count * 8)
    leaves = [q.name for q in quotas if q.name.count(".") == 2]
    free = [8] * node_count
    jobs: list[Job] = []
    cursor = 0
    # Running jobs are mostly small so that 5,000 of them fit in 8,000 GPUs.
    running_sizes = [1] * 15 + [2] * 3 + [4, 8]
    placed = 0
    attempts = 0
    while placed < running and attempts < running * 3:
        attempts += 1
        gpus = rng.choice(running_sizes)
        for step in range(node_count):
            n = (cursor + step) % node_count
            if free[n] >= gpus:
                first = 8 - free[n]
                free[n] -= gpus
                cursor = n
                break
        else:
            continue
        jobs.append(
            Job(
                f"run-{placed}",
                rng.choice(leaves),
                gpus,
                priority=rng.randint(1, 9),
                preemptible=rng.random() < 0.85,
                submitted_at=float(placed),
                state="running",
                started_at=float(placed),
                placements=(ReplicaPlacement(nodes[n].name, tuple(range(first, first + gpus))),),
            )
        )
        placed += 1
    for p in range(pending):
        jobs.append(
            Job(
                f"pend-{p}",
                rng.choice(leaves),
                rng.randint(1, 8),
                priority=rng.randint(1, 9),
                preemptible=rng.random() < 0.9,
                submitted_at=float(running + p),
            )
        )
    return Snapshot(nodes, quotas, tuple(jobs), now=1e9)


CPU_TIMES: list[float] = []


def median_ms(action: Callable[[], object], reps: int) -> tuple[float, list[float]]:
    """Median wall time (perf_counter); the CPU time of the same runs lands in CPU_TIMES."""
    times = []
    CPU_TIMES.clear()
    for _ in range(reps):
        gc.collect()
        start = time.perf_counter()
        cpu = time.process_time()
        action()
        CPU_TIMES.append((time.process_time() - cpu) * 1000)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), times


def fair_share_case() -> tuple[QuotaTree, list[int], int, list[bool]]:
    """10,000 quotas: 10 roots x 9 children x 110 grandchildren, each leaf asking."""
    quotas = quota_tree(10, 9, 110, 80_000)
    rng = random.Random(7)
    leaves = [q.name for q in quotas if q.name.count(".") == 2]
    jobs = [Job(f"j{n}", name, rng.randint(1, 8), replicas=rng.randint(1, 4)) for n, name in enumerate(leaves)]
    tree = QuotaTree(quotas, ())
    request = subtree_requests(tree, requests_by_leaf(tree, jobs))
    return tree, request, 60_000 * MILLI, fractional_nodes(tree, jobs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()

    print(f"Python {platform.python_version()} on {platform.machine()}, {platform.system()}")
    s3 = cluster(5000, 10_000, 1000)
    result = schedule(s3)
    kinds: dict[str, int] = {}
    for decision in result.decisions:
        kinds[decision.kind] = kinds.get(decision.kind, 0) + 1
    print(f"S3: {len(s3.nodes)} nodes, {len(s3.quotas)} quotas, {len(s3.jobs)} jobs; decisions {kinds}")

    cycle_ms, cycle_all = median_ms(lambda: schedule(s3), args.reps)
    cycle_cpu = statistics.median(CPU_TIMES)
    tree, request, capacity, fractional = fair_share_case()
    share_ms, _ = median_ms(lambda: divide(tree, request, capacity, fractional), args.reps * 3)
    share_cpu = statistics.median(CPU_TIMES)
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"

    gc.collect()
    tracemalloc.start()
    schedule(s3)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_mb = peak / 2**20

    print()
    print("| figure | measured | target | ratio (measured / target) |")
    print("|---|---|---|---|")
    print(
        f"| S3 full cycle, median of {args.reps} | {cycle_ms:.1f} ms | {CYCLE_TARGET_MS:.0f} ms "
        f"| {cycle_ms / CYCLE_TARGET_MS:.2f} |"
    )
    print(
        f"| fair share alone, {len(tree)} quotas | {share_ms:.2f} ms | {FAIR_SHARE_TARGET_MS:.0f} ms "
        f"| {share_ms / FAIR_SHARE_TARGET_MS:.2f} |"
    )
    print(
        f"| S3 full cycle, CPU time (process_time), median | {cycle_cpu:.1f} ms | {CYCLE_TARGET_MS:.0f} ms "
        f"| {cycle_cpu / CYCLE_TARGET_MS:.2f} |"
    )
    print(
        f"| fair share alone, CPU time, median | {share_cpu:.2f} ms | {FAIR_SHARE_TARGET_MS:.0f} ms "
        f"| {share_cpu / FAIR_SHARE_TARGET_MS:.2f} |"
    )
    print(
        f"| S3 cycle peak memory (tracemalloc) | {peak_mb:.1f} MB | {MEMORY_TARGET_MB:.0f} MB "
        f"| {peak_mb / MEMORY_TARGET_MB:.2f} |"
    )
    print(f"\nS3 cycle runs (ms): {', '.join(f'{t:.1f}' for t in cycle_all)}; load average {load}")
    if args.quick:
        return

    print("\n| jobs (running + pending) | nodes | cycle median wall (ms) | CPU (ms) | CPU ms per 1k jobs |")
    print("|---|---|---|---|---|")
    for total in (1_000, 3_000, 10_000, 15_000, 30_000, 100_000):
        running = total // 3
        snapshot = cluster(running, total - running, max(1, total // 15))
        ms, _ = median_ms(partial(schedule, snapshot), 3 if total < 100_000 else 1)
        cpu = statistics.median(CPU_TIMES)
        print(f"| {total:,} | {len(snapshot.nodes):,} | {ms:.1f} | {cpu:.1f} | {cpu / total * 1000:.2f} |")


if __name__ == "__main__":
    main()
