"""The gqc command line against a live console: sign in, submit with an estimate, list,
describe, cancel, read quotas and workspaces, and the exit codes scripts rely on."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from django.contrib.auth.models import AbstractUser
from pytest_django.live_server_helper import LiveServer

from gqc import client as exit_codes
from gqc.cli import cli
from scheduling.models import Job, JobState
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gqc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Runs `gqc ARGS…` in process (the HTTP is real) with its own config dir."""
    monkeypatch.setenv("GQC_CONFIG_DIR", str(tmp_path / "gqc"))
    runner = CliRunner()

    def run(*arguments: str, stdin: str | None = None) -> Result:
        return runner.invoke(cli, list(arguments), input=stdin, catch_exceptions=False)

    return run


@pytest.fixture
def dave(gqc: Any, live_server: LiveServer, pai_world: dict[str, AbstractUser]) -> Any:
    signed = gqc("login", live_server.url, "--username", "dave", "--password-stdin", stdin=PASSWORD + "\n")
    assert signed.exit_code == 0, signed.output
    return gqc


def test_login_keeps_the_token_readable_only_by_its_owner(dave: Any, tmp_path: Path) -> None:
    stored = tmp_path / "gqc" / "config.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text())["username"] == "dave"


def test_a_wrong_password_is_the_apis_sentence_and_no_token_is_kept(
    gqc: Any, live_server: LiveServer, pai_world: dict[str, AbstractUser], tmp_path: Path
) -> None:
    refused = gqc("login", live_server.url, "-u", "dave", "--password-stdin", stdin="wrong\n")
    assert refused.exit_code == exit_codes.EXIT_REFUSED
    assert "Unable to log in" in refused.output
    assert not (tmp_path / "gqc" / "config.json").exists()


def test_commands_before_login_say_how_to_sign_in(gqc: Any) -> None:
    listed = gqc("list")
    assert listed.exit_code == exit_codes.EXIT_SIGNED_OUT
    assert "gqc login URL" in listed.output


def test_dry_run_says_where_the_job_would_start_then_submit_runs_it(dave: Any) -> None:
    # train-b holds 24 of the 32 GPUs: 8 are free on one node.
    estimate = dave("submit", "probe", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "8", "--dry-run")
    assert estimate.exit_code == 0, estimate.output
    assert estimate.output.startswith("Starts now on gpu-")
    assert "GPUs 0,1,2,3,4,5,6,7" in estimate.output
    assert not Job.objects.filter(name="probe").exists()

    submitted = dave("submit", "probe", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "8")
    assert submitted.exit_code == 0, submitted.output
    job = Job.objects.get(name="probe")
    assert submitted.output == f"Job {job.pk} (probe) submitted: running on {job.placements.get().node.name}\n"


def test_a_job_beyond_the_free_gpus_waits_with_numbers_and_exit_code_10(dave: Any) -> None:
    # Two replicas of 8: each fits a node, and 16 are more than the 8 free (16 on one node could
    # never start: "Cannot start", below).
    estimate = dave(
        "submit", "big", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "8", "--replicas", "2", "--dry-run"
    )
    assert estimate.exit_code == exit_codes.EXIT_WAITS
    assert estimate.output.startswith("Waits: ")
    assert "16" in estimate.output


def test_a_refused_submission_prints_the_field_and_exits_1(dave: Any) -> None:
    refused = dave("submit", "x", "-w", "workspace-b", "-q", "Quota1.2", "--gpus", "1")
    assert refused.exit_code == exit_codes.EXIT_REFUSED
    assert refused.output.startswith("gqc: quota: ")


def test_list_describe_and_cancel_a_job(dave: Any) -> None:
    job = Job.objects.get(name="train-b")
    listed = dave("list")
    assert listed.exit_code == 0
    header, row = listed.output.splitlines()[:2]
    assert header.split() == ["ID", "NAME", "WORKSPACE", "QUOTA", "STATE", "GPUS", "POSITION", "REASON"]
    assert row.split()[:6] == [str(job.pk), "train-b", "workspace-b", "Quota1.1", "running", "24/24"]
    assert "OWNER" in dave("list", "-o", "wide").output

    described = dave("describe", str(job.pk))
    assert "State:" in described.output and "running on gpu-" in described.output
    assert "submitted" in described.output and "Events:" in described.output
    as_yaml = yaml.safe_load(dave("describe", str(job.pk), "-o", "yaml").output)
    assert as_yaml["name"] == "train-b" and as_yaml["events"][0]["kind"] == "submitted"

    cancelled = dave("cancel", str(job.pk))
    assert cancelled.exit_code == 0, cancelled.output
    job.refresh_from_db()
    assert job.state in {JobState.CANCELLED, JobState.RELEASING}


