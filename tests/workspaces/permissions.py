"""Reusable permission fixtures: a world with an owner, members of every role and outsiders.

The world (PAI's Scenario 3): Quota1 (128 GPUs) → Quota1.1 (48) and Quota1.2 (80);
workspace-b is bound to Quota1.1, workspace-c to Quota1.2. Everyone below is a persona of
workspace-b ("own"); workspace-c ("foreign") has its own admin and developer. Quota1.1 has one
rule: the basic roles that may submit, the custom role "submitter", and one authorized
non-member. The table helper `expect` runs one request as one persona and says what came back.

Import the fixtures into a conftest (`from tests.workspaces.permissions import *`) to reuse them,
e.g. for the jobs rows of the matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from quotas.models import Quota, ResourcePool
from workspaces import services
from workspaces.models import JOB_SUBMIT, Workspace

# Every persona of the matrix; "anonymous" is no user at all.
PERSONAS = (
    "platform_admin",
    "workspace_admin",
    "developer",
    "operator",
    "labeling_admin",
    "visitor",
    "custom_role",
    "authorized_non_member",
    "non_member",
    "anonymous",
)
MEMBER_ROLES = {
    "workspace_admin": "admin",
    "developer": "developer",
    "operator": "operator",
    "labeling_admin": "labeling_admin",
    "visitor": "visitor",
    "custom_role": "submitter",
}


@dataclass
class PermissionWorld:
    pool: ResourcePool
    quotas: dict[str, Quota]
    own: Workspace
    foreign: Workspace
    users: dict[str, User | None] = field(default_factory=dict)
    foreign_users: dict[str, User] = field(default_factory=dict)

    def user(self, persona: str) -> User | None:
        return self.users[persona]

    def ids(self) -> dict[str, Any]:
        """What URL templates in a table may name: {own}, {foreign}, {quota_own}, {quota_foreign} …"""
        return {
            "own": self.own.pk,
            "foreign": self.foreign.pk,
            "quota_own": self.quotas["Quota1.1"].pk,
            "quota_foreign": self.quotas["Quota1.2"].pk,
            "quota_root": self.quotas["Quota1"].pk,
            "own_member": self.own.memberships.get(user=self.users["developer"]).pk,
            "foreign_member": self.foreign.memberships.get(user=self.foreign_users["developer"]).pk,
            "own_spare_role": self.own.custom_roles.get(name="auditor").pk,
            "foreign_role": self.foreign.custom_roles.get(name="auditor").pk,
        }


def build_quota_tree() -> tuple[ResourcePool, dict[str, Quota]]:
    pool = ResourcePool.objects.create(name=ResourcePool.DEFAULT_NAME)
    root = Quota.objects.create(pool=pool, name="Quota1", gpus=128)
    return pool, {
        "Quota1": root,
        "Quota1.1": Quota.objects.create(pool=pool, name="Quota1.1", gpus=48, parent=root),
        "Quota1.2": Quota.objects.create(pool=pool, name="Quota1.2", gpus=80, parent=root),
    }


def make_account(username: str, *, platform_admin: bool = False) -> User:
    user: User = get_user_model().objects.create_user(
        username=username, password=None, is_superuser=platform_admin, is_staff=platform_admin
    )
    return user


def build_world() -> PermissionWorld:
    pool, quotas = build_quota_tree()
    own = services.create_workspace(actor=None, name="workspace-b", quotas=[quotas["Quota1.1"]])
    foreign = services.create_workspace(actor=None, name="workspace-c", quotas=[quotas["Quota1.2"]])
    world = PermissionWorld(pool=pool, quotas=quotas, own=own, foreign=foreign)
    world.users["platform_admin"] = make_account("root", platform_admin=True)
    services.create_custom_role(actor=None, workspace=own, name="submitter", permissions=[JOB_SUBMIT])
    for workspace in (own, foreign):  # held by nobody, so it may be deleted
        services.create_custom_role(actor=None, workspace=workspace, name="auditor", permissions=[])
    for persona, role in MEMBER_ROLES.items():
        user = make_account(f"b-{persona.replace('_', '-')}")
        services.add_member(actor=None, workspace=own, user=user, role=role)
        world.users[persona] = user
    world.users["authorized_non_member"] = make_account("guest")
    world.users["non_member"] = make_account("stranger")
    world.users["anonymous"] = None
    services.set_scheduling_config(
        actor=None,
        workspace=own,
        rules=[
            {
                "quota": "Quota1.1",
                "roles": ["admin", "developer", "operator", "labeling_admin", "submitter"],
                "authorized_users": ["guest"],
            }
        ],
    )
    for persona, role in (("workspace_admin", "admin"), ("developer", "developer")):
        user = make_account(f"c-{persona.replace('_', '-')}")
        services.add_member(actor=None, workspace=foreign, user=user, role=role)
        world.foreign_users[persona] = user
    return world


@pytest.fixture
def world(db: None) -> PermissionWorld:
    return build_world()


def client_as(world: PermissionWorld, persona: str) -> APIClient:
    """An API client signed in as a persona of `world` (anonymous: not signed in)."""
    client = APIClient()
    user = world.user(persona)
    if user is not None:
        client.force_authenticate(user=user)
    return client


@pytest.fixture
def persona_client(world: PermissionWorld) -> Callable[[str], APIClient]:
    """An API client signed in as a persona of the world (anonymous: not signed in)."""
    return lambda persona: client_as(world, persona)


@dataclass(frozen=True)
class Endpoint:
    """One row of a matrix: a method on a URL template, with a body built from the world."""

    name: str
    method: str
    url: str
    body: Callable[[PermissionWorld], dict[str, Any]] | None = None

    def call(self, client: APIClient, world: PermissionWorld) -> Any:
        payload = self.body(world) if self.body else None
        url = self.url.format(**world.ids())
        return getattr(client, self.method.lower())(url, payload, format="json")


def matrix_cases(endpoints: list[Endpoint], expected: dict[str, dict[str, int]]) -> list[Any]:
    """pytest.param(endpoint, persona, status) for every endpoint × persona, with readable ids.

    `expected[endpoint.name]` maps every persona in PERSONAS to the status it must get; a
    missing persona is a mistake in the table, so it fails loudly here.
    """
    cases = []
    for endpoint in endpoints:
        row = expected[endpoint.name]
        missing = set(PERSONAS) - set(row)
        if missing:
            raise AssertionError(f"matrix row {endpoint.name} lacks {sorted(missing)}")
        for persona in PERSONAS:
            cases.append(pytest.param(endpoint, persona, row[persona], id=f"{endpoint.name}-{persona}"))
    return cases


def row(
    *,
    platform_admin: int,
    workspace_admin: int,
    developer: int,
    operator: int,
    labeling_admin: int,
    visitor: int,
    custom_role: int,
    authorized_non_member: int,
    non_member: int,
    anonymous: int = 401,
) -> dict[str, int]:
    """A row of expected statuses, one keyword per persona so a table cannot skip one."""
    return {
        "platform_admin": platform_admin,
        "workspace_admin": workspace_admin,
        "developer": developer,
        "operator": operator,
        "labeling_admin": labeling_admin,
        "visitor": visitor,
        "custom_role": custom_role,
        "authorized_non_member": authorized_non_member,
        "non_member": non_member,
        "anonymous": anonymous,
    }
