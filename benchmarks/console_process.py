"""A whole console (launcher: web, worker, beat, Redis, demo data) started for a reliability run.

It runs as a newcomer's `bin/run` does, on a scratch database, inside a memory cap that every
child inherits (`prlimit --as`), so a runaway allocation ends in a MemoryError inside the
console rather than in the machine's OOM killer. The peak resident memory of every process of
the console is sampled while it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
DEMO_PASSWORDS = {"admin": "admin-demo", "dave": "dave-demo", "erin": "erin-demo", "alice": "alice-demo"}


@dataclass
class RunningConsole:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    database_url: str
    peak_rss: dict[str, int] = field(default_factory=dict)

    def token(self, username: str) -> str:
        """A token for a demo user, through the API as a client gets one."""
        body = json.dumps({"username": username, "password": DEMO_PASSWORDS[username]}).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v1/auth/token/", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(json.load(answer)["token"])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def main_process(self, role: str) -> psutil.Process:
        """The launcher's own child for `role` (web, worker, beat): the one a crash takes down."""
        for child in psutil.Process(self.process.pid).children():
            if _role(child) == role:
                return child
        raise LookupError(f"no {role} process under the launcher")

    def health(self) -> tuple[int, dict[str, object]]:
        """/healthz's status code and body; (0, {}) when the web server does not answer."""
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read() or b"{}")
        except (urllib.error.URLError, OSError):
            return 0, {}

    def wait_until(self, healthy: bool, deadline_s: float) -> float:
        """Seconds until /healthz is (or is no longer) ok; raises after `deadline_s`."""
        started = time.monotonic()
        while time.monotonic() - started < deadline_s:
            if (self.health()[0] == 200) == healthy:
                return time.monotonic() - started
            time.sleep(0.2)
        raise TimeoutError(f"/healthz was not {'ok' if healthy else 'red'} within {deadline_s:.0f} s")

    def check_invariants(self) -> subprocess.CompletedProcess[str]:
        """`manage.py check_invariants` on the console's database, as an operator would run it."""
        return subprocess.run(
            [sys.executable, "manage.py", "check_invariants"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": self.database_url, "DJANGO_SETTINGS_MODULE": "console.settings"},
            capture_output=True,
            text=True,
            timeout=120,
        )

    def peak_rss_mib(self) -> float:
        return max(self.peak_rss.values(), default=0) / 2**20


def _role(process: psutil.Process) -> str:
    """web, worker, beat, redis or launcher, from the command line."""
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return "gone"
    for role, marker in (("web", "uvicorn"), ("beat", " beat"), ("worker", " worker"), ("redis", "redis-server")):
        if marker in command:
            return role
    return "launcher" if "console.launcher" in command else "other"


_REWALK_SECONDS = 10.0


def _sample_rss(root: int, peaks: dict[str, int], stop: threading.Event) -> None:
    # The family is walked every _REWALK_SECONDS, not at each sample: psutil finds children by
    # reading every process on the machine, thousands in a drain through agents (their jobs), and
    # that walk twice a second was most of the drain driver's CPU. The console's processes (web,
    # worker, beat) live as long as it does, so a late one is found within the interval.
    known: dict[int, tuple[str, psutil.Process]] = {}
    walked_at: float | None = None
    while not stop.is_set():
        if walked_at is None or time.monotonic() - walked_at >= _REWALK_SECONDS:
            walked_at = time.monotonic()
            try:
                parent = psutil.Process(root)
                family = [parent, *parent.children(recursive=True)]
            except psutil.Error:
                return
            known = {
                process.pid: known.get(process.pid) or (f"{_role(process)}:{process.pid}", process)
                for process in family
            }
        for key, process in known.values():
            try:
                rss = process.memory_info().rss
            except psutil.Error:
                continue
            peaks[key] = max(peaks.get(key, 0), rss)
        stop.wait(0.5)


def _wait_healthy(url: str, process: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the console exited with {process.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the console at {url} was not healthy within {deadline_s:.0f} s")


def fresh_postgres(server_url: str, name: str) -> str:
    """Drop and create database `name` on the server of `server_url`; its URL."""
    import psycopg

    base = server_url.rsplit("/", 1)[0]
    with psycopg.connect(f"{base}/postgres", autocommit=True) as server:
        server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        server.execute(f'CREATE DATABASE "{name}"')
    return f"{base}/{name}"


def drop_postgres(url: str) -> None:
    """Drop the database of `url` (a scratch one from `fresh_postgres`)."""
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as server:
        server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def running_console(
    *, port: int, database_url: str = "", redis_url: str = "", memory_cap_bytes: int | None = 3_000_000_000
) -> Iterator[RunningConsole]:
    """Start the console on `port` (a scratch SQLite file unless `database_url`), yield it, stop it.
    `memory_cap_bytes` None: no cap, for a console whose local agent starts CUDA programs (CUDA
    reserves far more address space than any cap that would still catch a runaway)."""
    scratch = Path(tempfile.mkdtemp(prefix="console-run-"))
    environment = {
        **os.environ,
        "PORT": str(port),
        # The launcher only sets a default; a test suite's own settings module must not leak in.
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": database_url or f"sqlite:///{scratch / 'console.sqlite3'}",
    }
    environment.pop("REDIS_URL", None)
    if redis_url:
        environment["REDIS_URL"] = redis_url
    log_path = scratch / "console.log"
    capped = ["prlimit", f"--as={memory_cap_bytes}", "--"] if memory_cap_bytes is not None else []
    command = [*capped, sys.executable, "-m", "console.launcher", "serve"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT)
    console = RunningConsole(
        url=f"http://127.0.0.1:{port}",
        process=process,
        log_path=log_path,
        database_url=environment["DATABASE_URL"],
    )
    stop_sampling = threading.Event()
    sampler = threading.Thread(target=_sample_rss, args=(process.pid, console.peak_rss, stop_sampling), daemon=True)
    sampler.start()
    try:
        _wait_healthy(console.url, process, deadline_s=120)
        yield console
    finally:
        stop_sampling.set()
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        kept = Path(tempfile.gettempdir()) / f"console-run-{port}.log"
        shutil.copy(log_path, kept)
        shutil.rmtree(scratch, ignore_errors=True)