def test_a_job_the_user_may_not_see_is_not_found_exit_4(
    gqc: Any, live_server: LiveServer, pai_world: dict[str, AbstractUser]
) -> None:
    gqc("login", live_server.url, "-u", "olga", "--password-stdin", stdin=PASSWORD + "\n")
    job = Job.objects.get(name="train-b")
    hidden = gqc("describe", str(job.pk))
    assert hidden.exit_code == exit_codes.EXIT_NOT_FOUND
    assert gqc("cancel", str(job.pk)).exit_code == exit_codes.EXIT_NOT_FOUND
    assert json.loads(gqc("list", "-o", "json").output) == []


def test_quotas_and_workspaces_for_the_platform_admin(
    gqc: Any, live_server: LiveServer, pai_world: dict[str, AbstractUser]
) -> None:
    gqc("login", live_server.url, "-u", "platform-admin", "--password-stdin", stdin=PASSWORD + "\n")
    quotas = gqc("quotas")
    assert quotas.exit_code == 0
    rows = {line.split()[0]: line.split() for line in quotas.output.splitlines()[1:]}
    assert rows.keys() == {"Quota1", "Quota1.1", "Quota1.2"}
    assert rows["Quota1.1"][2] == "12"  # guaranteed
    assert [workspace["name"] for workspace in json.loads(gqc("workspaces", "-o", "json").output)] == ["workspace-b"]


def test_an_unreachable_console_exits_5(gqc: Any) -> None:
    unreachable = gqc("login", "http://127.0.0.1:9", "-u", "dave", "--password-stdin", stdin="x\n")
    assert unreachable.exit_code == exit_codes.EXIT_UNREACHABLE
    assert "cannot reach the console" in unreachable.output


def test_bin_gqc_is_the_program(tmp_path: Path) -> None:
    shown = subprocess.run(
        [str(ROOT / "bin" / "gqc"), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "GQC_CONFIG_DIR": str(tmp_path)},
        check=True,
        timeout=60,
    )
    for command in ("login", "submit", "list", "describe", "cancel", "quotas", "workspaces"):
        assert command in shown.stdout


def test_logs_prints_the_tail_the_agents_shipped(dave: Any) -> None:
    from django.utils import timezone

    from scheduling.models import JobLog

    job = Job.objects.get(name="train-b")
    assert dave("logs", str(job.pk)).output == ""  # a simulated node ships no log
    JobLog.objects.create(job=job, lines=["epoch 1", "epoch 2"], truncated=True, updated_at=timezone.now())
    printed = dave("logs", str(job.pk))
    assert printed.exit_code == 0, printed.output
    assert printed.stdout == "epoch 1\nepoch 2\n"
    assert "earlier lines dropped" in printed.stderr
    assert json.loads(dave("logs", str(job.pk), "-o", "json").stdout) == {
        "lines": ["epoch 1", "epoch 2"],
        "truncated": True,
    }
    assert dave("logs", "999999").exit_code == exit_codes.EXIT_NOT_FOUND


def test_describe_logs_and_cancel_take_a_jobs_name(dave: Any) -> None:
    job = Job.objects.get(name="train-b")
    described = dave("describe", "train-b")
    assert described.exit_code == 0, described.output
    assert described.stdout.startswith("Job:") and f"{job.pk} train-b" in described.stdout
    assert described.stderr == ""  # one job of that name: nothing to warn about
    assert dave("logs", "train-b").exit_code == 0

    unknown = dave("describe", "sweep-b")
    assert unknown.exit_code == exit_codes.EXIT_NOT_FOUND
    assert unknown.stderr == "gqc: no job named 'sweep-b' that you may see\n"

    cancelled = dave("cancel", "train-b")
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.startswith(f"Job {job.pk} (train-b): ")


