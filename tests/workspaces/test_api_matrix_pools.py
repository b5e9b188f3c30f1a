"""The permission matrix of `pools/` (issue 24): platform admins write; everyone signed in reads
the pools of the quotas they may see. The world's quotas are all in the default pool; a second
pool, "spare", holds no quota, so only the platform admin sees it (404 for everyone else)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from quotas.models import ResourcePool
from tests.workspaces.permissions import Endpoint, PermissionWorld, matrix_cases, row

SIGNED_IN_WITH_A_QUOTA = row(
    platform_admin=200,
    workspace_admin=200,
    developer=200,
    operator=200,
    labeling_admin=200,
    visitor=200,
    custom_role=200,
    authorized_non_member=200,
    non_member=404,
)


def platform_only(success: int, *, seen_by_members: bool) -> dict[str, int]:
    """A write: members who see the pool are told why not (403); those who do not see it get 404."""
    members = 403 if seen_by_members else 404
    return row(
        platform_admin=success,
        workspace_admin=members,
        developer=members,
        operator=members,
        labeling_admin=members,
        visitor=members,
        custom_role=members,
        authorized_non_member=members,
        non_member=404,
    )


POOL_ENDPOINTS = [
    Endpoint("pools-list", "GET", "/api/v1/pools/"),
    Endpoint("pools-create", "POST", "/api/v1/pools/", lambda w: {"name": "a100", "placement": "spread"}),
    Endpoint("default-get", "GET", "/api/v1/pools/{pool_default}/"),
    Endpoint("default-patch", "PATCH", "/api/v1/pools/{pool_default}/", lambda w: {"description": "H100 nodes"}),
    Endpoint("spare-get", "GET", "/api/v1/pools/{pool_spare}/"),
    Endpoint("spare-patch", "PATCH", "/api/v1/pools/{pool_spare}/", lambda w: {"placement": "spread"}),
    Endpoint("spare-delete", "DELETE", "/api/v1/pools/{pool_spare}/"),
]

POOL_EXPECTED = {
    "pools-list": row(
        platform_admin=200,
        workspace_admin=200,
        developer=200,
        operator=200,
        labeling_admin=200,
        visitor=200,
        custom_role=200,
        authorized_non_member=200,
        non_member=200,
    ),
    "pools-create": row(
        platform_admin=201,
        workspace_admin=403,
        developer=403,
        operator=403,
        labeling_admin=403,
        visitor=403,
        custom_role=403,
        authorized_non_member=403,
        non_member=403,
    ),
    # A guest whom a rule lets submit to Quota1.1 sees that quota, and so its pool.
    "default-get": SIGNED_IN_WITH_A_QUOTA,
    "default-patch": platform_only(200, seen_by_members=True),
    "spare-get": platform_only(200, seen_by_members=False),
    "spare-patch": platform_only(200, seen_by_members=False),
    "spare-delete": platform_only(204, seen_by_members=False),
}


@pytest.fixture
def spare(world: PermissionWorld) -> ResourcePool:
    return ResourcePool.objects.create(name="spare")


@pytest.mark.parametrize(("endpoint", "persona", "expected"), matrix_cases(POOL_ENDPOINTS, POOL_EXPECTED))
def test_pool_endpoints(
    world: PermissionWorld,
    spare: ResourcePool,
    persona_client: Callable[[str], APIClient],
    endpoint: Endpoint,
    persona: str,
    expected: int,
) -> None:
    payload = endpoint.body(world) if endpoint.body else None
    url = endpoint.url.format(pool_default=world.pool.pk, pool_spare=spare.pk)
    response = getattr(persona_client(persona), endpoint.method.lower())(url, payload, format="json")
    assert response.status_code == expected, response.content
    if expected == 403:
        assert "You do not have permission" not in response.json()["detail"]


VISIBLE_POOLS = {
    "platform_admin": ["default", "spare"],
    "developer": ["default"],
    "authorized_non_member": ["default"],
    "non_member": [],
}


@pytest.mark.parametrize("persona", list(VISIBLE_POOLS))
def test_the_pool_list_holds_only_the_pools_of_visible_quotas(
    world: PermissionWorld, spare: ResourcePool, persona_client: Callable[[str], APIClient], persona: str
) -> None:
    body = persona_client(persona).get("/api/v1/pools/").json()
    assert [pool["name"] for pool in body["results"]] == VISIBLE_POOLS[persona]
