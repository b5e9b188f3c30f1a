"""The cycle lock of a simulation (an in-process mutex instead of Redis)."""

from __future__ import annotations

import threading

from scheduling.lock import CycleLease, holder_name, issue_token


class InProcessCycleLock:
    """The cycle lock of a simulation: its database is private, so a lock in this process is
    enough, and simulate needs no Redis and never contends with a running console's lock."""

    backend = "in-process"

    def __init__(self) -> None:
        self._mutex = threading.Lock()

    def acquire(self, *, wait_seconds: float = 0.0) -> CycleLease | None:
        if not self._mutex.acquire(timeout=wait_seconds if wait_seconds > 0 else -1):
            return None
        try:
            return CycleLease(token=issue_token(), holder=holder_name(), backend=self.backend)
        except BaseException:
            self._mutex.release()
            raise

    def release(self, lease: CycleLease) -> None:
        self._mutex.release()

    def holder(self) -> str | None:
        return "simulate" if self._mutex.locked() else None
