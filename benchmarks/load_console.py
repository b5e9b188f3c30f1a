"""The load test of docs/reliability.md: concurrent submits, cancels, cycles and page reads.

    .venv/bin/python benchmarks/load_console.py --database sqlite --seconds 300 --clients 20
    .venv/bin/python benchmarks/load_console.py --database postgres --seconds 300 --clients 20

A whole console starts as `bin/run` would (web, worker, beat, Redis, demo data) inside a 3 GB
address-space cap: on a scratch SQLite file with the embedded Redis, or on a scratch PostgreSQL
database with the machine's Redis. `--clients` threads then, until the time is up, each pick at
random: submit a job (40 %), cancel one of their own (15 %), read the job list or the quota
list through the API (25 %), read the Jobs or Resource Quotas page signed in (15 %), or, as
the platform admin, run a cycle now (5 %). Beat and the triggered cycles run as usual.

It prints, per endpoint, requests, answers by status, p50 and p99; the jobs accepted per
second; the console log's "database is locked" and tracebacks; the peak memory of each
process; and, after the console has stopped, the invariants of
`scheduling.selectors.invariant_violations` on the database it left.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.console_process import DEMO_PASSWORDS, fresh_postgres, running_console

POSTGRES_SERVER = "postgres://postgres@127.0.0.1:5432/test"
# (user, workspace, quota) of the demo's developers who submit.
SUBMITTERS = [("dave", "workspace-b", "Quota1.1"), ("erin", "workspace-c", "Quota1.2")]


class Tally:
    """Latencies and statuses per endpoint, from every client thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latencies: dict[str, list[float]] = defaultdict(list)
        self.statuses: dict[str, Counter[str]] = defaultdict(Counter)
        self.accepted_jobs = 0

    def record(self, endpoint: str, started: float, status: str) -> None:
        elapsed_ms = (time.perf_counter() - started) * 1000
        with self.lock:
            self.latencies[endpoint].append(elapsed_ms)
            self.statuses[endpoint][status] += 1


def timed(
    tally: Tally, endpoint: str, session: requests.Session, method: str, url: str, **kwargs: object
) -> requests.Response | None:
    started = time.perf_counter()
    try:
        answer = session.request(method, url, timeout=60, **kwargs)  # type: ignore[arg-type]
    except requests.RequestException as error:
        tally.record(endpoint, started, type(error).__name__)
        return None
    tally.record(endpoint, started, str(answer.status_code))
    return answer


def signed_in_session(url: str, username: str) -> requests.Session:
    """A browser-like session: the sign-in form with its CSRF token, as a person signs in."""
    session = requests.Session()
    session.get(f"{url}/login/", timeout=30)
    answer = session.post(
        f"{url}/login/",
        data={
            "username": username,
            "password": DEMO_PASSWORDS[username],
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{url}/login/"},
        timeout=30,
    )
    answer.raise_for_status()
    return session


def client(url: str, tokens: dict[str, str], seed: int, deadline: float, tally: Tally) -> None:
    chooser = random.Random(seed)
    username, workspace, quota = SUBMITTERS[seed % len(SUBMITTERS)]
    api = requests.Session()
    api.headers["Authorization"] = f"Token {tokens[username]}"
    admin = requests.Session()
    admin.headers["Authorization"] = f"Token {tokens['admin']}"
    pages = signed_in_session(url, username)
    mine: list[int] = []
    sequence = 0
    while time.monotonic() < deadline:
        roll = chooser.random()
        if roll < 0.40:
            sequence += 1
            submission = {
                "name": f"load-{seed}-{sequence}",
                "workspace": workspace,
                "quota": quota,
                "kind": chooser.choice(["training", "inference", "notebook"]),
                "gpus": chooser.choice([0.5, 1, 2, 4, 8]),
                "replicas": chooser.choice([1, 1, 1, 2]),
                "duration": chooser.uniform(5, 60),
                "preemptible": chooser.random() < 0.7,
            }
            answer = timed(tally, "POST /api/v1/jobs/", api, "POST", f"{url}/api/v1/jobs/", json=submission)
            if answer is not None and answer.status_code == 201:
                mine.append(int(answer.json()["id"]))
                with tally.lock:
                    tally.accepted_jobs += 1
        elif roll < 0.55 and mine:
            job = mine.pop(chooser.randrange(len(mine)))
            timed(tally, "POST /api/v1/jobs/{id}/cancel/", api, "POST", f"{url}/api/v1/jobs/{job}/cancel/", json={})
        elif roll < 0.68:
            timed(tally, "GET /api/v1/jobs/", api, "GET", f"{url}/api/v1/jobs/?state=pending&limit=50")
        elif roll < 0.80:
            timed(tally, "GET /api/v1/quotas/", api, "GET", f"{url}/api/v1/quotas/")
        elif roll < 0.88:
            timed(tally, "GET /jobs/ (page)", pages, "GET", f"{url}/jobs/")
        elif roll < 0.95:
            timed(tally, "GET /quotas/ (page)", pages, "GET", f"{url}/quotas/")
        else:
            timed(tally, "POST /api/v1/scheduler/cycle/", admin, "POST", f"{url}/api/v1/scheduler/cycle/", json={})


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def check_invariants(database_url: str) -> dict[str, object]:
    """The invariants on the database the console left, read through the console's own selector."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django

    django.setup()
    from scheduling.models import CycleRecord, Job
    from scheduling.selectors import invariant_violations

    return {
        "cycles_recorded": CycleRecord.objects.count(),
        "jobs_by_state": dict(Counter(Job.objects.values_list("state", flat=True))),
        "violations": invariant_violations(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--port", type=int, default=8041)
    arguments = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="console-load-"))
    if arguments.database == "postgres":
        database_url = fresh_postgres(POSTGRES_SERVER, "console_load")
        redis_url = "redis://127.0.0.1:6379/6"
    else:
        database_url = f"sqlite:///{scratch / 'console.sqlite3'}"
        redis_url = ""
    tally = Tally()
    with running_console(port=arguments.port, database_url=database_url, redis_url=redis_url) as console:
        tokens = {name: console.token(name) for name in ("admin", "dave", "erin")}
        deadline = time.monotonic() + arguments.seconds
        threads = [
            threading.Thread(target=client, args=(console.url, tokens, seed, deadline, tally))
            for seed in range(arguments.clients)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        log = console.log()
    endpoints = {
        endpoint: {
            "requests": len(latencies),
            "statuses": dict(sorted(tally.statuses[endpoint].items())),
            "p50_ms": round(statistics.median(latencies), 1),
            "p99_ms": round(percentile(latencies, 0.99), 1),
            "max_ms": round(max(latencies), 1),
        }
        for endpoint, latencies in sorted(tally.latencies.items())
    }
    results = {
        "database": arguments.database,
        "clients": arguments.clients,
        "seconds": round(wall, 1),
        "requests": sum(len(latencies) for latencies in tally.latencies.values()),
        "jobs_accepted": tally.accepted_jobs,
        "jobs_accepted_per_s": round(tally.accepted_jobs / wall, 1),
        "server_errors": sum(
            count for counts in tally.statuses.values() for status, count in counts.items() if status.startswith("5")
        ),
        "database_is_locked_in_log": log.count("database is locked"),
        "tracebacks_in_log": log.count("Traceback (most recent call last)"),
        "peak_rss_mib": {key: round(rss / 2**20) for key, rss in sorted(console.peak_rss.items())},
        "endpoints": endpoints,
        "after": check_invariants(database_url),
    }
    print(json.dumps(results, indent=2))
    return 0 if not results["after"]["violations"] and not results["server_errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
