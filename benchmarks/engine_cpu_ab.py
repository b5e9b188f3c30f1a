"""CPU time (process_time) of the S3 engine cycle (median of 25) and of fair share at 10,000 quotas
(median of 75), printed as two numbers: for A/B runs of two trees on a noisy machine.

    cd TREE && python /path/to/benchmarks/engine_cpu_ab.py     # measures the engine of TREE
"""

import gc
import statistics
import sys
import time

sys.path.insert(0, ".")  # the tree it is run from, so one copy of the script measures both
from benchmarks.engine import cluster, fair_share_case
from scheduling.engine import schedule
from scheduling.engine.fairshare import divide

s3 = cluster(5000, 10_000, 1000)
schedule(s3)
cycle = []
for _ in range(25):
    gc.collect()
    start = time.process_time()
    schedule(s3)
    cycle.append((time.process_time() - start) * 1000)
tree, request, capacity, fractional = fair_share_case()
share = []
for _ in range(75):
    start = time.process_time()
    divide(tree, request, capacity, fractional)
    share.append((time.process_time() - start) * 1000)
print(f"{statistics.median(cycle):.2f} {statistics.median(share):.3f}")
