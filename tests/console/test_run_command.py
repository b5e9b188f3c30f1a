"""The run command on a fresh checkout: healthy, serving, supervised, and stopped cleanly.

These start the real launcher (embedded Redis, migrations, demo, uvicorn, Celery worker and
beat) from a copy of the working tree, as a newcomer would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from console.embedded_redis import free_port
from tests.checkout import fresh_checkout

ROOT = Path(__file__).resolve().parents[2]
HEALTHY_WITHIN_SECONDS = 180
RECOVERED_WITHIN_SECONDS = 60
pytestmark = pytest.mark.slow


@dataclass
class Launched:
    process: subprocess.Popen[bytes]
    port: int
    checkout: Path
    log: Path

    def output(self) -> str:
        # A file, not a pipe: nobody reads while it runs, and a full pipe would block the children.
        return self.log.read_text(errors="replace")


def _health(port: int) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=3) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, {}


def _launch(tmp_path: Path, **extra_env: str) -> Launched:
    """The launcher in a fresh copy of the working tree (no var/, no .venv), as `bin/run` starts it."""
    checkout = fresh_checkout(tmp_path / "checkout")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "PYTEST_XDIST_WORKER"}}
    env.update(
        {
            "PORT": str(port),
            "DJANGO_SETTINGS_MODULE": "console.settings",
            "PYTHONUNBUFFERED": "1",
            "HEARTBEAT_SECONDS": "2",
            "SCHEDULER_BEAT_SECONDS": "2",
            **extra_env,
        }
    )
    log = tmp_path / "launcher.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "console.launcher", "serve"],
            cwd=checkout,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Launched(process=process, port=port, checkout=checkout, log=log)


def _kill(launched: Launched) -> None:
    if launched.process.poll() is None:
        os.killpg(launched.process.pid, signal.SIGKILL)
        launched.process.wait()


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[Launched]:
    launched = _launch(tmp_path)
    try:
        yield launched
    finally:
        _kill(launched)


def _wait_healthy(launched: Launched) -> dict[str, str]:
    deadline = time.monotonic() + HEALTHY_WITHIN_SECONDS
    body: dict[str, str] = {}
    while time.monotonic() < deadline:
        if launched.process.poll() is not None:
            pytest.fail(f"the launcher exited with {launched.process.returncode}:\n{launched.output()[-4000:]}")
        status, body = _health(launched.port)
        if status == 200:
            return body
        time.sleep(0.5)
    pytest.fail(f"/healthz not ok within {HEALTHY_WITHIN_SECONDS} s: {body}")


def _descendants(pid: int) -> list[psutil.Process]:
    children: list[psutil.Process] = psutil.Process(pid).children(recursive=True)
    return children


def test_comes_up_healthy_serves_pages_and_stops_cleanly_on_ctrl_c(launched: Launched) -> None:
    body = _wait_healthy(launched)
    assert body == {"status": "ok", "database": "ok", "redis": "ok", "worker": "ok", "beat": "ok"}
    with urllib.request.urlopen(f"http://127.0.0.1:{launched.port}/login/", timeout=5) as page:
        assert b"Sign in" in page.read()
    with urllib.request.urlopen(f"http://127.0.0.1:{launched.port}/static/console/console.css", timeout=5) as css:
        assert css.status == 200
    assert (launched.checkout / "var" / "console.sqlite3").exists()
    children = _descendants(launched.process.pid)
    assert {"redis-server"} <= {child.name() for child in children}

    launched.process.send_signal(signal.SIGINT)
    assert launched.process.wait(timeout=60) == 0
    _gone, alive = psutil.wait_procs(children, timeout=10)
    assert alive == [], f"left running after Ctrl-C: {[p.cmdline() for p in alive]}"
    assert _health(launched.port)[0] == 0


def _supervised(launched: Launched, marker: str) -> psutil.Process:
    """The launcher's direct child whose command line names `marker` (uvicorn, worker, beat)."""
    children = psutil.Process(launched.process.pid).children()
    return next(child for child in children if marker in child.cmdline())


def _until_green_again(launched: Launched, part: str) -> list[str]:
    """Poll /healthz until it is 200 after having been red; return what it said of `part` meanwhile."""
    deadline = time.monotonic() + RECOVERED_WITHIN_SECONDS
    said: list[str] = []
    while time.monotonic() < deadline:
        assert launched.process.poll() is None, f"the launcher exited:\n{launched.output()[-4000:]}"
        status, body = _health(launched.port)
        if status == 0 and part != "web":
            pytest.fail(f"the web server stopped answering while the {part} was down")
        if status == 200 and said:
            return said
        if status != 200:
            said.append(body.get(part, "no answer"))
        time.sleep(0.2)
    pytest.fail(f"/healthz not ok again within {RECOVERED_WITHIN_SECONDS} s after the {part} died: {said[-3:]}")


