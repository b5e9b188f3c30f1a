"""The cluster-wide cycle lock, and the fencing token that makes a stale holder harmless.

Only one cycle runs at a time across processes and machines. Two backends:

- `redis`: `SET key holder NX PX ttl`; released with a compare-and-delete script, so a holder
  whose lease expired cannot delete its successor's lock.
- `postgres`: a session advisory lock (`pg_try_advisory_lock`; a caller that may wait does so in
  the server, `pg_advisory_lock` under a transaction's `lock_timeout`); the server drops it when
  the holder's connection dies, so a killed worker never leaves it behind.

`auto` (the default) uses the advisory lock on PostgreSQL and Redis otherwise. Either way the
token comes from `SchedulerFence.issued` in the database, which only grows, and the commit
refuses a token at or below the last committed one (scheduling.cycle). A lock is a mutex for
the common case; the fence is what makes a lease lost mid-cycle harmless.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import F

from scheduling.models import SchedulerFence

if TYPE_CHECKING:
    import redis

# An arbitrary 64-bit key for pg_advisory_lock ("GPUQ" "CYCL" in ASCII).
ADVISORY_KEY: Final = 0x47505551_4359434C
# The wait's bound is set first (the lock is taken for each row of `bounded`); a lock not granted
# within it fails the statement with lock_not_available. The lock is the session's, so it outlives
# the transaction that bounded the wait.
_WAIT_FOR_LOCK_SQL: Final = (
    "WITH bounded AS (SELECT set_config('lock_timeout', %s, true)) SELECT pg_advisory_lock(%s) FROM bounded"
)
_LOCK_NOT_AVAILABLE: Final = "55P03"
_RELEASE_SCRIPT: Final = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""


@dataclass(frozen=True, slots=True)
class CycleLease:
    token: int
    holder: str
    backend: str


class CycleLock(Protocol):
    backend: str

    def acquire(self, *, wait_seconds: float = 0.0) -> CycleLease | None: ...

    def release(self, lease: CycleLease) -> None: ...

    def holder(self) -> str | None: ...


def holder_name() -> str:
    """Unique per acquisition: a holder whose lease expired must never delete its successor's lock."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{uuid.uuid4().hex[:8]}"


def redis_prefix() -> str:
    return str(getattr(settings, "SCHEDULER_REDIS_PREFIX", "scheduler:"))


# One client a URL and process, kept: each client has its own connection pool, and a client made
# per call opened a connection per call (a TCP connect, HELLO and a health check). The agents'
# beats call here three times each: in the drain benchmark of issue 25 a quarter of a beat's time
# went to those connects. redis-py's client is safe to share between threads; a forked child
# (its pid differs) makes its own rather than share its parent's sockets.
_clients: dict[tuple[str, int], redis.Redis] = {}


def redis_client() -> redis.Redis:
    # Imported here: a process that takes no Redis lock (`manage.py simulate`, a console on
    # PostgreSQL) need not load the client, 35 ms of its start.
    import redis

    key = (str(settings.REDIS_URL), os.getpid())
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=2)
    return client


def issue_token() -> int:
    """The next fencing token; its own tiny transaction, so it is never rolled back."""
    with transaction.atomic():
        SchedulerFence.objects.get_or_create(pk=SchedulerFence.SINGLETON_ID)
        SchedulerFence.objects.filter(pk=SchedulerFence.SINGLETON_ID).update(issued=F("issued") + 1)
        issued: int = SchedulerFence.objects.values_list("issued", flat=True).get(pk=SchedulerFence.SINGLETON_ID)
    return issued


class RedisCycleLock:
    backend = "redis"

    def __init__(self, *, client: redis.Redis | None = None, ttl_seconds: float | None = None) -> None:
        self.client = client or redis_client()
        self.key = f"{redis_prefix()}cycle-lock"
        self.ttl_ms = int(1000 * (ttl_seconds or float(getattr(settings, "SCHEDULER_LOCK_TTL_SECONDS", 15.0))))

    def acquire(self, *, wait_seconds: float = 0.0) -> CycleLease | None:
        holder = holder_name()
        deadline = time.monotonic() + wait_seconds
        while True:
            if self.client.set(self.key, holder, nx=True, px=self.ttl_ms):
                try:
                    token = issue_token()
                except BaseException:
                    self.client.eval(_RELEASE_SCRIPT, 1, self.key, holder)
                    raise
                return CycleLease(token=token, holder=holder, backend=self.backend)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)

    def release(self, lease: CycleLease) -> None:
        self.client.eval(_RELEASE_SCRIPT, 1, self.key, lease.holder)

    def holder(self) -> str | None:
        value = self.client.get(self.key)
        return value.decode() if isinstance(value, bytes) else value


class PostgresCycleLock:
    """A session-level advisory lock on this thread's database connection."""

    backend = "postgres"

    def acquire(self, *, wait_seconds: float = 0.0) -> CycleLease | None:
        if not (self._try_lock() or (wait_seconds > 0 and self._wait_for_lock(wait_seconds))):
            return None
        try:
            token = issue_token()
        except BaseException:
            self._unlock()
            raise
        return CycleLease(token=token, holder=holder_name(), backend=self.backend)

    def _try_lock(self) -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [ADVISORY_KEY])
            return bool(cursor.fetchone()[0])

    def _wait_for_lock(self, wait_seconds: float) -> bool:
        """Wait in the server, which hands the lock over the moment its holder lets go. A poll every
        5 ms did the same at a round trip each: in the drain of issue 25 the worker's second
        process asked hundreds of times a cycle. Called inside a caller's transaction (tests), the
        bound lasts until that transaction ends; the cycle's callers hold none."""
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                # lock_timeout for this transaction only: the session's own stays as it was.
                cursor.execute(_WAIT_FOR_LOCK_SQL, [f"{max(1, round(wait_seconds * 1000))}ms", ADVISORY_KEY])
        except OperationalError as error:
            if getattr(error.__cause__, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
                return False
            raise
        return True

    def release(self, lease: CycleLease) -> None:
        self._unlock()

    def _unlock(self) -> None:
        if connection.connection is None:
            return  # The connection is gone, and the server dropped the lock with it.
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [ADVISORY_KEY])

    def holder(self) -> str | None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT a.pid, a.client_addr, a.application_name FROM pg_locks l "
                "JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted "
                "AND l.classid = ((%s::bigint >> 32) & 4294967295)::oid AND l.objid = (%s::bigint & 4294967295)::oid",
                [ADVISORY_KEY, ADVISORY_KEY],
            )
            row = cursor.fetchone()
        if row is None:
            return None
        pid, address, application = row
        return f"postgres backend {pid} ({address or 'local'}{', ' + application if application else ''})"


def lock_backend() -> str:
    chosen = str(getattr(settings, "SCHEDULER_LOCK", "auto"))
    if chosen == "auto":
        return "postgres" if connection.vendor == "postgresql" else "redis"
    if chosen not in ("redis", "postgres"):
        raise ValueError(f"SCHEDULER_LOCK must be auto, redis or postgres, not {chosen!r}")
    return chosen


def get_cycle_lock() -> CycleLock:
    if lock_backend() == "postgres":
        return PostgresCycleLock()
    return RedisCycleLock()
