"""S3 split into resource pools (issue 24): CPU time of one engine cycle over the S3 cluster
cut into 4 pools of 250 nodes × 8 GPUs, S3's 10 roots shared out 3, 3, 2, 2 (each with its
10 × 10 children and grandchildren: 1,110 quotas in all) and a quarter of S3's jobs in each
pool (1,250 running + 2,500 pending, on the pool's own nodes and leaves), beside the one-pool
S3 cycle in the same run. Prints the medians (ms) of both and their ratio.

    .venv/bin/python benchmarks/engine_pools.py [--reps 9]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.engine import cluster, quota_tree
from scheduling.engine import Job, Node, Quota, Snapshot, schedule

POOLS = 4
ROOTS_PER_POOL = (3, 3, 2, 2)  # S3's 10 roots


def pooled_s3(pools: int = POOLS) -> Snapshot:
    """`pools` S3-shaped clusters, each a quarter of S3, as the pools of one snapshot."""
    nodes: list[Node] = []
    quotas: list[Quota] = []
    jobs: list[Job] = []
    for number in range(pools):
        part = cluster(5000 // pools, 10_000 // pools, 1000 // pools, seed=4 + number)
        pool = f"pool-{number}"
        # The pool's share of S3's tree; its jobs go to its leaves, as evenly as cluster() spread them.
        tree = quota_tree(ROOTS_PER_POOL[number], 10, 10, 8 * len(part.nodes))
        leaves = [quota.name for quota in tree if quota.name.count(".") == 2]
        leaf_of = {
            old: leaves[index % len(leaves)]
            for index, old in enumerate(sorted({quota.name for quota in part.quotas if quota.name.count(".") == 2}))
        }
        part = replace(part, quotas=tree, jobs=tuple(replace(job, quota=leaf_of[job.quota]) for job in part.jobs))

        def named(name: str, pool: str = pool) -> str:
            return f"{pool}/{name}"

        nodes.extend(replace(node, name=named(node.name), pool=pool) for node in part.nodes)
        quotas.extend(
            replace(
                quota,
                name=named(quota.name),
                parent=None if quota.parent is None else named(quota.parent),
                pool=pool,
                created_order=len(quotas) + order,
            )
            for order, quota in enumerate(part.quotas)
        )
        jobs.extend(
            replace(
                job,
                id=named(job.id),
                quota=named(job.quota),
                placements=tuple(replace(placed, node=named(placed.node)) for placed in job.placements),
            )
            for job in part.jobs
        )
    return Snapshot(tuple(nodes), tuple(quotas), tuple(jobs), 0.0)


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    reps = parser.parse_args().reps
    one_pool = median_cpu_ms(cluster(5000, 10_000, 1000), reps)
    four_pools = median_cpu_ms(pooled_s3(), reps)
    print(f"S3, one pool: {one_pool:.1f} ms; S3 as {POOLS} pools of 250 nodes: {four_pools:.1f} ms")
    print(f"ratio {four_pools / one_pool:.2f}; target 100 ms: {four_pools / 100:.2f}")


if __name__ == "__main__":
    main()
