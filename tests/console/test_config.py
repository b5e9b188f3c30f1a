"""Settings from the environment: the defaults, and one clear sentence for a malformed URL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from console.config import DEFAULT_REDIS_URL, ConfigError, database_config, local_agent_gpus, redis_url

ROOT = Path(__file__).resolve().parents[2]


def test_empty_database_url_means_a_sqlite_file_in_var(tmp_path: Path) -> None:
    config = database_config("", tmp_path)
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["NAME"] == str(tmp_path / "console.sqlite3")


def test_the_sqlite_file_is_opened_in_wal_mode_with_a_busy_timeout(tmp_path: Path, django_db_blocker: Any) -> None:
    """Readers must not wait on the writer: web, worker and beat share this file."""
    from django.db import connections
    from django.db.backends.sqlite3.base import DatabaseWrapper

    settings_dict = {**connections.settings["default"], **database_config("", tmp_path)}
    connection = DatabaseWrapper(settings_dict, alias="wal-check")
    with django_db_blocker.unblock():
        try:
            with connection.cursor() as cursor:
                modes = [
                    cursor.execute(f"PRAGMA {pragma}").fetchone()[0]
                    for pragma in ("journal_mode", "busy_timeout", "synchronous")
                ]
        finally:
            connection.close()

    assert modes == ["wal", 20_000, 1]  # synchronous=NORMAL


def test_postgres_url_is_parsed() -> None:
    config = database_config("postgres://postgres@127.0.0.1:5432/test", Path("/nowhere"))
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["HOST"], config["PORT"], config["NAME"], config["USER"]) == ("127.0.0.1", 5432, "test", "postgres")
    # Connections come from a bounded pool per process, never kept per thread.
    assert config["CONN_MAX_AGE"] == 0
    assert config["OPTIONS"]["pool"]["max_size"] == 10


@pytest.mark.skipif(
    not os.environ.get("DATABASE_URL", "").startswith("postgres"), reason="needs PostgreSQL (DATABASE_URL)"
)
@pytest.mark.django_db(transaction=True)
def test_many_threads_share_the_pool_without_exceeding_it() -> None:
    """Forty threads each run a query on the real server; the console opens at most the pool's size."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection, connections

    def count_mine(_: int) -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
            seen = int(cursor.fetchone()[0])
        connections.close_all()
        return seen

    with ThreadPoolExecutor(max_workers=40) as threads:
        seen = list(threads.map(count_mine, range(200)))
    assert max(seen) <= 10 + 2  # the pool, plus this test's own connection and the server's own


@pytest.mark.parametrize(
    ("url", "message"),
    [
        pytest.param("mysql-ish://x", "the scheme must be one of", id="unknown-scheme"),
        pytest.param("not a url", "the scheme must be one of", id="no-scheme"),
        pytest.param("postgres://127.0.0.1:5432/", "it needs a host and a database name", id="no-name"),
        pytest.param("postgres://127.0.0.1:port/db", "the port is not a number", id="bad-port"),
    ],
)
def test_malformed_database_url_is_one_sentence(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        database_config(url, Path("/nowhere"))
    assert str(raised.value).startswith(f"DATABASE_URL {url!r} is malformed")


def test_redis_url_default_and_validation() -> None:
    assert redis_url("") == DEFAULT_REDIS_URL
    assert redis_url("redis://127.0.0.1:6379/3") == "redis://127.0.0.1:6379/3"
    with pytest.raises(ConfigError, match="REDIS_URL 'http://x' is malformed"):
        redis_url("http://x")
    with pytest.raises(ConfigError, match="the port is not a number"):
        redis_url("redis://127.0.0.1:abc/0")


@pytest.mark.parametrize(
    ("raw", "gpus"),
    [
        pytest.param("", 2, id="unset-two-stand-ins"),
        pytest.param("4", 4, id="stand-ins"),
        pytest.param(" 64 ", 64, id="the-most-a-node-has"),
        pytest.param("nvml", None, id="the-hosts-own"),
        pytest.param("NVML", None, id="any-case"),
    ],
)
def test_the_local_agents_gpus_are_stand_ins_or_the_hosts_own(raw: str, gpus: int | None) -> None:
    assert local_agent_gpus(raw) == gpus


@pytest.mark.parametrize("raw", ["0", "65", "-1", "2.5", "cuda", "all"])
def test_other_local_agent_gpus_are_one_sentence(raw: str) -> None:
    with pytest.raises(ConfigError) as raised:
        local_agent_gpus(raw)
    assert str(raised.value) == (
        "CONSOLE_LOCAL_AGENT_GPUS must be a whole number of stand-in GPUs from 1 to 64, "
        f"or nvml for this host's own GPUs; got {raw!r}."
    )


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


def test_manage_py_prints_one_sentence_for_a_malformed_database_url() -> None:
    result = _manage("check", DATABASE_URL="postgres://nohost", DJANGO_SETTINGS_MODULE="console.settings")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: DATABASE_URL 'postgres://nohost' is malformed: it needs a host and a database name, "
        "e.g. postgres://user@127.0.0.1:5432/name."
    ]
    assert "Traceback" not in result.stderr


def test_check_deploy_passes_under_production_settings() -> None:
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_SETTINGS_MODULE="console.settings",
        DJANGO_DEBUG="false",
        DJANGO_SECRET_KEY="k3y-" + "x9Qz7!mB2@vL5#nR8$wT1%yU4^pA6&sD0*fG3(hJ)" * 2,
        DJANGO_ALLOWED_HOSTS="console.example.org",
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_refuses_the_development_secret_key() -> None:
    result = _manage("check", DJANGO_SETTINGS_MODULE="console.settings", DJANGO_DEBUG="false")
    assert result.returncode == 2
    assert "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is false." in result.stderr
