"""`manage.py simulate`: the command line, its output, its exit status, and its private database."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from quotas.models import Quota
from scheduling.models import Job

ROOT = Path(__file__).resolve().parents[2]

TWO_TEAMS = """
name: two-teams
nodes:
  - {name: node, count: 2, gpus: 4}
quotas:
  - {name: team-a, gpus: 4}
  - {name: team-b, gpus: 4}
steps:
"""


def write(tmp_path: Path, steps: str, cluster: str = TWO_TEAMS) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(cluster + steps, encoding="utf-8")
    return path


def run_json(path: Path, blocker: Any) -> list[dict[str, Any]]:
    out = io.StringIO()
    with blocker.unblock():
        call_command("simulate", str(path), "--json", stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_has_exactly_the_keys_of_scenarios_md(tmp_path: Path, django_db_blocker: Any) -> None:
    path = write(
        tmp_path,
        """
  - submit: {name: fits, quota: team-a, kind: training, gpus: 4}
  - submit: {name: too-big, quota: team-b, kind: training, gpus: 8}
  - checkpoint: one
""",
    )
    (checkpoint,) = run_json(path, django_db_blocker)
    assert set(checkpoint) == {"checkpoint", "time", "quotas", "jobs"}
    assert (checkpoint["checkpoint"], checkpoint["time"]) == ("one", 0)
    assert set(checkpoint["quotas"]["team-a"]) == {
        "guaranteed",
        "fair_share",
        "allocated",
        "allocated_self",
        "running",
        "pending",
        "pool",  # SCENARIOS.md: each quota also carries its pool's name
    }
    assert checkpoint["quotas"]["team-a"]["guaranteed"] == 4
    assert checkpoint["quotas"]["team-a"]["pool"] == "default"
    fits = checkpoint["jobs"]["fits"]
    assert set(fits) == {"state", "quota", "gpus", "replicas", "nodes", "preemptions", "reason"}
    assert fits == {
        "state": "running",
        "quota": "team-a",
        "gpus": 4,
        "replicas": 1,
        "nodes": ["node-1"],
        "preemptions": 0,
        "reason": None,
    }
    too_big = checkpoint["jobs"]["too-big"]
    assert (too_big["state"], too_big["gpus"], too_big["nodes"]) == ("pending", 0, [])
    assert set(too_big["reason"]) == {"code", "message", "position"}
    assert too_big["reason"]["code"] == "exceeds_cluster"
    assert too_big["reason"]["position"] == 1


def test_count_submits_numbered_copies_and_advance_moves_the_clock(tmp_path: Path, django_db_blocker: Any) -> None:
    path = write(
        tmp_path,
        """
  - submit: {name: short, count: 3, quota: team-a, kind: training, gpus: 1, duration: 60}
  - checkpoint: started
  - advance: 59
  - checkpoint: almost
  - advance: 1
  - checkpoint: done
""",
    )
    started, almost, done = run_json(path, django_db_blocker)
    assert list(started["jobs"]) == ["short-1", "short-2", "short-3"]
    assert {job["state"] for job in started["jobs"].values()} == {"running"}
    assert (almost["time"], {job["state"] for job in almost["jobs"].values()}) == (59, {"running"})
    assert (done["time"], {job["state"] for job in done["jobs"].values()}) == (60, {"succeeded"})
    assert done["quotas"]["team-a"]["allocated"] == 0


def test_an_advance_plays_every_event_inside_it(tmp_path: Path, django_db_blocker: Any) -> None:
    """A job that starts when another ends, inside one advance, also runs its course."""
    path = write(
        tmp_path,
        """
  - submit: {name: first, quota: team-a, kind: training, gpus: 4, duration: 10}
  - submit: {name: second, quota: team-a, kind: training, gpus: 4, duration: 10}
  - checkpoint: start
  - advance: 100
  - checkpoint: end
""",
        cluster="nodes: [{name: node, gpus: 4}]\nquotas: [{name: team-a, gpus: 4}]\nsteps:\n",
    )
    start, end = run_json(path, django_db_blocker)
    assert {name: job["state"] for name, job in start["jobs"].items()} == {"first": "running", "second": "pending"}
    assert end["time"] == 100
    assert {name: job["state"] for name, job in end["jobs"].items()} == {"first": "succeeded", "second": "succeeded"}


def test_finish_fail_and_cancel_end_jobs(tmp_path: Path, django_db_blocker: Any) -> None:
    path = write(
        tmp_path,
        """
  - submit: {name: done, quota: team-a, kind: training, gpus: 1}
  - submit: {name: broken, quota: team-a, kind: training, gpus: 1}
  - submit: {name: unwanted, quota: team-b, kind: training, gpus: 1}
  - finish: done
  - fail: broken
  - cancel: unwanted
  - checkpoint: end
""",
    )
    (end,) = run_json(path, django_db_blocker)
    assert {name: job["state"] for name, job in end["jobs"].items()} == {
        "done": "succeeded",
        "broken": "failed",
        "unwanted": "cancelled",
    }


def test_human_readable_output_has_a_quota_table_and_a_job_table(tmp_path: Path, django_db_blocker: Any) -> None:
    path = write(
        tmp_path,
        """
  - submit: {name: train, quota: team-a, kind: training, gpus: 2}
  - checkpoint: first
  - checkpoint: second
