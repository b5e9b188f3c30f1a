"""A Redis outage logs one line per record, not a traceback; other errors keep theirs."""

from __future__ import annotations

import logging

import kombu.exceptions
import pytest
import redis.exceptions

from console.log_filters import OutageWithoutTraceback


def record_of(error: BaseException) -> logging.LogRecord:
    """A record as celery.beat logs a task it could not send: the error, the stack, exc_info."""
    try:
        raise error
    except BaseException as raised:  # noqa: BLE001 (the test raises on purpose to build exc_info)
        info = (type(raised), raised, raised.__traceback__)
    message = "Message Error: %s\n%s"
    return logging.LogRecord("celery.beat", logging.ERROR, __file__, 1, message, (error, ["  File stack\n"]), info)


@pytest.mark.parametrize(
    "error",
    [
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
        ConnectionRefusedError(111, "Connection refused"),
        kombu.exceptions.OperationalError("Error 111 connecting"),
    ],
)
def test_an_outage_is_one_line_with_the_error(error: BaseException) -> None:
    record = record_of(error)
    assert OutageWithoutTraceback().filter(record)
    line = logging.Formatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith("ERROR celery.beat: Message Error: ") and type(error).__name__ in line


def test_an_error_raised_while_handling_an_outage_counts_as_the_outage() -> None:
    try:
        try:
            raise redis.exceptions.ConnectionError("refused")
        except redis.exceptions.ConnectionError as lost:
            raise RuntimeError("Couldn't apply scheduled task executor-tick") from lost
    except RuntimeError as wrapped:
        record = record_of(wrapped)
    OutageWithoutTraceback().filter(record)
    assert record.exc_info is None


def test_any_other_error_keeps_its_traceback() -> None:
    record = record_of(ValueError("a bug"))
    OutageWithoutTraceback().filter(record)
    assert "Traceback" in logging.Formatter().format(record)
