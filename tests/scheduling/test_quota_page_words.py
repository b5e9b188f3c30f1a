"""The quota pages say what happens (issue 28): a fair share below the guarantee says it is capped
by what the quota's jobs ask for; a platform admin with no quota is told to start with New quota,
a member why no quota shows. Two 8-GPU nodes; Quota1 (16) → team-a (8), team-b (8)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scheduling import services
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _fair_share_words(client: Client, cluster: Cluster, quota: str) -> str:
    page = client.get(f"/quotas/{cluster.quotas[quota].pk}/").content.decode()
    match = re.search(r'data-testid="fair-share-sum">(.*?)</p>', page, re.S)
    assert match is not None, page[:2000]
    return " ".join(re.sub(r"<[^>]+>", "", match[1]).split())  # the live cells' spans left out


@pytest.mark.parametrize(
    ("asked", "words"),
    [
        (
            0,
            "Guaranteed 8, but a fair share is capped by what its jobs ask for, and they ask 0 GPUs: fair share "
            "0 GPUs. The rest of its guarantee is lent to other quotas' jobs until its own jobs ask for it, "
            "and then taken back.",
        ),
        (
            3,
            "Guaranteed 8, but a fair share is capped by what its jobs ask for, and they ask 3 GPUs: "
            "fair share 3 GPUs.",
        ),
    ],
    ids=["asks-nothing", "asks-3"],
)
def test_a_fair_share_below_the_guarantee_says_what_caps_it(
    cluster: Cluster, platform_admin: User, asked: int, words: str
) -> None:
    cluster.submit("wide", "team-a", gpus=8, replicas=2)  # borrows all of team-b's idle guarantee
    if asked:
        cluster.submit("small", "team-b", gpus=asked)
    services.converge()
    said = _fair_share_words(_client(platform_admin), cluster, "team-b")
    assert said.startswith(words), said
    assert "-" not in said.split("GPUs")[0]  # no negative share of idle GPUs


def test_a_fair_share_above_the_guarantee_still_adds_the_share_of_idle_gpus(
    cluster: Cluster, platform_admin: User
) -> None:
    cluster.submit("wide", "team-a", gpus=8, replicas=2)
    services.converge()
    said = _fair_share_words(_client(platform_admin), cluster, "team-a")
    assert said == "Guaranteed 8 + share of idle GPUs 8 (weight 8, rank 0) = fair share 16 GPUs."


@pytest.mark.parametrize("view", ["list", "overview"])
def test_a_platform_admin_with_no_quota_is_told_to_start_with_new_quota(
    db: None, platform_admin: User, make_user: object, view: str
) -> None:
    page = _client(platform_admin).get(f"/quotas/?view={view}").content.decode()
    assert '<strong>No quota yet.</strong> Start with <a href="/quotas/new/"' in page
    assert "No quota is visible to you" not in page


@pytest.mark.parametrize("view", ["list", "overview"])
def test_a_member_with_no_quota_reads_why_there_is_none(db: None, make_user: object, view: str) -> None:
    member = make_user("mia")  # type: ignore[operator]
    assert isinstance(member, User)
    page = _client(member).get(f"/quotas/?view={view}").content.decode()
    assert "No quota is visible to you: quotas appear here once a workspace you belong to is bound to one." in page
    assert "New quota" not in page
