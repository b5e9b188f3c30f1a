"""Shared fixtures of the console's page tests: PAI's example tree with one user per role,
signing in through the real sign-in form, and the axe accessibility check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from quotas import services as quota_services
from quotas.models import Quota
from scheduling import services as job_services
from tests.conftest import PASSWORD
from workspaces import services as workspace_services

# One user per role the pages tell apart.
ROLES = ("platform-admin", "workspace-admin", "developer", "outsider")


@pytest.fixture
def pai_world(make_user: Callable[..., AbstractUser], settings: Any) -> dict[str, AbstractUser]:
    """PAI's example: 4 nodes × 8 GPUs; Quota1 = 32 → Quota1.1 = 12, Quota1.2 = 20. train-b (3 × 8)
    borrows beyond Quota1.1's guarantee; workspace-b is bound to Quota1.1."""
    settings.SCHEDULER_TRIGGER = "inline"
    settings.SCHEDULER_PUBLISH_EVENTS = False
    users = {
        "platform-admin": make_user("platform-admin", platform_admin=True),
        "workspace-admin": make_user("wanda"),
        "developer": make_user("dave"),
        "outsider": make_user("olga"),
    }
    for index in range(1, 5):
        quota_services.create_node(actor=None, name=f"gpu-{index}", gpus=8)
    root = quota_services.create_quota(actor=None, name="Quota1", gpus=32, child_preemption=True)
    team_b = quota_services.create_quota(actor=None, name="Quota1.1", parent=root, gpus=12)
    quota_services.create_quota(actor=None, name="Quota1.2", parent=root, gpus=20)
    workspace = workspace_services.create_workspace(actor=None, name="workspace-b", quotas=[team_b])
    workspace_services.add_member(actor=None, workspace=workspace, user=users["workspace-admin"], role="admin")
    workspace_services.add_member(actor=None, workspace=workspace, user=users["developer"], role="developer")
    job_services.submit_job(
        actor=users["developer"], workspace=workspace, quota=team_b, name="train-b", kind="training", gpus=8, replicas=3
    )
    job_services.converge()
    return users


def quota_id(name: str) -> int:
    return int(Quota.objects.get(name=name).pk)


@pytest.fixture
def sign_in(live_server: LiveServer) -> Callable[[Page, str], None]:
    """Signs in through the sign-in form, as a person does."""

    def sign(page: Page, username: str) -> None:
        page.goto(f"{live_server.url}/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_test_id("signed-in-user")).to_contain_text(username)

    return sign


def check_accessibility(page: Page) -> None:
    """Fails on any serious or critical axe-core violation of the page as it is now."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    bad = [v for v in results.response["violations"] if v.get("impact") in ("serious", "critical")]
    described = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[node['target'] for node in v['nodes']][:5]}" for v in bad
    ]
    assert not bad, "axe found:\n" + "\n".join(described)