def test_a_name_several_jobs_share_is_the_newest_and_stderr_says_so(dave: Any) -> None:
    first = dave("submit", "sweep-b", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "1", "--command", "true")
    second = dave("submit", "sweep-b", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "2")
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    older, newer = Job.objects.filter(name="sweep-b").order_by("submitted_at", "id")
    described = dave("describe", "sweep-b", "-o", "json")
    assert described.exit_code == 0, described.output
    assert json.loads(described.stdout)["id"] == newer.pk
    assert described.stderr == (
        f"gqc: 2 jobs you may see are named sweep-b; using the newest, {newer.pk} "
        f"(submitted {described.stderr.split('(submitted ')[1].split(')')[0]}). "
        f"The others: {older.pk}; give an id to pick one.\n"
    )
    assert dave("cancel", str(older.pk)).exit_code == 0  # an id still picks exactly that job
    older.refresh_from_db()
    newer.refresh_from_db()
    assert older.state in {JobState.CANCELLED, JobState.RELEASING} and newer.is_active


def test_a_name_of_a_job_the_user_may_not_see_is_not_found(
    gqc: Any, live_server: LiveServer, pai_world: dict[str, AbstractUser]
) -> None:
    gqc("login", live_server.url, "-u", "olga", "--password-stdin", stdin=PASSWORD + "\n")
    for command in ("describe", "logs", "cancel"):
        hidden = gqc(command, "train-b")
        assert hidden.exit_code == exit_codes.EXIT_NOT_FOUND, command
        assert "no job named 'train-b'" in hidden.stderr
    assert Job.objects.get(name="train-b").is_active


def test_submit_takes_an_environment_and_an_image_and_describe_shows_them(dave: Any) -> None:
    submitted = dave(
        "submit", "env-b", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "1",
        "--env", "EPOCHS=3", "-e", "QUERY=a=b", "--image", "registry.example/train:1",
    )  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    job = Job.objects.get(name="env-b")
    assert (job.environment, job.image) == ({"EPOCHS": "3", "QUERY": "a=b"}, "registry.example/train:1")
    described = dave("describe", "env-b").stdout
    assert "Image:" in described and "registry.example/train:1" in described
    lines = described.splitlines()
    at = next(number for number, line in enumerate(lines) if line.startswith("Environment:"))
    assert lines[at].endswith(" EPOCHS=3") and lines[at + 1].strip() == "QUERY=a=b"
    assert lines[at + 1].index("QUERY") == lines[at].index("EPOCHS")  # the value's column kept


def test_a_bad_env_is_refused_before_sending_and_a_reserved_one_by_the_console(dave: Any) -> None:
    malformed = dave("submit", "x", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "1", "--env", "EPOCHS")
    assert malformed.exit_code == exit_codes.EXIT_USAGE
    assert "'EPOCHS' is not NAME=VALUE" in malformed.output
    reserved = dave(
        "submit", "x", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "1", "--env", "CUDA_VISIBLE_DEVICES=0"
    )
    assert reserved.exit_code == exit_codes.EXIT_REFUSED
    assert reserved.stderr.startswith("gqc: environment: CUDA_VISIBLE_DEVICES is set by the node agent")
    assert not Job.objects.filter(name="x").exists()


def test_a_job_larger_than_any_node_cannot_start_and_list_finds_such_jobs(dave: Any) -> None:
    estimate = dave("submit", "wide", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "12", "--dry-run")
    assert estimate.exit_code == exit_codes.EXIT_WAITS
    sentence = "Cannot start: needs 12 GPUs on one node; the largest node has 8 (exceeds_cluster)"
    assert estimate.stdout.startswith(sentence)
    submitted = dave("submit", "wide", "-w", "workspace-b", "-q", "Quota1.1", "--gpus", "12")
    assert submitted.exit_code == 0, submitted.output
    assert "pending, cannot start: needs 12 GPUs on one node" in submitted.stdout
    listed = json.loads(dave("list", "--reason", "exceeds_cluster", "-o", "json").stdout)
    assert "wide" in [job["name"] for job in listed]
    assert {job["reason"]["code"] for job in listed} == {"exceeds_cluster"}
