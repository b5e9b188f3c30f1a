"""Faults survived (issue 14): a process killed mid-burst, Redis gone for a while; nothing lost.

    .venv/bin/python benchmarks/faults.py [--database sqlite|postgres] [--outage 20]

Each scenario starts a whole console (`benchmarks/console_process.py`: web, worker, beat and
demo data, inside a 3 GB memory cap), submits jobs through the API from several threads, does
its harm, and then checks, as an operator would:

- every submission answered 201 is a stored job (read back through the API);
- /healthz was red while a process was missing and is green again, without a hand;
- a job submitted afterwards is scheduled (cycles run again);
- `manage.py check_invariants` finds nothing half-applied.

Scenarios: `kill -9` of the Celery worker mid-burst; `kill -9` of the web server during
submissions; the external Redis stopped for `--outage` seconds and started again. The figures
(downtime, answers by status) are printed as JSON; docs/reliability.md carries them.
`tests/console/test_faults.py` runs the same scenarios, shorter, in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.console_process import RunningConsole, fresh_postgres, running_console
from console.embedded_redis import EmbeddedRedis, free_port

POSTGRES_SERVER = "postgres://postgres@127.0.0.1:5432/test"


@dataclass
class Burst:
    """Submissions from a few threads until told to stop; what each got back."""

    console: RunningConsole
    token: str
    prefix: str
    answers: Counter[str] = field(default_factory=Counter)
    accepted: dict[str, int] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def submit_one(self, session: requests.Session, name: str) -> None:
        job: dict[str, str | int] = {
            "name": name,
            "workspace": "workspace-b",
            "quota": "Quota1.1",
            "kind": "training",
            "gpus": 1,
            "duration": 5,
        }
        try:
            answer = session.post(f"{self.console.url}/api/v1/jobs/", json=job, timeout=30)
        except requests.RequestException as error:
            with self.lock:
                self.answers[type(error).__name__] += 1
            time.sleep(0.1)
            return
        with self.lock:
            self.answers[str(answer.status_code)] += 1
            if answer.status_code == 201:
                self.accepted[name] = int(answer.json()["id"])

    def run(self, thread_number: int) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {self.token}"
        sequence = 0
        while not self.stop.is_set():
            sequence += 1
            self.submit_one(session, f"{self.prefix}-{thread_number}-{sequence}")
            time.sleep(0.05)

    def during(self, threads: int, harm: Callable[[], dict[str, object]]) -> dict[str, object]:
        workers = [threading.Thread(target=self.run, args=(number,)) for number in range(threads)]
        for worker in workers:
            worker.start()
        try:
            figures = harm()
        finally:
            self.stop.set()
            for worker in workers:
                worker.join()
        return figures


def stored_job_names(console: RunningConsole, admin_token: str, prefix: str) -> set[str]:
    """Every job whose name starts with `prefix`, read back through the API as the platform admin."""
    session = requests.Session()
    session.headers["Authorization"] = f"Token {admin_token}"
    names: set[str] = set()
    url: str | None = f"{console.url}/api/v1/jobs/?limit=1000"
    while url:
        page = session.get(url, timeout=30).json()
        names.update(job["name"] for job in page["results"] if job["name"].startswith(prefix))
        url = page["next"]
    return names


def scheduled_afterwards(console: RunningConsole, token: str, name: str, deadline_s: float = 60) -> float:
    """Seconds until a job submitted now is running or done: the cycles run again."""
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token}"
    job: dict[str, str | float] = {
        "name": name,
        "workspace": "workspace-b",
        "quota": "Quota1.1",
        "kind": "notebook",
        "gpus": 0.5,
    }
    started = time.monotonic()
    answer = session.post(f"{console.url}/api/v1/jobs/", json=job, timeout=30)
    answer.raise_for_status()
    job_id = answer.json()["id"]
    while time.monotonic() - started < deadline_s:
        state = session.get(f"{console.url}/api/v1/jobs/{job_id}/", timeout=30).json()["state"]
        if state != "pending":
            return time.monotonic() - started
        time.sleep(0.2)
    raise TimeoutError(f"{name} was still pending after {deadline_s:.0f} s")


def outcome(console: RunningConsole, burst: Burst, admin_token: str, figures: dict[str, object]) -> dict[str, object]:
    stored = stored_job_names(console, admin_token, burst.prefix)
    lost = sorted(set(burst.accepted) - stored)
    invariants = console.check_invariants()
    return {
        **figures,
        "answers": dict(sorted(burst.answers.items())),
        "accepted": len(burst.accepted),
        "accepted_but_not_stored": lost,
        "stored_without_a_201": len(stored - set(burst.accepted)),
        "invariants_hold": invariants.returncode == 0,
        "invariants_output": (invariants.stdout + invariants.stderr).strip()[-2000:],
    }


def kill_process(console: RunningConsole, role: str, burst: Burst, lead_s: float) -> dict[str, object]:
    """`kill -9` the launcher's `role` child after `lead_s` of the burst; figures of the recovery."""
    time.sleep(lead_s)
    victim = console.main_process(role)
    accepted_before = len(burst.accepted)
    victim.kill()
    killed_at = time.monotonic()
    red_after = console.wait_until(healthy=False, deadline_s=30)
    green_after = console.wait_until(healthy=True, deadline_s=90) + red_after
    time.sleep(2)  # submissions go on against the restarted process
    return {
        "killed": f"{role} (pid {victim.pid})",
        "accepted_before_the_kill": accepted_before,
        "healthz_red_within_s": round(red_after, 1),
        "healthz_green_again_after_s": round(green_after, 1),
        "restarted_pid": console.main_process(role).pid,
        "seconds_since_kill": round(time.monotonic() - killed_at, 1),
    }