def test_a_killed_worker_and_web_server_are_restarted_while_the_rest_keeps_serving(launched: Launched) -> None:
    _wait_healthy(launched)
    web, worker, beat = (_supervised(launched, marker) for marker in ("uvicorn", "worker", "beat"))
    pool = worker.children()

    os.kill(worker.pid, signal.SIGKILL)  # the worker's main process only, as `kill -9 PID` would
    said = _until_green_again(launched, "worker")

    assert any(state.startswith("missing: the process was killed by SIGKILL") for state in said), said
    restarted = _supervised(launched, "worker")
    assert restarted.pid != worker.pid
    assert _supervised(launched, "uvicorn").pid == web.pid
    assert _supervised(launched, "beat").pid == beat.pid
    _gone, alive = psutil.wait_procs(pool, timeout=10)
    assert alive == [], "the killed worker's pool outlived it"
    assert "console: the worker process was killed by SIGKILL after" in launched.output()
    assert f"console: the worker process was restarted (pid {restarted.pid})." in launched.output()

    os.kill(web.pid, signal.SIGKILL)
    _until_green_again(launched, "web")
    assert _supervised(launched, "uvicorn").pid != web.pid

    # The launcher itself killed outright: no chance to stop anyone, yet nothing may outlive it
    # (each child has its own session, so only the parent-death signal reaches them).
    children = _descendants(launched.process.pid)
    os.kill(launched.process.pid, signal.SIGKILL)
    launched.process.wait(timeout=10)
    _gone, alive = psutil.wait_procs(children, timeout=30)
    assert alive == [], f"left running after the launcher was killed: {[p.cmdline() for p in alive]}"


def test_unreachable_redis_stops_the_start_with_one_sentence(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{port}/0", "DJANGO_SETTINGS_MODULE": "console.settings"}
    result = subprocess.run(
        [sys.executable, "-m", "console.launcher", "serve"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"console: error: Redis at redis://127.0.0.1:{port}/0 does not answer")
    assert "Traceback" not in result.stderr


RUNNING_LINE = "(web, worker, beat running; Ctrl-C stops all)"


def _wait_for_running_line(launched: Launched) -> None:
    deadline = time.monotonic() + HEALTHY_WITHIN_SECONDS
    while time.monotonic() < deadline:
        if RUNNING_LINE in launched.output():
            return
        if launched.process.poll() is not None:
            pytest.fail(f"the launcher exited with {launched.process.returncode}:\n{launched.output()[-4000:]}")
        time.sleep(0.05)
    pytest.fail(f"the launcher never said it was running:\n{launched.output()[-4000:]}")


def test_says_running_only_when_healthz_is_ok_and_a_clean_start_logs_no_traceback(launched: Launched) -> None:
    assert not (launched.checkout / "var").exists()  # a fresh clone
    _wait_for_running_line(launched)
    # At once, no retry: "running" is said only after the launcher saw /healthz ok.
    status, body = _health(launched.port)
    assert (status, body.get("status")) == (200, "ok"), body
    time.sleep(3)  # beat's first cycles and the worker's first tasks, whose logs would show a traceback
    output = launched.output()
    assert "Traceback" not in output, output[-6000:]
    assert "corrupted" not in output
    assert "CRITICAL" not in output
    assert not list(launched.checkout.glob("**/celerybeat-schedule*")), "beat keeps its schedule in memory"


POSTGRES_ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def fresh_postgres_url() -> Iterator[str]:
    """A new, empty PostgreSQL database on the machine's server, dropped afterwards."""
    import uuid

    import psycopg

    name = f"console_launch_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as error:
        pytest.skip(f"PostgreSQL is not reachable at 127.0.0.1:5432: {error}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"postgres://postgres@127.0.0.1:5432/{name}"
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_fresh_clone_with_database_url_set_comes_up_healthy(tmp_path: Path, fresh_postgres_url: str) -> None:
    """bin/run on a fresh clone with DATABASE_URL: no var/ directory (only the SQLite default makes it)."""
    launched = _launch(tmp_path, DATABASE_URL=fresh_postgres_url)
    try:
        assert not (launched.checkout / "var").exists()
        _wait_for_running_line(launched)
        assert _health(launched.port) == (
            200,
            {"status": "ok", "database": "ok", "redis": "ok", "worker": "ok", "beat": "ok"},
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{launched.port}/login/", timeout=5) as page:
            assert b"Sign in" in page.read()
        assert "Traceback" not in launched.output()
        launched.process.send_signal(signal.SIGINT)
        assert launched.process.wait(timeout=60) == 0
    finally:
        _kill(launched)
