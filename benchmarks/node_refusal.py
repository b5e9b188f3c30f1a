"""A node of 10^9 GPUs is refused fast, in the API and in the service (issue 17: under 50 ms).

    .venv/bin/python benchmarks/node_refusal.py [--tries 200]

Before the bounds, `create_node(gpus=10**9)` built a billion device rows in memory and took
the web process to 23.7 GB. On a scratch SQLite database, this POSTs `{"gpus": 1000000000}` to
/api/v1/nodes/ as a platform admin (DRF's whole stack, token auth) and calls the service
directly, `--tries` times each, and prints the median, p99 and worst latency, and the most
memory Python allocated during a refusal (tracemalloc).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_MS = 50.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=200)
    arguments = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="node-refusal-"))
    os.environ["DATABASE_URL"] = f"sqlite:///{scratch / 'console.sqlite3'}"
    os.environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
    os.environ.setdefault("LOG_LEVEL", "ERROR")
    import django

    django.setup()
    import logging

    # Each refusal is a 400 that Django logs as a warning; thousands of lines would hide the figures.
    logging.getLogger("django.request").setLevel(logging.ERROR)
    from django.contrib.auth import get_user_model
    from django.core.exceptions import ValidationError
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from quotas import services

    call_command("migrate", verbosity=0)
    admin = get_user_model().objects.create_superuser("bench-admin", password="bench-admin-password")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=admin).key}")

    def api_refusal() -> None:
        answer = client.post("/api/v1/nodes/", {"name": "huge", "gpus": 10**9}, format="json")
        assert answer.status_code == 400, answer.content

    def service_refusal() -> None:
        try:
            services.create_node(actor=admin, name="huge", gpus=10**9)
        except ValidationError:
            return
        raise AssertionError("a node of 10^9 GPUs was created")

    results: dict[str, object] = {}
    for label, refuse in (("POST /api/v1/nodes/", api_refusal), ("quotas.services.create_node", service_refusal)):
        refuse()  # warm: imports, the first query
        latencies = []
        tracemalloc.start()
        for _ in range(arguments.tries):
            started = time.perf_counter()
            refuse()
            latencies.append((time.perf_counter() - started) * 1000)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        latencies.sort()
        results[label] = {
            "tries": arguments.tries,
            "median_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(latencies[int(0.99 * (len(latencies) - 1))], 2),
            "max_ms": round(latencies[-1], 2),
            "ratio_to_target_p99": round(latencies[int(0.99 * (len(latencies) - 1))] / TARGET_MS, 3),
            "peak_python_allocation_kib": round(peak / 1024),
        }
    print(json.dumps({"target_ms": TARGET_MS, **results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