def scenario_kill(role: str, *, database_url: str, port: int, threads: int = 4, lead_s: float = 3) -> dict[str, object]:
    with running_console(port=port, database_url=database_url) as console:
        admin, dave = console.token("admin"), console.token("dave")
        burst = Burst(console=console, token=dave, prefix=f"{role}-kill")
        figures = burst.during(threads, lambda: kill_process(console, role, burst, lead_s))
        figures["next_job_scheduled_after_s"] = round(scheduled_afterwards(console, dave, f"after-{role}-kill"), 1)
        return outcome(console, burst, admin, figures)


def scenario_redis_outage(*, database_url: str, port: int, outage_s: float, threads: int = 2) -> dict[str, object]:
    redis_port = free_port()
    redis = EmbeddedRedis(port=redis_port).start()
    try:
        with running_console(port=port, database_url=database_url, redis_url=redis.url) as console:
            admin, dave = console.token("admin"), console.token("dave")
            burst = Burst(console=console, token=dave, prefix="redis-outage")

            def outage() -> dict[str, object]:
                nonlocal redis
                time.sleep(2)
                redis.stop()
                stopped_at = time.monotonic()
                red_after = console.wait_until(healthy=False, deadline_s=30)
                health_during = console.health()[1]
                time.sleep(max(0.0, outage_s - (time.monotonic() - stopped_at)))
                redis = EmbeddedRedis(port=redis_port).start()
                started_at = time.monotonic()
                green_after = console.wait_until(healthy=True, deadline_s=120)
                time.sleep(2)
                return {
                    "outage_s": round(started_at - stopped_at, 1),
                    "healthz_red_within_s": round(red_after, 1),
                    "healthz_during": health_during,
                    "healthz_green_after_restart_s": round(green_after, 1),
                    "seconds_since_restart": round(time.monotonic() - started_at, 1),
                }

            figures = burst.during(threads, outage)
            figures["next_job_scheduled_after_s"] = round(scheduled_afterwards(console, dave, "after-outage"), 1)
            figures["tracebacks_in_log"] = console.log().count("Traceback (most recent call last)")
            return outcome(console, burst, admin, figures)
    finally:
        redis.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--outage", type=float, default=20.0, help="Seconds the external Redis stays down.")
    parser.add_argument("--port", type=int, default=8051)
    arguments = parser.parse_args()

    def database(name: str) -> str:
        return fresh_postgres(POSTGRES_SERVER, name) if arguments.database == "postgres" else ""

    results = {
        "database": arguments.database,
        "worker killed mid-burst": scenario_kill(
            "worker", database_url=database("console_fault_worker"), port=arguments.port
        ),
        "web server killed during submissions": scenario_kill(
            "web", database_url=database("console_fault_web"), port=arguments.port + 1
        ),
        "external Redis stopped": scenario_redis_outage(
            database_url=database("console_fault_redis"), port=arguments.port + 2, outage_s=arguments.outage
        ),
    }
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    raise SystemExit(main())
