"""The launcher's supervisor: restart with backoff, reset after a stable run, give up on a crash loop.

The policy is tested as plain functions. The supervisor is tested with real (tiny) processes
and a clock the test moves by hand, so nothing here sleeps. The run command's end-to-end test
(a real worker killed with SIGKILL and restarted) is in test_run_command.py.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis
from django.test import Client
from pytest_django.fixtures import Settings as SettingsWrapper

from console.embedded_redis import EmbeddedRedis
from console.health import HEARTBEAT_KEY, record_heartbeat, record_outage
from console.supervisor import CrashHistory, GiveUp, Restart, RestartPolicy, Supervisor, after_exit

POLICY = RestartPolicy()
SLOW_CRASH = 20.0  # neither a fast crash (< 10 s) nor a stable run (>= 60 s)
CRASHES = ["sh", "-c", "exit 3"]
SERVES = ["sleep", "600"]


def _exits(uptimes: list[float], policy: RestartPolicy = POLICY) -> list[Restart | GiveUp]:
    history = CrashHistory()
    decisions: list[Restart | GiveUp] = []
    for uptime in uptimes:
        history, decision = after_exit(policy, history, uptime)
        decisions.append(decision)
    return decisions


def test_the_delay_doubles_from_one_second_up_to_the_cap() -> None:
    assert _exits([SLOW_CRASH] * 8) == [Restart(s) for s in (1, 2, 4, 8, 16, 30, 30, 30)]


def test_a_run_of_a_minute_resets_the_backoff() -> None:
    assert _exits([SLOW_CRASH, SLOW_CRASH, SLOW_CRASH, 60.0, SLOW_CRASH]) == [
        Restart(1),
        Restart(2),
        Restart(4),
        Restart(1),
        Restart(2),
    ]


def test_five_crashes_in_a_row_each_within_ten_seconds_give_up() -> None:
    assert _exits([0.5, 3, 9.9, 1, 2]) == [Restart(1), Restart(2), Restart(4), Restart(8), GiveUp(fast_crashes=5)]


def test_one_run_past_ten_seconds_breaks_the_crash_loop_count() -> None:
    decisions = _exits([1, 1, 1, 1, 10.0, 1, 1, 1, 1])
    assert not any(isinstance(decision, GiveUp) for decision in decisions)
    assert decisions[4] == Restart(16)  # still backing off: ten seconds is not a stable run


def test_a_huge_number_of_crashes_stays_at_the_cap() -> None:
    history = CrashHistory(crashes_since_stable_run=5000)
    assert after_exit(POLICY, history, SLOW_CRASH)[1] == Restart(30)


class HandClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> HandClock:
    return HandClock()


@pytest.fixture
def changes() -> list[str]:
    return []


@pytest.fixture
def supervisors() -> Iterator[list[Supervisor]]:
    started: list[Supervisor] = []
    yield started
    for supervisor in started:
        supervisor.stop()


def _supervise(
    commands: dict[str, list[str]], clock: HandClock, changes: list[str], supervisors: list[Supervisor]
) -> Supervisor:
    supervisor = Supervisor(
        commands, cwd=Path.cwd(), clock=clock, on_change=lambda name, sentence: changes.append(f"{name} {sentence}")
    )
    supervisors.append(supervisor)
    supervisor.start()
    return supervisor


def _pid(supervisor: Supervisor, name: str) -> int:
    process = supervisor.process(name)
    assert process is not None
    return process.pid


def _wait_exit(supervisor: Supervisor, name: str) -> None:
    process = supervisor.process(name)
    assert process is not None
    process.wait(timeout=30)


def _gone(pid: int) -> bool:
    try:
        zombie: bool = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        return zombie
    except psutil.NoSuchProcess:
        return True


def test_a_killed_process_is_restarted_after_the_backoff_with_a_new_pid(
    clock: HandClock, changes: list[str], supervisors: list[Supervisor]
) -> None:
    supervisor = _supervise({"worker": SERVES, "web": SERVES}, clock, changes, supervisors)
    first, web = _pid(supervisor, "worker"), _pid(supervisor, "web")
    clock.now += 30
    os.kill(first, signal.SIGKILL)
    _wait_exit(supervisor, "worker")

    assert supervisor.tend() is None
    assert changes == ["worker was killed by SIGKILL after 30 s; restarting it in 1 s"]
    assert supervisor.process("worker") is None

    clock.now += 0.9
    supervisor.tend()
    assert supervisor.process("worker") is None, "restarted before its backoff was over"

    clock.now += 0.1
    supervisor.tend()
    second = _pid(supervisor, "worker")
    assert second != first
    assert changes[-1] == f"worker was restarted (pid {second})"
    assert _pid(supervisor, "web") == web, "the other process was touched"


def test_what_is_left_of_a_killed_process_group_goes_before_the_restart(
    tmp_path: Path, clock: HandClock, changes: list[str], supervisors: list[Supervisor]
) -> None:
    # Like Celery's prefork pool: the leader's children share its group and outlive a SIGKILL of it.
    pool_pid_file = tmp_path / "pool.pid"
    leader_with_pool = ["sh", "-c", f"sleep 600 & echo $! > {pool_pid_file}; wait"]
    supervisor = _supervise({"worker": leader_with_pool}, clock, changes, supervisors)
    while not pool_pid_file.exists() or not pool_pid_file.read_text().strip():
        time.sleep(0.05)
    pool = int(pool_pid_file.read_text())

    os.kill(_pid(supervisor, "worker"), signal.SIGKILL)
    _wait_exit(supervisor, "worker")
    supervisor.tend()

    psutil.wait_procs([psutil.Process(pool)], timeout=10)
    assert _gone(pool)


def test_gives_up_after_five_fast_crashes_with_one_sentence_and_stops_the_others(
    clock: HandClock, changes: list[str], supervisors: list[Supervisor]
) -> None:
    supervisor = _supervise({"beat": CRASHES, "web": SERVES}, clock, changes, supervisors)
    web = _pid(supervisor, "web")
    verdict = None
    for _attempt in range(5):
        _wait_exit(supervisor, "beat")
        clock.now += 2  # each run lasted 2 s: a fast crash
        verdict = supervisor.tend()
        if verdict is not None:
            break
        clock.now += 60  # the backoff is over; the run that follows is timed from its own start
        supervisor.tend()

    assert verdict == (
        "the beat process crashed 5 times in a row, each within 10 s of starting "
        "(last: it exited with code 3); giving up and stopping the others."
    )
    assert [change for change in changes if "restarting" in change] == [
        "beat exited with code 3 after 2 s; restarting it in 1 s",
        "beat exited with code 3 after 2 s; restarting it in 2 s",
        "beat exited with code 3 after 2 s; restarting it in 4 s",
        "beat exited with code 3 after 2 s; restarting it in 8 s",
    ]
    assert sum(change.startswith("beat was restarted (pid ") for change in changes) == 4
    assert psutil.pid_exists(web) and not _gone(web)

    supervisor.stop()
    assert _gone(web)


def test_stop_during_a_backoff_stops_the_rest_and_restarts_nothing(
    clock: HandClock, changes: list[str], supervisors: list[Supervisor]
) -> None:
    supervisor = _supervise({"worker": CRASHES, "web": SERVES}, clock, changes, supervisors)
    web = _pid(supervisor, "web")
    _wait_exit(supervisor, "worker")
    supervisor.tend()

    supervisor.stop()
    clock.now += 60
    assert supervisor.tend() is None
    assert supervisor.process("worker") is None
    assert _gone(web)


@pytest.fixture
def private_redis(settings: SettingsWrapper) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        settings.REDIS_URL = server.url
        yield server


@pytest.mark.django_db
def test_healthz_names_an_exited_worker_at_once_and_is_green_after_its_next_heartbeat(
    client: Client, private_redis: EmbeddedRedis
) -> None:
    record_heartbeat("worker")
    record_heartbeat("beat")
    assert client.get("/healthz").status_code == 200

    record_outage("worker", "the process was killed by SIGKILL after 30 s; restarting it in 1 s")
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["worker"] == "missing: the process was killed by SIGKILL after 30 s; restarting it in 1 s"
    assert response.json()["missing"] == "worker"

    record_outage("worker", "the process was restarted (pid 4321)")
    assert client.get("/healthz").json()["worker"] == "missing: the process was restarted (pid 4321)"

    record_heartbeat("worker")  # the restarted worker's first one
    assert client.get("/healthz").status_code == 200


@pytest.mark.django_db
def test_healthz_keeps_an_outage_note_over_a_heartbeat_from_before_it(
    client: Client, private_redis: EmbeddedRedis
) -> None:
    record_heartbeat("beat")
    before = time.time()
    record_outage("worker", "the process exited with code 1 after 3 s; restarting it in 2 s")
    # The dead worker's last heartbeat, still fresh (under a minute) but older than the note.
    redis.Redis.from_url(private_redis.url).set(HEARTBEAT_KEY.format(role="worker"), repr(before - 5))
    body = client.get("/healthz").json()
    assert body["worker"] == "missing: the process exited with code 1 after 3 s; restarting it in 2 s"
