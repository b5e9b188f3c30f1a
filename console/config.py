"""Validation of the environment values that can be malformed.

Settings call these once at start; a bad value becomes one `ConfigError` sentence that
`manage.py` and the launcher print instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import environ

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_DATABASE_SCHEMES = {"sqlite", "postgres", "postgresql", "pgsql", "postgis"}
_REDIS_SCHEMES = {"redis", "rediss", "unix"}


# SQLite shared by the web server, the worker and beat (the newcomer's default):
# - WAL lets readers go on while one writer commits; with the default rollback journal a page
#   read during a cycle's commit waited, and a commit waited for every reader to finish;
# - IMMEDIATE takes the write lock when a transaction begins, so two writers queue on the busy
#   timeout instead of one failing at once with "database is locked" when it upgrades;
# - synchronous=NORMAL is safe with WAL (a power cut may lose the last commits, never corrupt).
SQLITE_OPTIONS: dict[str, Any] = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}


class ConfigError(Exception):
    """A setting from the environment is unusable; the message is for a person."""


# A request waits this long for a pooled connection before it fails with a 500 that says so.
POOL_TIMEOUT_SECONDS = 10.0


def database_config(url: str, var_dir: Path, *, pool_size: int = 10) -> dict[str, Any]:
    """Turn DATABASE_URL into Django's DATABASES entry; empty means a SQLite file in var/.

    PostgreSQL connections come from a pool of at most `pool_size` per process.
    """
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(var_dir / "console.sqlite3"),
            "OPTIONS": dict(SQLITE_OPTIONS),
        }
    parts = urlsplit(url)
    if parts.scheme not in _DATABASE_SCHEMES:
        raise ConfigError(
            f"DATABASE_URL {url!r} is malformed: the scheme must be one of "
            f"{', '.join(sorted(_DATABASE_SCHEMES))}, e.g. postgres://user@127.0.0.1:5432/name."
        )
    if parts.scheme != "sqlite" and (not parts.hostname or not parts.path.strip("/")):
        raise ConfigError(
            f"DATABASE_URL {url!r} is malformed: it needs a host and a database name, "
            "e.g. postgres://user@127.0.0.1:5432/name."
        )
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"DATABASE_URL {url!r} is malformed: the port is not a number.") from None
    del port
    config: dict[str, Any] = environ.Env.db_url_config(url)
    if config["ENGINE"] == "django.db.backends.sqlite3":
        config.setdefault("OPTIONS", {}).update(SQLITE_OPTIONS)
    else:
        # A pool per process (psycopg's, through Django): the web server answers on many threads
        # under ASGI, and connections kept per thread (CONN_MAX_AGE) grew past the server's
        # max_connections under load ("too many clients already"). The pool bounds them.
        config["CONN_MAX_AGE"] = 0
        config.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": pool_size,
            "timeout": POOL_TIMEOUT_SECONDS,
        }
    return config


def redis_url(url: str) -> str:
    """Validate REDIS_URL. The launcher sets it to the embedded Redis when the user did not."""
    if not url:
        return DEFAULT_REDIS_URL
    parts = urlsplit(url)
    if parts.scheme not in _REDIS_SCHEMES:
        raise ConfigError(
            f"REDIS_URL {url!r} is malformed: the scheme must be redis://, rediss:// or unix://, "
            "e.g. redis://127.0.0.1:6379/0."
        )
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"REDIS_URL {url!r} is malformed: the port is not a number.") from None
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"REDIS_URL {url!r} is malformed: it names no host.")
    del port
    return url


LOCAL_AGENT_NVML = "nvml"


def local_agent_gpus(raw: str, *, default: int = 2) -> int | None:
    """CONSOLE_LOCAL_AGENT_GPUS: a number of stand-in GPUs, or `nvml` (None) for the host's own."""
    from quotas.bounds import NODE_GPUS_MAX

    value = raw.strip()
    if not value:
        return default
    if value.lower() == LOCAL_AGENT_NVML:
        return None
    if value.isdigit() and 1 <= int(value) <= NODE_GPUS_MAX:
        return int(value)
    raise ConfigError(
        f"CONSOLE_LOCAL_AGENT_GPUS must be a whole number of stand-in GPUs from 1 to {NODE_GPUS_MAX}, "
        f"or {LOCAL_AGENT_NVML} for this host's own GPUs; got {raw!r}."
    )
