"""The process launcher behind the README's two commands.

`python -m console.launcher serve` starts the whole console: the embedded Redis (unless
REDIS_URL is set), migrations, the demo data, then the ASGI web server, a Celery worker and
Celery beat, which it supervises (`console.supervisor`): one that dies is restarted with
backoff while the others keep serving, and /healthz names it until it is back; after five fast
crashes in a row it gives up and stops the rest. Ctrl-C stops everything, Redis last.

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
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

import redis

from console.config import ConfigError
from console.embedded_redis import EmbeddedRedis, EmbeddedRedisError
from console.supervisor import Supervisor

BASE_DIR = Path(__file__).resolve().parent.parent
TEND_EVERY_SECONDS = 0.3
HEALTH_NOTICE_EVERY_SECONDS = 30.0


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
    if settings.CONSOLE_LOCAL_AGENT:
        _prepare_local_agent(settings.CONSOLE_LOCAL_AGENT_GPUS)
    connections.close_all()  # children open their own connections


LOCAL_AGENT_NODE = "local"
LOCAL_AGENT_DIR = BASE_DIR / "var" / "agent"


def _prepare_local_agent(gpus: int | None) -> None:
    """CONSOLE_LOCAL_AGENT: the node `local` (agent executor), the size of what its agent will
    register, and a fresh token only its user reads."""
    from django.core.exceptions import ValidationError

    from quotas.node_agents import prepare_local_agent

    count, model, words = _local_agent_gpus(gpus)
    try:
        token = prepare_local_agent(name=LOCAL_AGENT_NODE, gpus=count, gpu_model=model)
    except ValidationError as refused:
        raise LaunchError(f"the node {LOCAL_AGENT_NODE} cannot become {words}: {' '.join(refused.messages)}") from None
    LOCAL_AGENT_DIR.mkdir(parents=True, exist_ok=True)
    token_file = LOCAL_AGENT_DIR / "local.token"
    token_file.touch(mode=0o600)
    token_file.chmod(0o600)
    token_file.write_text(token)
    _say(f"local agent: node {LOCAL_AGENT_NODE} with {words} runs jobs as real processes")


def _local_agent_gpus(gpus: int | None) -> tuple[int, str, str]:
    """(count, model, words) of what the local agent will register: `gpus` stand-ins, or (None)
    the host's own GPUs, read from NVML here so that the node matches the registration."""
    if gpus is not None:
        return gpus, "", f"{gpus} fake GPU{'s' if gpus != 1 else ''}"
    from gqc.agent import NvmlGpus, NvmlUnavailable

    try:
        devices = NvmlGpus().devices()
    except NvmlUnavailable as error:
        raise LaunchError(f"CONSOLE_LOCAL_AGENT_GPUS is nvml, but {error}") from None
    if not devices:
        raise LaunchError("CONSOLE_LOCAL_AGENT_GPUS is nvml, but NVML finds no GPU on this host.")
    models = sorted({str(device["model"]) for device in devices})
    # A node has one model; the registration compares models only where both are set.
    model = models[0] if len(models) == 1 else ""
    count = len(devices)
    return count, model, f"this host's {count} GPU{'s' if count != 1 else ''} ({', '.join(models)}, through NVML)"


def _local_agent_command(port: int, host: str, gpus: int | None) -> list[str]:
    """The agent's command line: `gpus` stand-ins, or (None) the host's GPUs through NVML."""
    from gqc.agent import command_line

    return command_line(
        server=f"http://{host}:{port}",
        node=LOCAL_AGENT_NODE,
        token_file=LOCAL_AGENT_DIR / "local.token",
        state_dir=LOCAL_AGENT_DIR / "state",
        fake_gpus=gpus,
    )


# One web process is the embedded default: SQLite takes one writer at a time, so more processes
# would only wait on its lock. On PostgreSQL, more processes serve more requests (node agents'
# beats above all) at the cost of one connection pool each.
WEB_CONCURRENCY_DEFAULT = 1
WEB_CONCURRENCY_MAX = 16


