"""How a job names another to a reader (scheduling.mentions, issue 28): by name only where the
reader may open it; else by quota, workspace and GPUs, in the entry and in the scheduler's words.
The rows cover every sentence of the engine and the commit that names a job; the cancel preview,
the cancel page and the estimate's words are checked on a cluster shared by two workspaces."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client
from hypothesis import assume, given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from scheduling import estimates, live, services
from scheduling.mentions import JobMention, mention_jobs, named_pks, unnamed, visible_job_pks
from scheduling.models import JobState
from tests.scheduling.conftest import Cluster
from workspaces import services as workspace_services

# Its id, 8, is also a number of GPUs in these sentences: only the job's place is replaced.
HIDDEN = JobMention(pk=8, name="train-c", quota="team-b", workspace="lab-c", gpus=8.0, visible=False)
SAID = "8 GPUs of team-b (lab-c)"


@pytest.mark.parametrize(
    ("sentence", "read"),
    [
        ("preempted in team-a by 8 (priority 9 > 8)", f"preempted in team-a by {SAID} (priority 9 > 8)"),
        (
            "child-level preemption: Quota1's own job 8 ranks above team-a's jobs",
            f"child-level preemption: Quota1's own job ({SAID}) ranks above team-a's jobs",
        ),
        (
            "same-level preemption: 8 of team-b (priority 9) over 3 of team-a (priority 8)",
            f"same-level preemption: {SAID} of team-b (priority 9) over 3 of team-a (priority 8)",
        ),
        (
            "same-level preemption: 3 of team-a (priority 9) over 8 of team-b (priority 8)",
            f"same-level preemption: 3 of team-a (priority 9) over {SAID} of team-b (priority 8)",
        ),
        (
            "reclaimed for 8 of team-b: team-a holds more than its fair share of 8 GPUs and keeps at least that",
            f"reclaimed for {SAID} of team-b: team-a holds more than its fair share of 8 GPUs and keeps at least that",
        ),
        (
            "reclaimed by team-b for 8: team-a was above its guarantee of 8 GPUs; team-b is within its guarantee",
            f"reclaimed by team-b for {SAID}: team-a was above its guarantee of 8 GPUs; team-b is within its guarantee",
        ),
        (
            "moved so that 8 can start: the 8 GPUs it needs are free but fragmented across nodes",
            f"moved so that {SAID} can start: the 8 GPUs it needs are free but fragmented across nodes",
        ),
        ("restarted on gpu-2 to make room for train-c", f"restarted on gpu-2 to make room for {SAID}"),
        ("evicted by reclaim for train-c", f"evicted by reclaim for {SAID}"),
        ("waits while 8, which it was evicted for, starts", f"waits while {SAID}, which it was evicted for, starts"),
        (
            "waiting for 2 evicted job(s) (3, 8) to release their GPUs; 8 GPUs are promised to it",
            f"waiting for 2 evicted job(s) (3, {SAID}) to release their GPUs; 8 GPUs are promised to it",
        ),
        (
            "waiting for 8 evicted job(s) to release their GPUs; 8 GPUs are promised to it",
            "waiting for 8 evicted job(s) to release their GPUs; 8 GPUs are promised to it",
        ),
        (
            "team-b is a fifo queue: waits behind 8, which does not fit yet",
            f"team-b is a fifo queue: waits behind {SAID}, which does not fit yet",
        ),
        # Replaced once: the description's "8 GPUs" is not read again as the id 8.
        ("evicted by reclaim for train-c, by 8", f"evicted by reclaim for {SAID}, by {SAID}"),
        ("needs 8 GPUs; 8 are free in the pool", "needs 8 GPUs; 8 are free in the pool"),
        ("evicted by reclaim for train-c-2", "evicted by reclaim for train-c-2"),  # another job's name
        ("preempted in team-a by 88 (priority 9 > 3)", "preempted in team-a by 88 (priority 9 > 3)"),
    ],
)
def test_the_scheduler_s_sentences_name_a_hidden_job_by_quota_and_workspace(sentence: str, read: str) -> None:
    assert unnamed(sentence, [HIDDEN]) == read


# The engine's and the commit's sentences that name jobs, `{hidden}` and `{other}` by id and
# `{name}` by name, around figures that may be any number (`{n}`), the hidden id included.
SENTENCES = (
    "preempted in team-a by {hidden} (priority {n} > {n})",
    "child-level preemption: Quota1's own job {hidden} ranks above team-a's jobs",
    "same-level preemption: {hidden} of team-b (priority {n}) over {other} of team-a (priority {n})",
    "reclaimed for {hidden} of team-b: team-a holds more than its fair share of {n} GPUs and keeps at least that",
    "reclaimed by team-b for {hidden}: team-a was above its guarantee of {n} GPUs; team-b is within its guarantee",
    "moved so that {hidden} can start: the {n} GPUs it needs are free but fragmented across nodes",
    "restarted on gpu-{n} to make room for {name}",
    "waits while {hidden}, which it was evicted for, starts",
    "team-b is a fifo queue: waits behind {hidden}, which does not fit yet",
    "waiting for {n} evicted job(s) ({other}, {hidden}) to release their GPUs; {n} GPUs are promised to it",
    "needs {n} GPUs; {n} are free in the pool; team-a would go above its fair share ({n} + {n} > {n})",
)


@given(
    sentence=st.sampled_from(SENTENCES),
    hidden=st.integers(min_value=1, max_value=99),
    other=st.integers(min_value=1, max_value=99),
    figure=st.integers(min_value=0, max_value=99),
    gpus=st.integers(min_value=1, max_value=99),
)
def test_no_hidden_id_is_left_where_a_sentence_names_a_job(
    sentence: str, hidden: int, other: int, figure: int, gpus: int
) -> None:
    """Whatever the numbers: the hidden job's id and name are gone from every place that names a
    job, the other job's id stays, and every figure around them is kept as it was."""
    assume(hidden != other)
    mention = JobMention(pk=hidden, name="train-c", quota="team-b", workspace="lab-c", gpus=float(gpus), visible=False)
    written = sentence.format(hidden=hidden, other=other, name="train-c", n=figure)
    read = unnamed(written, [mention])
    assert "train-c" not in read
    named_after = named_pks(read.replace(mention.description, "a job"))
    assert hidden not in named_after
    assert (other in named_after) == (other in named_pks(written))
    # Put the id back where the description stands: the sentence as the scheduler wrote it.
    restored = read.replace(f"({mention.description})", str(hidden)).replace(mention.description, str(hidden))
    assert restored == written.replace("train-c", str(hidden))


