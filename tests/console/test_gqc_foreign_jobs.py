"""gqc never prints another team's job name (issue 28), against a live console: on one 8-GPU node
workspace-c's urgent-c evicted workspace-b's train-b; wanda, workspace-b's admin, reads the
eviction in `gqc describe` and a dry run that would preempt urgent-c, both naming it by quota,
workspace and GPUs only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pytest_django.live_server_helper import LiveServer

from gqc.cli import cli
from tests.conftest import PASSWORD
from tests.scheduling.test_foreign_jobs_browser import FOREIGN, two_teams  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def wanda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, live_server: LiveServer, request: pytest.FixtureRequest
) -> Any:
    """Runs `gqc ARGS…` in process (the HTTP is real), signed in as wanda, in the browser test's
    world of two teams."""
    request.getfixturevalue("two_teams")
    monkeypatch.setenv("GQC_CONFIG_DIR", str(tmp_path / "gqc"))
    runner = CliRunner()

    def run(*arguments: str, stdin: str | None = None) -> Result:
        return runner.invoke(cli, list(arguments), input=stdin, catch_exceptions=False)

    signed = run("login", live_server.url, "--username", "wanda", "--password-stdin", stdin=PASSWORD + "\n")
    assert signed.exit_code == 0, signed.output
    return run


def test_describe_names_the_foreign_job_an_eviction_made_room_for_by_quota_and_workspace(wanda: Any) -> None:
    described = wanda("describe", "train-b")
    assert described.exit_code == 0, described.output
    evicted = next(line for line in described.output.splitlines() if " evicted " in line)
    assert "child_preemption  8 GPUs of Quota1 (workspace-c)" in evicted
    assert FOREIGN not in described.output


def test_a_dry_run_names_the_foreign_job_it_would_preempt_by_quota_and_workspace(wanda: Any) -> None:
    arguments = ("submit", "train-urgent", "-w", "workspace-b", "-q", "Quota1", "--gpus", "8", "--priority", "9")
    estimated = wanda(*arguments, "--dry-run")
    assert estimated.exit_code == 0, estimated.output
    assert estimated.output.strip() == (
        "Starts now on gpu-1, GPUs 0,1,2,3,4,5,6,7 (evicting 1 job: 8 GPUs of Quota1 (workspace-c))."
    )
    answer = json.loads(wanda(*arguments, "--dry-run", "-o", "json").output)
    (victim,) = answer["evict"]
    assert (victim["job"], victim["id"], victim["workspace"]) == (None, None, "workspace-c")
    assert FOREIGN not in json.dumps(answer)
