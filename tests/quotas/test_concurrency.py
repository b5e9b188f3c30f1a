"""Two conflicting writes at once never break the sum rule (real threads, real PostgreSQL row locks).

Each pair of operations would both pass if they read the tree before either wrote it. A
`pre_save` receiver holds every quota write for a moment, so without the locks both threads
would have read the old tree; with them the second waits, re-reads, and is refused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models.signals import pre_save

from quotas import services
from quotas.models import Quota

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="needs PostgreSQL: SQLite serialises whole write transactions (IMMEDIATE), so there are no row "
        "locks to test; run with DATABASE_URL=postgres://…",
    ),
]

HOLD_SECONDS = 0.3


@pytest.fixture
def siblings() -> dict[str, Quota]:
    """Quota1 = 128 over A = 48, B = 40, C = 30: 10 GPUs of room left in Quota1."""
    for index in range(16):
        services.create_node(actor=None, name=f"gpu-{index}", gpus=8)
    root = services.create_quota(actor=None, name="Quota1", gpus=128)
    return {
        "Quota1": root,
        "A": services.create_quota(actor=None, name="A", parent=root, gpus=48),
        "B": services.create_quota(actor=None, name="B", parent=root, gpus=40),
        "C": services.create_quota(actor=None, name="C", parent=root, gpus=30),
    }


@pytest.fixture
def slow_writes() -> Any:
    def hold(sender: type, **kwargs: Any) -> None:
        time.sleep(HOLD_SECONDS)

    pre_save.connect(hold, sender=Quota, dispatch_uid="test-slow-quota-writes")
    yield
    pre_save.disconnect(sender=Quota, dispatch_uid="test-slow-quota-writes")


def run_at_once(*operations: Callable[[], object]) -> list[object]:
    """Each operation in its own thread and database connection, released together."""
    outcomes: list[object] = [None] * len(operations)
    start = threading.Barrier(len(operations))

    def worker(position: int, operation: Callable[[], object]) -> None:
        try:
            start.wait()
            outcomes[position] = operation()
        except Exception as error:  # noqa: BLE001 - whatever it raised is the outcome the test reads
            outcomes[position] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, op)) for i, op in enumerate(operations)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return outcomes


def children_sum() -> float:
    return sum(Quota.objects.filter(parent__name="Quota1").values_list("gpus", flat=True))


def test_two_transfers_draining_one_source_do_not_both_succeed(siblings: dict[str, Quota], slow_writes: Any) -> None:
    outcomes = run_at_once(
        lambda: services.transfer_quota(actor=None, source=siblings["A"], target=siblings["B"], gpus=40),
        lambda: services.transfer_quota(actor=None, source=siblings["A"], target=siblings["C"], gpus=40),
    )

    refused = [outcome for outcome in outcomes if isinstance(outcome, ValidationError)]
    assert len(refused) == 1, outcomes
    assert refused[0].message_dict == {"gpus": ["A has 8 GPUs; it cannot give 40 GPUs."]}
    assert Quota.objects.get(name="A").gpus == 8
    assert children_sum() == 118


def test_two_scales_into_the_same_room_do_not_both_succeed(siblings: dict[str, Quota], slow_writes: Any) -> None:
    outcomes = run_at_once(
        lambda: services.scale_quota(actor=None, quota=siblings["B"], gpus=50),
        lambda: services.scale_quota(actor=None, quota=siblings["C"], gpus=40),
    )

    refused = [outcome for outcome in outcomes if isinstance(outcome, ValidationError)]
    assert len(refused) == 1, outcomes
    assert children_sum() == 128


def test_a_transfer_and_a_scale_of_its_source_serialise(siblings: dict[str, Quota], slow_writes: Any) -> None:
    """The scale down and the transfer out of A both fit alone; together A would go below 0."""
    outcomes = run_at_once(
        lambda: services.transfer_quota(actor=None, source=siblings["A"], target=siblings["B"], gpus=40),
        lambda: services.scale_quota(actor=None, quota=siblings["A"], gpus=20),
    )

    a_gpus = Quota.objects.get(name="A").gpus
    assert a_gpus >= 0
    assert children_sum() <= 128
    # Whichever ran first, the other saw its result: the transfer (A 48→8, B 40→80) leaves 128 − 80 − 30 = 18
    # for A, so the scale to 20 is refused; or the scale (A 48→20) leaves A too little to give 40.
    assert sum(isinstance(outcome, ValidationError) for outcome in outcomes) == 1, outcomes
