"""Real concurrent transactions on PostgreSQL: two cycles at once never double-book a GPU, and a
node edited while a cycle commits never loses a GPU the commit places on."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from quotas.models import Node
from quotas.services import update_node
from scheduling import cycle as cycle_module
from scheduling import engine, pending_reasons
from scheduling.clock import get_clock
from scheduling.cycle import CycleOutcome, decide_and_commit, run_cycle
from scheduling.lock import CycleLease, PostgresCycleLock, issue_token
from scheduling.models import Job, PendingReason, ReplicaPlacementRecord
from tests.scheduling.conftest import build_cluster

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        "connection.vendor != 'postgresql'",
        reason="SQLite serializes every write transaction, so two commits can never overlap there",
    ),
]


def in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(number: int) -> None:
        try:
            results[number] = work(number)
        except BaseException as error:  # noqa: BLE001 - handed to the test thread below
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]
    return results


def devices_booked() -> Counter[tuple[int, int]]:
    booked: Counter[tuple[int, int]] = Counter()
    for placement in ReplicaPlacementRecord.objects.all():
        for device in placement.devices:
            booked[(placement.node_id, device)] += 1
    return booked


def test_two_cycles_forced_to_overlap_never_double_book(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """Both read the same snapshot, both decide to place different jobs on the same devices;
    the fence lets exactly one commit."""
    settings.SCHEDULER_TRIGGER = "none"  # only the two forced cycles run
    cluster = build_cluster(node_gpus=(8,), tree=(("Quota1", None, 8), ("team-a", "Quota1", 8)))
    cluster.submit("first", gpus=8)
    barrier = threading.Barrier(2, timeout=20)
    real = engine.schedule

    def schedule_together(snapshot: engine.Snapshot) -> engine.CycleResult:
        result = real(snapshot)
        barrier.wait()  # neither commits before both have decided
        return result

    monkeypatch.setattr("scheduling.cycle.engine.schedule", schedule_together)
    leases = [CycleLease(token=issue_token(), holder=f"forced-{n}", backend="none") for n in range(2)]

    def cycle(number: int) -> CycleOutcome:
        if number == 1:
            cluster.submit("second", gpus=8, kind="inference", priority=9, preemptible=False)
        return decide_and_commit(lease=leases[number], trigger="forced", now=get_clock().now())

    # The second thread submits a more urgent job before its snapshot, so the two cycles
    # want to put different jobs on the same eight devices.
    outcomes = in_threads(2, cycle)
    assert sorted(outcome.committed for outcome in outcomes) == [False, True]
    assert max(devices_booked().values()) == 1
    assert sum(devices_booked().values()) == 8


def test_many_cycles_at_once_take_turns_under_the_advisory_lock(settings: Any) -> None:
    settings.SCHEDULER_TRIGGER = "none"
    cluster = build_cluster(node_gpus=(8, 8))
    for number in range(12):
        cluster.submit(f"job-{number}", "team-a" if number % 2 else "team-b", gpus=2)
    outcomes = in_threads(4, lambda number: run_cycle(trigger=f"thread-{number}", wait_seconds=20))
    assert all(outcome.ran and outcome.committed for outcome in outcomes)
    assert max(devices_booked().values()) == 1
    assert sum(devices_booked().values()) == 16


def test_the_advisory_lock_is_held_by_one_connection_at_a_time(settings: Any) -> None:
    settings.SCHEDULER_TRIGGER = "none"
    build_cluster()
    held = threading.Event()
    done = threading.Event()

    def hold(number: int) -> str | None:
        if number == 0:
            lease = PostgresCycleLock().acquire()
            assert lease is not None
            held.set()
            done.wait(timeout=20)
            PostgresCycleLock().release(lease)
            return lease.holder
        held.wait(timeout=20)
        try:
            busy = run_cycle(trigger="contender", wait_seconds=0)
            return busy.refused
        finally:
            done.set()

    holder, refused = in_threads(2, hold)
    assert refused == "lock_busy"
    assert holder
    assert connection.vendor == "postgresql"


def test_a_waiting_cycle_gets_the_lock_when_it_is_let_go_without_polling_for_it(settings: Any) -> None:
    """The wait is the server's: the lock passes the moment its holder lets go, and the waiter
    sends a handful of statements over a 0.6 s wait (the lock, then its fencing token's), not a
    poll every 5 ms (about a hundred)."""
    build_cluster()
    held = threading.Event()
    waiting = threading.Event()

    def holder_then_waiters(number: int) -> tuple[bool, int, float]:
        lock = PostgresCycleLock()
        if number == 0:
            lease = lock.acquire()
            assert lease is not None
            held.set()
            waiting.wait(timeout=20)
            time.sleep(0.6)
            let_go = time.monotonic()
            lock.release(lease)
            return True, 0, let_go
        held.wait(timeout=20)
        if number == 1:
            # Bounded: nobody lets go within 0.2 s, and the wait ends refused.
            refused = lock.acquire(wait_seconds=0.2)
            waiting.set()
            return refused is None, 0, 0.0
        waiting.wait(timeout=20)
        with CaptureQueriesContext(connection) as statements:
            lease = lock.acquire(wait_seconds=20)
        got = time.monotonic()
        assert lease is not None
        lock.release(lease)
        return True, len(statements), got

    (_, _, let_go), (refused, _, _), (_, statements, got) = in_threads(3, holder_then_waiters)
    assert refused
    assert statements <= 15, f"{statements} statements while waiting for the lock"
    assert 0 <= got - let_go < 0.5
    # The bound was the waiting transaction's alone: this session's lock_timeout is untouched.
    with connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        assert cursor.fetchone()[0] == "0"


def test_a_node_shrunk_while_a_cycle_commits_keeps_the_gpus_it_places_on(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """The cycle has placed a job on GPUs 2 and 3 and not yet committed when an edit takes the
    node down to 2 GPUs: the edit waits for the commit, then sees the job and is refused."""
    settings.SCHEDULER_TRIGGER = "none"
    cluster = build_cluster(node_gpus=(4,), tree=(("Quota1", None, 0), ("team-a", "Quota1", 0)))
    cluster.submit("pair", gpus=2, command="sleep 60")
    decide_and_commit(
        lease=CycleLease(token=issue_token(), holder="first", backend="none"), trigger="t", now=get_clock().now()
    )
    cluster.submit("second-pair", gpus=2, command="sleep 60")
    placed = threading.Event()
    real = cycle_module._record_allocations

    def record_then_linger(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        placed.set()
        threading.Event().wait(1.0)  # the commit stays open while the edit runs

    monkeypatch.setattr("scheduling.cycle._record_allocations", record_then_linger)

    def race(number: int) -> str:
        if number == 0:
            outcome = decide_and_commit(
                lease=CycleLease(token=issue_token(), holder="second", backend="none"),
                trigger="t",
                now=get_clock().now(),
            )
            return f"committed={outcome.committed}"
        assert placed.wait(timeout=20)
        try:
            update_node(actor=None, node=Node.objects.get(name="gpu-1"), gpus=2)
        except ValidationError as refused:
            return " ".join(refused.messages)
        return "shrunk"

    committed, edit = in_threads(2, race)
    assert committed == "committed=True"
    assert edit.startswith(
        "gpu-1 cannot go down to 2 GPUs while jobs hold the GPUs it would lose (GPU 2 by second-pair"
    )
    assert Node.objects.get(name="gpu-1").gpus == 4
    assert max(devices_booked()) == (Node.objects.get(name="gpu-1").pk, 3)


def test_a_reason_row_that_arrives_during_the_first_insert_turns_it_into_the_merge(settings: Any) -> None:
    """The first write into an empty reasons table is a plain insert; another commit's row for
    the same job, uncommitted when the table was seen empty, makes that insert fail on its key
    once it commits. Only the insert is undone (a savepoint), and the merge writes the reason."""
    settings.SCHEDULER_TRIGGER = "none"
    cluster = build_cluster(node_gpus=(8,))
    waiter = cluster.submit("waiter", gpus=16)
    PendingReason.objects.all().delete()
    revision = Job.objects.get(pk=waiter.pk).revision
    inserted, blocked = threading.Event(), threading.Event()

    def race(number: int) -> list[int] | None:
        if number == 0:  # the other commit: its row in, not yet committed, until the write waits on it
            with transaction.atomic():
                PendingReason.objects.create(job=waiter, revision=revision, code="no_fit", message="other", position=2)
                inserted.set()
                assert blocked.wait(timeout=20)
            return None
        assert inserted.wait(timeout=20)
        with transaction.atomic():
            return pending_reasons.write([(waiter.pk, revision, "no_fit", "mine", 1)])

    def watch(number: int) -> None:  # sets `blocked` once the write waits for the other's key
        assert inserted.wait(timeout=20)
        for _ in range(400):
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND datname = current_database()"
                )
                if cursor.fetchone()[0]:
                    blocked.set()
                    return
            time.sleep(0.05)

    results = in_threads(3, lambda number: watch(number) if number == 2 else race(number))
    assert results[1] == [waiter.pk]
    assert PendingReason.objects.get(job_id=waiter.pk).message == "mine"
