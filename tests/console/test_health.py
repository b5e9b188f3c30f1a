"""/healthz: ok only when the database and Redis answer and worker and beat reported within a minute."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import redis
from django.test import Client
from pytest_django.fixtures import Settings as SettingsWrapper

from console.embedded_redis import EmbeddedRedis
from console.health import HEARTBEAT_KEY, record_heartbeat


@pytest.fixture
def private_redis(settings: SettingsWrapper) -> Iterator[EmbeddedRedis]:
    """A Redis of the test's own, so stopping it harms nobody else."""
    with EmbeddedRedis() as server:
        settings.REDIS_URL = server.url
        yield server


def _health(client: Client) -> tuple[int, dict[str, str]]:
    response = client.get("/healthz")
    return response.status_code, response.json()


@pytest.mark.django_db
def test_ok_when_worker_and_beat_reported(client: Client, private_redis: EmbeddedRedis) -> None:
    record_heartbeat("worker")
    record_heartbeat("beat")
    assert _health(client) == (
        200,
        {"status": "ok", "database": "ok", "redis": "ok", "worker": "ok", "beat": "ok"},
    )


@pytest.mark.django_db
def test_unhealthy_when_the_worker_never_reported(client: Client, private_redis: EmbeddedRedis) -> None:
    record_heartbeat("beat")
    status, body = _health(client)
    assert status == 503
    assert body["status"] == "unhealthy"
    assert body["worker"] == "missing: no heartbeat"
    assert body["missing"] == "worker"


@pytest.mark.django_db
def test_unhealthy_when_the_worker_went_quiet_over_a_minute_ago(client: Client, private_redis: EmbeddedRedis) -> None:
    record_heartbeat("beat")
    redis.Redis.from_url(private_redis.url).set(HEARTBEAT_KEY.format(role="worker"), repr(time.time() - 75))
    status, body = _health(client)
    assert status == 503
    # The age is read when the request runs: on a loaded machine a second or two after the write.
    said = re.fullmatch(r"missing: last heartbeat (\d+) s ago", body["worker"])
    assert said is not None and 75 <= int(said[1]) < 80, body["worker"]


@pytest.mark.django_db
def test_unhealthy_when_redis_is_stopped(client: Client, private_redis: EmbeddedRedis) -> None:
    record_heartbeat("worker")
    record_heartbeat("beat")
    assert _health(client)[0] == 200
    private_redis.stop()
    status, body = _health(client)
    assert status == 503
    assert body["redis"].startswith("down:")
    assert body["missing"] == "redis, worker, beat"


def test_embedded_redis_starts_serves_and_is_gone_after_stop() -> None:
    server = EmbeddedRedis().start()
    client = redis.Redis.from_url(server.url)
    client.set("console:probe", "1")
    assert client.get("console:probe") == b"1"
    process = server.process
    assert process is not None
    server.stop()
    assert process.poll() is not None
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url, socket_connect_timeout=0.5).ping()