def web_concurrency(environment: Mapping[str, str]) -> int:
    """WEB_CONCURRENCY: how many web processes serve the port (uvicorn's --workers)."""
    raw = environment.get("WEB_CONCURRENCY", "").strip()
    if not raw:
        return WEB_CONCURRENCY_DEFAULT
    try:
        processes = int(raw)
    except ValueError:
        processes = 0
    if not 1 <= processes <= WEB_CONCURRENCY_MAX:
        raise LaunchError(
            f"WEB_CONCURRENCY must be a whole number from 1 to {WEB_CONCURRENCY_MAX} (web processes), got {raw!r}."
        )
    return processes


def _process_table(port: int, host: str, web_processes: int = WEB_CONCURRENCY_DEFAULT) -> dict[str, list[str]]:
    python = sys.executable
    web = [
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
    ]
    if web_processes > 1:
        # uvicorn's own manager forks the processes onto one listening socket; the supervisor
        # stops its whole process group, workers included.
        web += ["--workers", str(web_processes)]
    return {
        "web": web,
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
            # No --schedule file: settings.CELERY_BEAT_SCHEDULER keeps the schedule in memory.
        ],
    }


def _report_change(name: str, sentence: str) -> None:
    """Print a supervised process's change and, for worker and beat, show it on /healthz."""
    _say(f"the {name} process {sentence}.")
    from console import health

    if name in health.ROLES:
        # Redis down: /healthz already says so, and the launcher must keep supervising.
        with contextlib.suppress(redis.RedisError):
            health.record_outage(name, f"the process {sentence}")


def _health_url(host: str, port: int) -> str:
    # A wildcard listen address is not one to connect to; the loopback reaches it.
    reachable = "127.0.0.1" if host in {"", "0.0.0.0", "::"} else host
    return f"http://{reachable}:{port}/healthz"


def _healthz_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):  # refused while uvicorn starts, 503, a timeout: not yet
        return False


def _until_healthy(supervisor: Supervisor, url: str, stop_requested: Callable[[], bool]) -> str | None:
    """Tend the processes until /healthz is ok, so that "running" is only said when it is true.

    Worker and beat are first awaited in this process (console.health), and only then /healthz
    over HTTP: polling /healthz while they boot would log a "Service Unavailable" ERROR per try.
    Returns the supervisor's give-up sentence if a process crash-loops meanwhile, else None.
    """
    from django.db import connections

    from console import health

    started = time.monotonic()
    next_notice = started + HEALTH_NOTICE_EVERY_SECONDS
    parts_ok = False
    while not stop_requested():
        gave_up = supervisor.tend()
        if gave_up is not None:
            return gave_up
        if not parts_ok:
            report = health.check()
            connections.close_all()  # the launcher holds no connection between polls
            parts_ok = all(state == "ok" for state in report.values())
        if parts_ok and _healthz_ok(url):
            return None
        if time.monotonic() >= next_notice:
            waiting = "the web server" if parts_ok else ", ".join(p for p, state in report.items() if state != "ok")
            _say(f"still waiting for {waiting} ({time.monotonic() - started:.0f} s)")
            next_notice += HEALTH_NOTICE_EVERY_SECONDS
        time.sleep(TEND_EVERY_SECONDS)
    return None


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
        processes = _process_table(settings.PORT, host, web_concurrency(os.environ))
        if settings.CONSOLE_LOCAL_AGENT:
            processes["agent"] = _local_agent_command(settings.PORT, host, settings.CONSOLE_LOCAL_AGENT_GPUS)
        supervisor = Supervisor(processes, cwd=BASE_DIR, on_change=_report_change)
        supervisor.start()
        _say("starting web, worker and beat")
        gave_up = _until_healthy(supervisor, _health_url(host, settings.PORT), lambda: stop_requested)
        if gave_up is not None:
            _say(gave_up)
            return 1
        if not stop_requested:
            _say(f"GPU Quota Console at http://{host}:{settings.PORT} (web, worker, beat running; Ctrl-C stops all)")
        while not stop_requested:
            gave_up = supervisor.tend()
            if gave_up is not None:
                _say(gave_up)
                return 1
            time.sleep(TEND_EVERY_SECONDS)
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
        # Importing this package (its Celery app) set the production settings in our environment;
        # the suite must run on the test settings that pyproject.toml names (per-worker Redis
        # databases and queues, a fast password hasher).
        environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.test_settings"}
        code = subprocess.call([sys.executable, "-m", "pytest", *pytest_args], cwd=BASE_DIR, env=environment)
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