""",
    )
    out = io.StringIO()
    with django_db_blocker.unblock():
        call_command("simulate", str(path), stdout=out)
    text = out.getvalue()
    assert text.count("== checkpoint") == 2
    assert "== checkpoint first at t=0s ==" in text
    lines = text.splitlines()
    quota_header = next(line for line in lines if line.startswith("quota"))
    assert quota_header.split() == [
        "quota",
        "guaranteed",
        "fair_share",
        "allocated",
        "allocated_self",
        "running",
        "pending",
    ]
    assert any(line.split()[:4] == ["team-a", "4", "2", "2"] for line in lines)
    assert any(line.split()[:6] == ["train", "running", "team-a", "2", "1", "node-1"] for line in lines)


SERVICE_REFUSALS = [
    pytest.param(
        """
nodes: [{name: node, gpus: 8}]
quotas:
  - name: parent
    gpus: 8
    children:
      - {name: child-1, gpus: 6}
      - {name: child-2, gpus: 4}
steps: []
""",
        "quota 'child-2': field 'gpus':",
        "8 − 6 = 2 left",
        id="child-guarantees-above-parent",
    ),
    pytest.param(
        TWO_TEAMS + "  - scale: {quota: team-a, gpus: 6}\n",
        "step 1 (scale): field 'gpus':",
        "",
        id="scale-up-without-room",
    ),
    pytest.param(
        TWO_TEAMS + "  - transfer: {from: team-a, to: team-b, gpus: 5}\n",
        "step 1 (transfer): field 'gpus':",
        "",
        id="transfer-more-than-held",
    ),
    pytest.param(
        TWO_TEAMS + "  - set: {quota: team-a, limit: 2}\n",
        "step 1 (set): field 'limit':",
        "",
        id="limit-below-guarantee",
    ),
    pytest.param(
        TWO_TEAMS + "  - submit: {name: j, quota: team-a, gpus: 1}\n  - advance: 5\n  - finish: j\n  - finish: j\n",
        "step 4 (finish): field 'state':",
        "",
        id="finish-a-finished-job",
    ),
    pytest.param(
        TWO_TEAMS + "  - submit:\n    - {name: a, quota: team-a, gpus: 1}\n    - {name: b, quota: team-b, gpus: 1.5}\n",
        "step 1 (submit): field 'gpus': job 'b' (2 of 2): a fraction of a GPU must be below 1",
        "got 1.5",
        id="bad-job-in-a-burst",
    ),
    pytest.param(
        f"nodes: [{{name: ok, gpus: 4}}, {{name: {'n' * 101}, gpus: 4}}]\nquotas: [{{name: a, gpus: 4}}]\nsteps: []\n",
        f"node '{'n' * 101}': field 'name': A node name has at most 100 characters",
        "has 101",
        id="node-name-too-long",
    ),
]


@pytest.mark.parametrize(("text", "prefix", "numbers"), SERVICE_REFUSALS)
def test_a_rule_the_services_enforce_stops_the_scenario_naming_the_step_and_field(
    tmp_path: Path, django_db_blocker: Any, text: str, prefix: str, numbers: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(CommandError) as refused, django_db_blocker.unblock():
        call_command("simulate", str(path), stdout=io.StringIO())
    assert refused.value.returncode == 2
    message = str(refused.value)
    assert message.startswith(prefix), message
    assert numbers in message
    assert "\n" not in message


def test_exit_status_2_and_one_line_on_the_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, "  - checkpoint: x\n  - advance: 1\n  - submit: {name: j, quota: Quota9, gpus: 1}\n")
    result = subprocess.run(
        [sys.executable, "manage.py", "simulate", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "console.test_settings"},
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip() == "step 3 (submit): field 'quota': unknown quota 'Quota9'"


@pytest.mark.django_db
def test_simulate_never_touches_the_connected_database(tmp_path: Path, django_db_blocker: Any) -> None:
    """The test database stands for the console's: simulate leaves it as it found it."""
    before = connection.settings_dict["NAME"]
    path = write(tmp_path, "  - submit: {name: j, quota: team-a, gpus: 1}\n  - checkpoint: x\n")
    (checkpoint,) = run_json(path, django_db_blocker)
    assert checkpoint["jobs"]["j"]["state"] == "running"
    assert connection.settings_dict["NAME"] == before
    assert not Quota.objects.exists()
    assert not Job.objects.exists()


def test_two_simulations_do_not_share_a_database(tmp_path: Path, django_db_blocker: Any) -> None:
    path = write(tmp_path, "  - submit: {name: j, quota: team-a, gpus: 1}\n  - checkpoint: x\n")
    first = run_json(path, django_db_blocker)
    second = run_json(path, django_db_blocker)  # the same names again: no "already exists"
    assert first == second


def test_simulate_needs_neither_the_consoles_database_nor_redis(tmp_path: Path) -> None:
    """Pointed at a database server and a Redis that do not answer, simulate still plays."""
    path = write(tmp_path, "  - submit: {name: j, quota: team-a, gpus: 1}\n  - checkpoint: x\n")
    result = subprocess.run(
        [sys.executable, "manage.py", "simulate", str(path), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "DATABASE_URL": "postgres://nobody@127.0.0.1:9/console",
            "REDIS_URL": "redis://127.0.0.1:9/0",
        },
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["jobs"]["j"]["state"] == "running"
