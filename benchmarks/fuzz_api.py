"""The long fuzzing run of docs/reliability.md: schemathesis's CLI against a whole console.

    .venv/bin/python benchmarks/fuzz_api.py [--database sqlite|postgres] [--examples 10]

The console starts as `bin/run` would (web, worker, beat, Redis, demo data) inside a 3 GB
address-space cap. `st run` then calls every operation of /api/schema/ in the examples,
coverage and fuzzing phases, once with the platform admin's token and once with a developer's
(dave). It prints, per role: operations, cases, 5xx answers, schema failures by check, wall
time, and the peak resident memory of every console process.

Left out, as in tests/console/test_fuzz_api.py: the check that every schema-valid request
succeeds (domain rules refuse some with a 400, documented in docs/reliability.md), and the
two operations that sign the fuzzer itself out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.console_process import ROOT, fresh_postgres, running_console

SELF_DEFEATING = r"/api/v1/(auth/sign-out-everywhere/|users/)"
POSTGRES_SERVER = "postgres://postgres@127.0.0.1:5432/test"


def fuzz(url: str, token: str, examples: int, report: Path) -> dict[str, object]:
    command = [
        str(ROOT / ".venv/bin/st"),
        "run",
        f"{url}/api/schema/?format=json",
        "--header",
        f"Authorization: Token {token}",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(examples),
        "--workers",
        "1",
        "--exclude-checks",
        "positive_data_acceptance",
        "--exclude-path-regex",
        SELF_DEFEATING,
        "--seed",
        "1",
        "--report",
        "ndjson",
        "--report-ndjson-path",
        str(report),
        "--no-color",
    ]
    started = time.monotonic()
    finished = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - started
    report.with_suffix(".txt").write_text(finished.stdout + finished.stderr)
    statuses: Counter[int] = Counter()
    failures: Counter[str] = Counter()
    operations: set[str] = set()
    for line in report.read_text().splitlines():
        event = json.loads(line)
        for interaction in _interactions(event):
            statuses[interaction] += 1
        for check in _failed_checks(event):
            failures[check] += 1
        label = _operation(event)
        if label:
            operations.add(label)
    summary_lines = [line for line in finished.stdout.splitlines() if line.strip()][-25:]
    return {
        "exit": finished.returncode,
        "wall_s": round(wall, 1),
        "operations": len(operations),
        "cases": sum(statuses.values()),
        "server_errors": sum(count for status, count in statuses.items() if status >= 500),
        "statuses": dict(sorted(statuses.items())),
        "failures": dict(failures),
        "summary": summary_lines,
        "output": str(report.with_suffix(".txt")),
    }


def _walk(node: object) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(_walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_walk(value))
    return found


def _interactions(event: object) -> list[int]:
    return [
        int(response["status_code"])
        for item in _walk(event)
        if isinstance(response := item.get("response"), dict) and "status_code" in response and "request" in item
    ]


def _failed_checks(event: object) -> list[str]:
    return [
        str(item["name"])
        for item in _walk(event)
        if item.get("status") in ("failure", "FAILURE") and "name" in item and "failure_info" in item
    ]


def _operation(event: object) -> str | None:
    if isinstance(event, dict):
        for value in event.values():
            if isinstance(value, dict) and isinstance(value.get("label"), str):
                return str(value["label"])
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--examples", type=int, default=10, help="Hypothesis examples per operation and phase.")
    parser.add_argument("--port", type=int, default=8031)
    arguments = parser.parse_args()
    database_url = fresh_postgres(POSTGRES_SERVER, "console_fuzz") if arguments.database == "postgres" else ""
    redis_url = "redis://127.0.0.1:6379/5" if arguments.database == "postgres" else ""
    results: dict[str, object] = {}
    with running_console(port=arguments.port, database_url=database_url, redis_url=redis_url) as console:
        tokens = {"platform admin": console.token("admin"), "developer": console.token("dave")}
        reports = Path(tempfile.gettempdir()) / f"fuzz-reports-{arguments.database}"
        reports.mkdir(exist_ok=True)
        for role, token in tokens.items():
            results[role] = fuzz(console.url, token, arguments.examples, reports / f"{role.replace(' ', '-')}.ndjson")
        log = console.log()
        results["tracebacks_in_log"] = log.count("Traceback (most recent call last)")
        results["database_is_locked_in_log"] = log.count("database is locked")
        results["console_still_healthy"] = console.process.poll() is None
    results["peak_rss_mib"] = {key: round(rss / 2**20) for key, rss in sorted(console.peak_rss.items())}
    results["peak_rss_mib_max"] = round(console.peak_rss_mib())
    results["database"] = arguments.database
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