def test_the_ids_a_sentence_names_are_found_where_they_are_replaced() -> None:
    assert named_pks("waiting for 2 evicted job(s) (3, 8) to release their GPUs; 8 GPUs are promised") == {3, 8}
    assert named_pks("preempted in team-a by 12 (priority 9 > 3)") == {12}
    assert named_pks("needs 8 GPUs; 8 are free in the pool; team-a would go above (8 + 2 > 8)") == set()


def test_a_visible_job_keeps_its_name_and_id_in_the_sentence() -> None:
    visible = JobMention(pk=8, name="train-c", quota="team-b", workspace="lab-c", gpus=8.0, visible=True)
    sentence = "preempted in team-a by 8 (priority 9 > 3)"
    assert unnamed(sentence, [visible]) == sentence
    assert visible.as_api()["job"] == "train-c" and visible.label == "train-c"
    assert HIDDEN.as_api() == {
        "job": None,
        "id": None,
        "quota": "team-b",
        "workspace": "lab-c",
        "gpus": 8.0,
        "visible": False,
        "description": SAID,
    }
    assert HIDDEN.label == SAID


@pytest.fixture
def two_workspaces(cluster: Cluster, make_user: Any) -> dict[str, Any]:
    """The cluster's workspace "lab" (dana, a developer) keeps team-a; a second workspace,
    "lab-c" (carl), is bound to team-b. Who may open which job is restrict()'s answer."""
    lab_c = workspace_services.create_workspace(actor=None, name="lab-c", quotas=[cluster.quotas["team-b"]])
    users: dict[str, AbstractUser] = {
        "dana": make_user("dana"),
        "carl": make_user("carl"),
        "root": make_user("root", platform_admin=True),
    }
    workspace_services.add_member(actor=None, workspace=cluster.workspace, user=users["dana"], role="developer")
    workspace_services.add_member(actor=None, workspace=lab_c, user=users["carl"], role="developer")
    return {**users, "lab-c": lab_c}


def test_each_reader_sees_the_names_restrict_lets_them_open(cluster: Cluster, two_workspaces: dict[str, Any]) -> None:
    own = cluster.submit("own", "team-a", gpus=2, actor=two_workspaces["dana"])
    foreign = cluster.submit("foreign", "team-b", gpus=1, workspace=two_workspaces["lab-c"])
    pks = {own.pk, foreign.pk}
    assert visible_job_pks(two_workspaces["dana"], pks) == {own.pk}
    assert visible_job_pks(two_workspaces["carl"], pks) == {foreign.pk}
    assert visible_job_pks(two_workspaces["root"], pks) == pks
    assert visible_job_pks(None, pks) == pks  # the scheduler itself
    mentions = mention_jobs(two_workspaces["dana"], pks)
    assert mentions[foreign.pk].description == "1 GPU of team-b (lab-c)"
    assert (mentions[own.pk].visible, mentions[foreign.pk].visible) == (True, False)


@pytest.fixture
def freed_for_a_foreign_job(cluster: Cluster, two_workspaces: dict[str, Any]) -> dict[str, Any]:
    """dana's own job holds 16 GPUs of team-a (both nodes, borrowing); carl's big-c waits for
    them in team-b. Cancelling own frees them for big-c."""
    cluster.submit("own", "team-a", gpus=8, replicas=2, actor=two_workspaces["dana"])
    services.converge()
    cluster.submit("big-c", "team-b", gpus=8, replicas=2, workspace=two_workspaces["lab-c"])
    services.converge()
    assert (cluster.state("own"), cluster.state("big-c")) == (JobState.RUNNING, JobState.PENDING)
    return two_workspaces


