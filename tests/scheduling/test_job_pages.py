"""Submit job, Jobs and Job through the Django client: the estimate's three sentences, the same
refusal on submit beside the field, Submit again, filters in the URL, constant queries, cancel
through Preview and Confirm, and the permission matrix (own and foreign workspace × each role)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from quotas.models import Quota
from scheduling import services as job_services
from scheduling.models import Job
from tests.scheduling.test_pages import build_pai
from workspaces import services as workspace_services
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

# Workspace-b's roles (dave developer, victor visitor, plus an admin and an operator), a member of
# workspace-c only (erin), a user of no workspace (olga) and the platform admin.
ROLES = ("admin", "wanda", "otto", "dave", "victor", "erin", "olga")


@pytest.fixture
def world(make_user: Callable[..., AbstractUser], settings: Any) -> dict[str, AbstractUser]:
    settings.SCHEDULER_TRIGGER = "inline"
    users = build_pai(make_user)
    workspace = Workspace.objects.get(name="workspace-b")
    for username, role in (("wanda", "admin"), ("otto", "operator")):
        users[username] = make_user(username)
        workspace_services.add_member(actor=None, workspace=workspace, user=users[username], role=role)
    users["olga"] = make_user("olga")
    return users


def client_as(username: str) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


def ids() -> dict[str, int]:
    return {
        "ws-b": Workspace.objects.get(name="workspace-b").pk,
        "ws-c": Workspace.objects.get(name="workspace-c").pk,
        "q-b": Quota.objects.get(name="Quota1.1").pk,
        "q-c": Quota.objects.get(name="Quota1.2").pk,
    }


def job_form(**changes: Any) -> dict[str, Any]:
    known = ids()
    form = {
        "workspace": known["ws-b"],
        "quota": known["q-b"],
        "name": "small",
        "kind": "training",
        "gpus": "1",
        "replicas": "1",
        "priority": "3",
        "preemptible": "on",
        "grace_seconds": "0",
        "quotas_for": known["ws-b"],
    }
    form.update(changes)
    return {key: value for key, value in form.items() if value is not None}


# --- the estimate's three sentences -----------------------------------------------------------


def test_the_estimate_says_where_a_job_would_start(world: dict[str, AbstractUser]) -> None:
    job_services.cancel_job(actor=None, job=Job.objects.get(name="train-c"))  # frees one node's 8 GPUs
    answer = client_as("dave").post("/jobs/new/estimate/", job_form(gpus="4"))
    assert answer.status_code == 200
    text = answer.content.decode()
    assert 'data-verdict="starts"' in text
    assert re.search(r"Starts now on gpu-\d, GPUs 0–3\.", text)


def test_the_estimate_of_a_job_beyond_the_free_gpus_waits_with_numbers(world: dict[str, AbstractUser]) -> None:
    answer = client_as("dave").post("/jobs/new/estimate/", job_form(gpus="8", replicas="4"))
    text = answer.content.decode()
    assert 'data-verdict="waits"' in text
    assert "Waits: needs 32 GPUs; 0 are free in the pool" in text


def test_the_estimate_sees_a_change_made_since_the_last_one(world: dict[str, AbstractUser]) -> None:
    """The cluster read is reused between estimates only while nothing changed (a cancel did)."""
    dave = client_as("dave")
    assert 'data-verdict="waits"' in dave.post("/jobs/new/estimate/", job_form(gpus="4")).content.decode()
    job_services.cancel_job(actor=None, job=Job.objects.get(name="train-c"))
    assert 'data-verdict="starts"' in dave.post("/jobs/new/estimate/", job_form(gpus="4")).content.decode()


def test_the_estimate_and_the_submit_refuse_a_cap_with_the_same_sentence(world: dict[str, AbstractUser]) -> None:
    workspace = Workspace.objects.get(name="workspace-b")
    workspace_services.set_scheduling_config(
        actor=None,
        workspace=workspace,
        rules=[
            {
                "quota": "Quota1.1",
                "roles": ["developer", "operator", "admin"],
                "caps": [{"priority_min": 1, "priority_max": 3, "max_gpus_per_job": 8}],
            }
        ],
    )
    dave = client_as("dave")
    estimate = dave.post("/jobs/new/estimate/", job_form(gpus="8", replicas="2")).content.decode()
    sentence = "asks 16 GPUs per job; the cap for priority 3 on Quota1.1 is 8"
    assert 'data-verdict="refused"' in estimate
    assert f"Refused: {sentence}." in estimate
    assert 'Per job</dt><dd class="num">8 GPUs' in estimate  # the caps beside it
    submitted = dave.post("/jobs/new/", job_form(gpus="8", replicas="2", step="submit"))
    assert submitted.status_code == 200
    assert 'data-testid="error-gpus">A' + sentence[1:] in submitted.content.decode()
    assert not Job.objects.filter(name="small").exists()


def test_a_bad_number_is_refused_beside_its_field_with_the_bound(world: dict[str, AbstractUser]) -> None:
    answer = client_as("dave").post("/jobs/new/", job_form(priority="12", step="submit"))
    assert "Priority must be at most 9." in answer.content.decode()
    estimate = client_as("dave").post("/jobs/new/estimate/", job_form(gpus="0.0005")).content.decode()
    assert "GPUs per replica" in estimate and 'data-verdict="incomplete"' in estimate


def test_a_share_of_a_gpu_is_accepted_to_three_decimals(world: dict[str, AbstractUser]) -> None:
    answer = client_as("dave").post("/jobs/new/", job_form(gpus="0.125", name="share", step="submit"))
    assert answer.status_code == 302
    assert Job.objects.get(name="share").gpus == 0.125


# --- submit, Submit again, the quota list -----------------------------------------------------


def test_submit_redirects_to_the_job_page(world: dict[str, AbstractUser]) -> None:
    answer = client_as("dave").post("/jobs/new/", job_form(name="notebook-1", kind="notebook", priority="5"))
    job = Job.objects.get(name="notebook-1")
    assert answer.status_code == 302 and answer["Location"] == f"/jobs/{job.pk}/"
    assert (job.owner.username, job.kind, job.priority) == ("dave", "notebook", 5)  # type: ignore[union-attr]


def test_submit_again_fills_the_form_from_the_job(world: dict[str, AbstractUser]) -> None:
    job = Job.objects.get(name="huge-b")
    page = client_as("dave").get(f"/jobs/new/?from={job.pk}").content.decode()
    assert 'value="huge-b-again"' in page
    assert 'name="replicas" value="5"' in page
    assert client_as("erin").get(f"/jobs/new/?from={job.pk}").status_code == 404


def test_the_quota_list_says_why_a_quota_is_missing(world: dict[str, AbstractUser]) -> None:
    workspace = Workspace.objects.get(name="workspace-b")
    workspace_services.set_scheduling_config(
        actor=None,
        workspace=workspace,
        rules=[{"quota": "Quota1.1", "roles": ["operator"]}],
    )
    page = client_as("dave").get("/jobs/new/").content.decode()
    assert "No quota of workspace-b is yours to use." in page
    assert "Quota1.1</strong> is not offered: Role &#x27;developer&#x27; may not use Quota1.1 in workspace-b" in page
    assert ">Submit</button>" not in page


def test_a_visitor_never_sees_a_submit_button(world: dict[str, AbstractUser]) -> None:
    victor = client_as("victor")
    assert ">Submit</button>" not in victor.get("/jobs/new/").content.decode()
    assert ">Submit job</a>" not in victor.get("/jobs/").content.decode()
    assert ">Submit job</a>" in client_as("dave").get("/jobs/").content.decode()


def test_a_new_workspace_brings_its_quota_list_out_of_band(world: dict[str, AbstractUser]) -> None:
    answer = client_as("admin").post("/jobs/new/estimate/", job_form(workspace=ids()["ws-c"], quota=ids()["q-b"]))
    text = answer.content.decode()
    assert 'id="quota-block" hx-swap-oob="true"' in text
    assert f'<option value="{ids()["q-c"]}" selected>Quota1.2</option>' in text
    assert "Refused" not in text  # the estimate is for workspace-c's quota, not the one left behind
    assert 'id="submit-actions" hx-swap-oob="true"' in text


# --- the permission matrix ------------------------------------------------------------------

# (role, own workspace-b: GET /jobs/new/, POST submit, POST estimate, job page, cancel page)
MATRIX = {
    "admin": (200, 302, 200, 200, 200),
    "wanda": (200, 302, 200, 200, 200),
    "otto": (200, 302, 200, 200, 200),
    "dave": (200, 302, 200, 200, 200),
    "victor": (200, 403, 200, 200, 403),
    "erin": (404, 404, 404, 404, 404),  # workspace-b is foreign to erin
    "olga": (403, 403, 403, 404, 404),  # no workspace at all
}


@pytest.mark.parametrize("role", ROLES)
def test_permission_matrix_on_workspace_b(world: dict[str, AbstractUser], role: str) -> None:
    client = client_as(role)
    known = ids()
    job = Job.objects.get(name="train-b")
    statuses = (
        client.get(f"/jobs/new/?workspace={known['ws-b']}").status_code,
        client.post("/jobs/new/", job_form(name=f"by-{role}", step="submit")).status_code,
        client.post("/jobs/new/estimate/", job_form()).status_code,
        client.get(f"/jobs/{job.pk}/").status_code,
        client.get(f"/jobs/{job.pk}/cancel/").status_code,
    )
    assert statuses == MATRIX[role]
    assert Job.objects.filter(name=f"by-{role}").exists() == (MATRIX[role][1] == 302)


@pytest.mark.parametrize("role", ["victor", "olga"])
def test_forbidden_answers_carry_a_sentence(world: dict[str, AbstractUser], role: str) -> None:
    answer = client_as(role).post("/jobs/new/", job_form(step="submit"))
    assert answer.status_code == 403
    expected = "may not use Quota1.1 in workspace-b" if role == "victor" else "You may not submit jobs"
    assert expected in answer.content.decode()


def test_a_visitor_is_refused_cancel_with_the_reason(world: dict[str, AbstractUser]) -> None:
    job = Job.objects.get(name="train-b")
    refused = client_as("victor").post(f"/jobs/{job.pk}/cancel/", {"step": "confirm"})
    assert refused.status_code == 403
    assert "Role &#x27;visitor&#x27; in workspace-b may not manage" in refused.content.decode()


@pytest.mark.parametrize("role", ["dave", "wanda", "otto"])
def test_a_foreign_workspace_is_a_404(world: dict[str, AbstractUser], role: str) -> None:
    client = client_as(role)
    known = ids()
    foreign = job_form(workspace=known["ws-c"], quota=known["q-c"])
    assert client.get(f"/jobs/new/?workspace={known['ws-c']}").status_code == 404
    assert client.post("/jobs/new/", foreign).status_code == 404
    assert client.post("/jobs/new/estimate/", foreign).status_code == 404
    train_c = Job.objects.get(name="train-c")
    assert client.get(f"/jobs/{train_c.pk}/").status_code == 404
    assert client.post(f"/jobs/{train_c.pk}/cancel/", {"step": "confirm"}).status_code == 404
    assert Job.objects.get(pk=train_c.pk).state != "cancelled"


# --- Jobs and Job -----------------------------------------------------------------------------


def test_filters_narrow_the_list_and_stay_in_the_pager(world: dict[str, AbstractUser]) -> None:
    admin = client_as("admin")
    known = ids()
    page = admin.get(f"/jobs/?workspace={known['ws-b']}&state=pending").content.decode()
    assert page.count('data-testid="job-row"') == 1 and 'data-job="huge-b"' in page
    assert "#1 in Quota1.1" in page  # queue position and reason code beside the state
    assert admin.get("/jobs/?user=erin").content.decode().count('data-testid="job-row"') == 1
    assert admin.get("/jobs/?kind=notebook").content.decode().count('data-testid="job-row"') == 0
    assert admin.get(f"/jobs/?quota={known['q-c']}").content.decode().count('data-testid="job-row"') == 1


def test_the_list_is_paginated_with_a_constant_number_of_queries(world: dict[str, AbstractUser]) -> None:
    client = client_as("dave")

    def queries(path: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(path).status_code == 200
        return len(captured.captured_queries)

    few = queries("/jobs/")
    workspace, quota = Workspace.objects.get(name="workspace-b"), Quota.objects.get(name="Quota1.1")
    dave = get_user_model().objects.get(username="dave")
    job_services.submit_jobs(
        actor=dave,
        submissions=[
            job_services.JobSubmission(workspace=workspace, quota=quota, name=f"n-{i}", kind="notebook", gpus=0.5)
            for i in range(120)
        ],
    )
    assert queries("/jobs/") == few
    second = client.get("/jobs/?kind=notebook&page=2").content.decode()
    assert "Page 2 of 3" in second and "kind=notebook&amp;page=3" in second


def test_the_job_page_polls_its_live_block_until_the_job_ends(world: dict[str, AbstractUser]) -> None:
    job = Job.objects.get(name="train-b")
    client = client_as("dave")
    live = client.get(f"/jobs/{job.pk}/?part=live").content.decode()
    assert 'hx-trigger="every 2s, live:changed"' in live and "data-poll" in live and "Running" in live
    assert "gpu-" in live  # the placement
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Submit again" in page and "Cancel job" in page
    job_services.cancel_job(actor=None, job=job)
    assert "hx-trigger" not in client.get(f"/jobs/{job.pk}/?part=live").content.decode()


def test_the_live_block_brings_the_history_out_of_band_to_those_who_may_see_the_job(
    world: dict[str, AbstractUser],
) -> None:
    """The block read again on a live change carries the History too (docs/live.md), so an event
    shows without a reload; it is the page's own History, under the page's own 404."""
    job = Job.objects.get(name="train-b")
    client = client_as("dave")
    live = client.get(f"/jobs/{job.pk}/?part=live").content.decode()
    assert live.count('id="job-history"') == 1 and 'id="job-history" hx-swap-oob="true"' in live
    assert re.findall(r'<tr data-testid="job-event"><td class="when">[^<]*</td><td>([^<]*)</td>', live)[:1] == [
        "Submitted"
    ]
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert page.count('id="job-history"') == 1 and "hx-swap-oob" not in page  # in place on the page
    assert "The job's events" not in page + live  # the template's comment stays a comment
    job_services.cancel_job(actor=None, job=job)
    ended = client.get(f"/jobs/{job.pk}/?part=live").content.decode()
    assert "<td>Cancelled</td>" in ended and "hx-trigger" not in ended
    for outsider in ("erin", "olga"):  # a foreign workspace's job, or none at all: a 404 either way
        assert client_as(outsider).get(f"/jobs/{job.pk}/?part=live").status_code == 404


def test_a_waiting_job_shows_its_reason_and_queue_position(world: dict[str, AbstractUser]) -> None:
    job = Job.objects.get(name="huge-b")
    page = client_as("dave").get(f"/jobs/{job.pk}/").content.decode()
    assert "#1 in Quota1.1's queue" in page
    assert job.shown_message in page.replace("&#x27;", "'")


def test_cancel_previews_then_confirms(world: dict[str, AbstractUser]) -> None:
    job = Job.objects.get(name="train-b")
    client = client_as("dave")
    preview = client.post(f"/jobs/{job.pk}/cancel/", {"step": "preview"}).content.decode()
    assert "Preview: what would change" in preview
    assert "huge-b" in preview or "No job is evicted." in preview
    assert Job.objects.get(pk=job.pk).state == "running"
    previewed = preview.split('name="previewed" value="')[1].split('"')[0]
    done = client.post(f"/jobs/{job.pk}/cancel/", {"step": "confirm", "previewed": previewed})
    assert done.status_code == 302
    assert Job.objects.get(pk=job.pk).state == "cancelled"


def test_the_page_opens_with_an_estimate_of_its_initial_values(world: dict[str, AbstractUser]) -> None:
    page = client_as("dave").get("/jobs/new/").content.decode()
    assert 'data-verdict="waits"' in page and "Waits: needs 1 GPU" in page  # the pool is full
    assert 'data-testid="caps"' in page
