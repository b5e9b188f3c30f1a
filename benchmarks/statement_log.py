"""SQL statements a span of a benchmark ran, by the process that sent them (issue 25's drain, (c)).

PostgreSQL logs every statement of one database (`ALTER DATABASE … SET log_statement = 'all'`,
set before the console connects) to the server's log; afterwards the lines of that database
within the span are counted, each by its backend's client: the backend's client port
(pg_stat_activity) is matched with the sockets of the console's processes. The server's log must
be readable here (a local server, this user allowed), and logging every statement costs the
server CPU: a run that counts statements is not one whose speed is reported.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    import psycopg
    from django.db.backends.base.base import BaseDatabaseWrapper

SERVER_LOG = Path("/var/log/postgresql/postgresql-15-main.log")
# Debian's log_line_prefix `%m [%p] %q%u@%d `: time, backend pid, user@database.
_LINE = re.compile(r"^(\S+ \S+) UTC \[(\d+)\] \S+@(\S+) LOG:  (?:statement|execute [^:]*): +(\w+)(.{0,24})")
# Django's first statement on each new connection (it sets the session's time zone): counted as a
# connection opened, which costs the server a process.
_NEW_CONNECTION = " set_config('TimeZone'"


def log_every_statement(server: psycopg.Connection[Any], database: str) -> None:
    """On `server` (a connection in autocommit to another database of the same server)."""
    server.execute(f"ALTER DATABASE \"{database}\" SET log_statement = 'all'")


def backends_by_process(connection: BaseDatabaseWrapper, processes: dict[str, list[psutil.Process]]) -> dict[int, str]:
    """Each backend of the current database, by pid, with the kind of process it serves."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, client_port FROM pg_stat_activity WHERE datname = current_database()")
        ports = {int(port): int(pid) for pid, port in cursor.fetchall() if port is not None}
    return clients_of(ports, processes)


def clients_of(ports: dict[int, int], processes: dict[str, list[psutil.Process]]) -> dict[int, str]:
    """Backend pid -> the kind of process whose socket has the backend's client port (`ports`:
    client port -> backend pid, from pg_stat_activity); a backend no process claims is left out."""
    kinds: dict[int, str] = {}
    for kind, members in processes.items():
        for process in members:
            try:
                sockets = process.net_connections(kind="tcp")
            except psutil.Error:
                continue
            for socket in sockets:
                if socket.laddr and socket.laddr.port in ports:
                    kinds[ports[socket.laddr.port]] = kind
    return kinds


def count(database: str, since: datetime, until: datetime, kinds: dict[int, str]) -> Counter[tuple[str, str]]:
    """(kind of process, the statement's first word) -> how many, for `database` within the span
    (UTC, naive). A backend that closed before `kinds` was read counts as `?`."""
    counted: Counter[tuple[str, str]] = Counter()
    earliest, latest = since.strftime("%Y-%m-%d %H:%M:%S.%f")[:23], until.strftime("%Y-%m-%d %H:%M:%S.%f")[:23]
    with SERVER_LOG.open(errors="replace") as log:
        for line in log:
            found = _LINE.match(line)
            if found is None or found[3] != database or not earliest <= found[1] <= latest:
                continue
            word = "(new connection)" if found[5].startswith(_NEW_CONNECTION) else found[4].upper()
            counted[(kinds.get(int(found[2]), "?"), word)] += 1
    return counted


def lines(counted: Counter[tuple[str, str]], jobs: int) -> list[str]:
    """Per kind of process: statements per job, and the split by first word."""
    said = []
    for kind in sorted({kind for kind, _word in counted}):
        words = {word: n for (k, word), n in counted.items() if k == kind}
        total = sum(words.values())
        split = ", ".join(f"{word} {n / jobs:.2f}" for word, n in sorted(words.items(), key=lambda item: -item[1]))
        said.append(f"{kind}: {total} statements, {total / jobs:.2f} a job ({split})")
    return said