def test_a_cancel_preview_names_the_foreign_job_it_would_admit_by_quota_and_workspace(
    cluster: Cluster, freed_for_a_foreign_job: dict[str, Any]
) -> None:
    own = cluster.job("own")
    api = APIClient()
    api.force_authenticate(user=freed_for_a_foreign_job["dana"])
    answer = api.post(f"/api/v1/jobs/{own.pk}/cancel/", {"dry_run": True}, format="json")
    assert answer.status_code == 200, answer.content
    (admitted,) = answer.json()["preview"]["admit"]
    assert admitted["job"] is None and admitted["id"] is None and admitted["visible"] is False
    assert (admitted["quota"], admitted["workspace"], admitted["gpus"]) == ("team-b", "lab-c", 16.0)
    assert "big-c" not in answer.content.decode()

    # The page says the same, through the page kit's Preview.
    page = Client()
    page.force_login(freed_for_a_foreign_job["dana"])
    preview = page.post(f"/jobs/{own.pk}/cancel/", {"step": "preview"})
    assert preview.status_code == 200
    html = preview.content.decode()
    assert "a job of lab-c (team-b), 16 GPUs" in html
    assert "big-c" not in html

    # A platform admin reads the name.
    root = APIClient()
    root.force_authenticate(user=freed_for_a_foreign_job["root"])
    (named,) = root.post(f"/api/v1/jobs/{own.pk}/cancel/", {"dry_run": True}, format="json").json()["preview"]["admit"]
    assert (named["job"], named["visible"]) == ("big-c", True)


def test_the_estimate_names_a_hidden_victim_by_its_workspace() -> None:
    preview = services.SubmitPreview(
        would_admit=True,
        reason=None,
        placements=[{"node": "gpu-1", "devices": list(range(8)), "fraction": 1.0}],
        evict=[
            {**HIDDEN.as_api(), "rule": "reclaim", "reason": ""},
            {"job": "mine", "id": 3, "quota": "team-b", "workspace": "lab", "gpus": 2.0, "visible": True, "rule": ""},
        ],
    )
    assert estimates.from_preview(preview).sentence == (
        "Starts now on gpu-1, GPUs 0–7; would reclaim 10 GPUs from team-b (a job of lab-c, reclaim rule; mine)."
    )


@pytest.fixture
def behind_a_foreign_job(cluster: Cluster, two_workspaces: dict[str, Any]) -> dict[str, Any]:
    """team-b, shared by lab and lab-c, is a fifo queue: carl's big-c (16 GPUs) does not fit
    beside lab's holder, and dana's small waits behind it ("waits behind <big-c's id>")."""
    cluster.quotas["team-b"].queue_policy = "fifo"
    cluster.quotas["team-b"].save(update_fields=["queue_policy"])
    cluster.submit("holder", "team-a", gpus=8)
    cluster.submit("big-c", "team-b", gpus=8, replicas=2, workspace=two_workspaces["lab-c"])
    cluster.submit("small", "team-b", gpus=1, actor=two_workspaces["dana"])
    services.converge()
    big = cluster.job("big-c")
    waiting = cluster.job("small").shown_message
    assert waiting == f"team-b is a fifo queue: waits behind {big.pk}, which does not fit yet"
    return two_workspaces


def test_a_reason_names_the_foreign_job_it_waits_behind_by_quota_and_workspace(
    cluster: Cluster, behind_a_foreign_job: dict[str, Any]
) -> None:
    small, big = cluster.job("small"), cluster.job("big-c")
    described = "team-b is a fifo queue: waits behind 16 GPUs of team-b (lab-c), which does not fit yet"
    api = APIClient()
    api.force_authenticate(user=behind_a_foreign_job["dana"])
    assert api.get(f"/api/v1/jobs/{small.pk}/").json()["reason"]["message"] == described
    listed = {job["name"]: job for job in api.get("/api/v1/jobs/").json()["results"]}
    assert listed["small"]["reason"]["message"] == described

    page = Client()
    page.force_login(behind_a_foreign_job["dana"])
    team_b = cluster.quotas["team-b"].pk
    for url in (f"/jobs/{small.pk}/", f"/jobs/{small.pk}/?part=live", "/jobs/", f"/quotas/{team_b}/?tab=jobs"):
        html = page.get(url).content.decode()
        assert "waits behind 16 GPUs of team-b (lab-c)" in html, url
        assert f"waits behind {big.pk}," not in html, url

    # A dry run of one more job there waits behind the same job, told the same way.
    body = {"name": "probe", "workspace": "lab", "quota": "team-b", "kind": "training", "gpus": 1, "dry_run": True}
    assert api.post("/api/v1/jobs/", body, format="json").json()["reason"]["message"] == described

    # A live topic's listeners are told the same, whoever they are.
    changes = dict(live.topic_changes([{"kind": "job", "id": small.pk}]))
    assert changes[f"job:{small.pk}"]["reason"] == described

    # A platform admin reads the id, as the scheduler wrote it.
    root = APIClient()
    root.force_authenticate(user=behind_a_foreign_job["root"])
    assert root.get(f"/api/v1/jobs/{small.pk}/").json()["reason"]["message"] == small.shown_message
