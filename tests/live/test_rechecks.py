"""The periodic re-check of every socket of a process in one pass (`live.selectors.still_visible`):
its verdicts, and its cost, which does not grow with sockets of `cluster` alone."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from live.selectors import still_visible
from tests.live.test_socket import world  # noqa: F401 (a fixture)
from workspaces.models import Membership

pytestmark = pytest.mark.django_db(transaction=True)


def test_verdicts_follow_sign_ins_and_memberships(world: dict[str, Any]) -> None:  # noqa: F811
    dave, wanda = world["dave"], world["wanda"]
    mine, theirs = f"job:{world['mine'].pk}", f"job:{world['theirs'].pk}"
    sockets = [(dave.pk, None, ["cluster", mine, theirs]), (wanda.pk, None, [theirs]), (dave.pk, "gone", ["cluster"])]
    assert still_visible(sockets) == [(True, {"cluster", mine}), (True, {theirs}), (False, set())]
    Membership.objects.filter(user=wanda).delete()
    wanda.is_active = False
    wanda.save(update_fields=["is_active"])
    assert still_visible(sockets)[1] == (False, set())


def test_sockets_of_cluster_alone_cost_two_queries_however_many(world: dict[str, Any], make_user: Any) -> None:  # noqa: F811
    users = [make_user(f"watcher{index}") for index in range(30)]
    with CaptureQueriesContext(connection) as queries:
        verdicts = still_visible([(user.pk, None, ["cluster"]) for user in users])
    assert verdicts == [(True, {"cluster"})] * 30
    assert len(queries.captured_queries) <= 2
