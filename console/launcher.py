"""The process launcher behind the README's two commands.

`python -m console.launcher serve` starts the whole console: the embedded Redis (unless
REDIS_URL is set), migrations, the demo data, then the ASGI web server, a Celery worker and
Celery beat, which it supervises: if one dies it says which and stops the rest; Ctrl-C
stops everything, Redis last.

`python -m console.launcher test [pytest args]` runs the test suite against the embedded
Redis (unless REDIS_URL is set), failing when no test ran.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import redis

from console.config import ConfigError
from console.embedded_redis import EmbeddedRedis, EmbeddedRedisError

BASE_DIR = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_SECONDS = 15.0


class LaunchError(Exception):
    """The console cannot start; the message is one sentence for a person."""


def _say(message: str) -> None:
    print(f"console: {message}", file=sys.stderr, flush=True)


def _check_redis(url: str) -> None:
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.RedisError, ValueError) as error:
        raise LaunchError(f"Redis at {url} does not answer ({error}); start it or unset REDIS_URL.") from None


def _prepare_redis() -> EmbeddedRedis | None:
    """Start the embedded Redis unless the user named one; either way REDIS_URL is set after."""
    url = os.environ.get("REDIS_URL", "")
    if url:
        from console.config import redis_url

        _check_redis(redis_url(url))
        return None
    try:
        embedded = EmbeddedRedis().start()
    except EmbeddedRedisError as error:
        raise LaunchError(str(error)) from None
    os.environ["REDIS_URL"] = embedded.url
    _say(f"embedded Redis at {embedded.url}")
    return embedded


def _prepare_database() -> None:
    """Migrate, collect static files when needed, load the demo into an empty database."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connections
    from django.db.utils import OperationalError

    django.setup()
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        Path(settings.DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    try:
        call_command("migrate", interactive=False, verbosity=0)
    except OperationalError as error:
        raise LaunchError(f"the database does not answer ({error}); check DATABASE_URL.") from None
    if not settings.DEBUG:
        call_command("collectstatic", interactive=False, verbosity=0)
    if settings.CONSOLE_DEMO:
        call_command("load_demo", if_empty=True)
    connections.close_all()  # children open their own connections


def _process_table(port: int, host: str) -> dict[str, list[str]]:
    python = sys.executable
    return {
        "web": [
            python,
            "-m",
            "uvicorn",
            "console.asgi:application",
            "--host",
            host,
            "--port",
            str(port),
            "--lifespan",
            "off",
            "--no-access-log",
        ],
        "worker": [
            python,
            "-m",
            "celery",
            "-A",
            "console",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            "2",
            "--hostname",
            f"worker-{os.getpid()}@%h",
        ],
        "beat": [
            python,
            "-m",
            "celery",
            "-A",
            "console",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(BASE_DIR / "var" / "celerybeat-schedule"),
        ],
    }


class Supervisor:
    """Runs named processes in their own process groups and stops them all together."""

    def __init__(self, commands: dict[str, list[str]]) -> None:
        self.commands = commands
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = False

    def start(self) -> None:
        for name, command in self.commands.items():
            self.processes[name] = subprocess.Popen(command, cwd=BASE_DIR, start_new_session=True)

    def first_dead(self) -> tuple[str, int] | None:
        for name, process in self.processes.items():
            code = process.poll()
            if code is not None:
                return name, code
        return None

    def stop(self) -> None:
        self.stopping = True
        for process in self.processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
        # A group may outlive its leader (Celery's pool children): kill what is left of each group.
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait()


def serve() -> int:
    from console.config import ConfigError as SettingsError  # same class; named for the reader

    stop_requested = False

    def request_stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    embedded: EmbeddedRedis | None = None
    supervisor: Supervisor | None = None
    try:
        embedded = _prepare_redis()
        _prepare_database()
        from django.conf import settings

        host = os.environ.get("HOST", "127.0.0.1")
        supervisor = Supervisor(_process_table(settings.PORT, host))
        supervisor.start()
        _say(f"GPU Quota Console at http://{host}:{settings.PORT} (web, worker, beat running; Ctrl-C stops all)")
        while not stop_requested:
            dead = supervisor.first_dead()
            if dead is not None:
                name, code = dead
                _say(f"the {name} process stopped (exit code {code}); stopping the others.")
                return 1
            time.sleep(0.3)
        _say("stopping web, worker and beat")
        return 0
    except (LaunchError, SettingsError) as error:
        _say(f"error: {error}")
        return 2
    finally:
        if supervisor is not None:
            supervisor.stop()
        if embedded is not None:
            embedded.stop()


def run_tests(pytest_args: Sequence[str]) -> int:
    try:
        embedded = _prepare_redis()
    except (LaunchError, ConfigError) as error:
        _say(f"error: {error}")
        return 2
    try:
        code = subprocess.call([sys.executable, "-m", "pytest", *pytest_args], cwd=BASE_DIR)
    finally:
        if embedded is not None:
            embedded.stop()
    if code == 5:
        _say("error: no test ran.")
        return 1
    return code


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] not in {"serve", "test"}:
        print("usage: python -m console.launcher serve | test [pytest args]", file=sys.stderr)
        return 2
    if argv[0] == "serve":
        return serve()
    return run_tests(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
