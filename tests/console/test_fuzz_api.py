"""Schemathesis against our own OpenAPI schema, in process, bounded for CI.

Every operation of /api/schema/ is called with examples drawn from the schema (and data that
breaks it), as a platform admin and as a developer, on the demo cluster. Each answer must stay
inside the schema: no 5xx, a documented status, a body of the documented shape, and data that
breaks the schema refused.

One check is left out, on purpose: `positive_data_acceptance` expects every schema-valid request
to succeed. Ours refuse some of those for domain rules a schema cannot state (a quota name
already taken, a parent that does not exist, a transfer larger than the giver's guarantee);
those are 400s with a sentence, documented in docs/reliability.md. The long run, with the CLI,
its command and figures, is in docs/reliability.md too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.specs.openapi.checks import positive_data_acceptance

pytestmark = pytest.mark.django_db

# Operations that would sign the fuzzer itself out (revoking its token or deactivating it) stop
# every later call from meaning anything; they have their own tests.
SELF_DEFEATING = r"/auth/sign-out-everywhere/|/users/"

FUZZ_SETTINGS = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


# Loaded at collection: the schema view reads no table, and each operation becomes its own test,
# which xdist can spread over the workers.
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", WSGIHandler()).exclude(path_regex=SELF_DEFEATING)


@pytest.fixture(autouse=True)
def connections_kept_across_requests() -> Iterator[None]:
    """What Django's test client does for its own requests: the handler's end-of-request hook
    would return the test's connection to the pool mid-transaction (CONN_MAX_AGE is 0 with the
    PostgreSQL pool), and the next query fails with "Cannot open a new connection in an atomic
    block". SQLite's in-memory test database never closes, which hid it there."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def tokens(db: None) -> dict[str, str]:
    """The demo cluster, and a token for its platform admin and for one of its developers."""
    call_command("load_demo")
    users = get_user_model().objects.filter(username__in=["admin", "dave"])
    return {user.username: Token.objects.get_or_create(user=user)[0].key for user in users}


@schema.parametrize()
@FUZZ_SETTINGS
def test_every_answer_to_a_platform_admin_is_inside_the_schema(case: Any, tokens: dict[str, str]) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Token {tokens['admin']}"},
        excluded_checks=[positive_data_acceptance],
    )


@schema.parametrize()
@FUZZ_SETTINGS
def test_every_answer_to_a_developer_is_inside_the_schema(case: Any, tokens: dict[str, str]) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Token {tokens['dave']}"},
        excluded_checks=[positive_data_acceptance],
    )
