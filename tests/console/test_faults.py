"""Faults survived end to end: a whole console (launcher, web, worker, beat) is harmed under load.

The scenarios are benchmarks/faults.py's, shorter: a process killed with SIGKILL mid-burst, and
the external Redis stopped and started again. After each, every 201 answered is a stored job,
/healthz went red and came back green without a hand, a new job is scheduled, and
`check_invariants` finds nothing half-applied. They run on the database the suite runs on
(a scratch PostgreSQL database when DATABASE_URL names one).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from benchmarks.console_process import drop_postgres, fresh_postgres
from benchmarks.faults import scenario_kill, scenario_redis_outage
from console.embedded_redis import free_port

# Each starts a whole console: the slowest tests of the suite, kept to these three.
pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def scratch_database() -> Iterator[str]:
    """A fresh PostgreSQL database beside the suite's when it runs on PostgreSQL; else "" (SQLite)."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        yield ""
        return
    scratch = fresh_postgres(url, f"console_fault_{uuid.uuid4().hex[:8]}")
    yield scratch
    drop_postgres(scratch)


def assert_nothing_lost(result: dict[str, object]) -> None:
    assert result["accepted"], result
    assert result["accepted_but_not_stored"] == [], result
    # A job may be stored whose 201 never arrived (the web server died between commit and
    # answer); never more of them than the submissions that got no answer.
    answers = dict(result["answers"])  # type: ignore[call-overload]
    unanswered = sum(count for status, count in answers.items() if not status.isdigit())
    assert int(str(result["stored_without_a_201"])) <= unanswered, result
    assert result["invariants_hold"], result["invariants_output"]


@pytest.mark.parametrize("role", ["worker", "web"])
def test_a_process_killed_mid_burst_is_restarted_and_nothing_is_lost(role: str, scratch_database: str) -> None:
    result = scenario_kill(role, database_url=scratch_database, port=free_port(), threads=3, lead_s=2)
    assert_nothing_lost(result)
    assert result["restarted_pid"] != int(str(result["killed"]).split("pid ")[1].rstrip(")"))
    assert float(str(result["healthz_green_again_after_s"])) < 60


def test_the_external_redis_stopped_and_started_again_is_survived_without_a_hand(scratch_database: str) -> None:
    result = scenario_redis_outage(database_url=scratch_database, port=free_port(), outage_s=6)
    assert_nothing_lost(result)
    assert "redis" in str(result["healthz_during"]).lower(), result["healthz_during"]
    assert float(str(result["next_job_scheduled_after_s"])) < 60
