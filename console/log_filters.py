"""Logging filters installed by settings.LOGGING."""

from __future__ import annotations

import logging
import sys

import kombu.exceptions

# What a Redis or broker outage raises, through every layer between us and the socket.
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionError,  # the builtin: refused, reset, aborted
    TimeoutError,
    kombu.exceptions.OperationalError,
)
CHAIN_DEPTH = 10


def _outage_errors() -> tuple[type[BaseException], ...]:
    """OUTAGE_ERRORS, with redis's connection errors once redis is loaded. Not imported here:
    settings.LOGGING loads this module in every process, and redis costs 35 ms of a start that
    `manage.py simulate` pays without ever talking to Redis; a process that never loaded redis
    cannot have raised one of its errors."""
    redis_exceptions = sys.modules.get("redis.exceptions")
    if redis_exceptions is None:
        return OUTAGE_ERRORS
    return (*OUTAGE_ERRORS, redis_exceptions.ConnectionError, redis_exceptions.TimeoutError)


def caused_by_outage(error: BaseException | None) -> bool:
    """Whether `error`, or an exception it was raised from or during, is a lost connection."""
    seen = 0
    outage_errors = _outage_errors()
    while error is not None and seen < CHAIN_DEPTH:
        if isinstance(error, outage_errors):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


class OutageWithoutTraceback(logging.Filter):
    """One line per log record while Redis is down, instead of a traceback.

    During a Redis outage Celery's beat logs every scheduled task it cannot send with its
    stack and a traceback, and the worker's consumer one per reconnect: 98 tracebacks in a 20 s
    outage (docs/reliability.md). The outage is expected and /healthz already says "redis:
    down"; the log keeps the first line and the error, and drops the stack.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and caused_by_outage(record.exc_info[1]):
            error = record.exc_info[1]
            first_line = record.getMessage().splitlines()[0] if record.getMessage() else ""
            record.msg = f"{first_line} [{type(error).__name__}: {error}]".strip()
            record.args = None
            record.exc_info = None
            record.exc_text = None
            record.stack_info = None
        return True
