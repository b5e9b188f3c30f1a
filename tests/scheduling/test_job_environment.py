"""A job's environment and image: bounded and checked the same way by the service, the API and
Submit job; kept and shown; handed to the node agent beneath the console's own variables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import AbstractUser, User
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from quotas import bounds
from quotas.models import Node, NodeExecutor
from quotas.node_agents import issue_node_token
from scheduling import job_environment, services
from scheduling.models import Job
from tests.scheduling.conftest import Cluster

pytestmark = pytest.mark.django_db

Clients = Callable[[AbstractUser | None], APIClient]
LONG_VALUE = "v" * (bounds.JOB_ENV_VALUE_MAX_LENGTH + 1)
TOO_MANY = {f"V{n}": "x" for n in range(bounds.JOB_ENV_VARIABLES_MAX + 1)}


def _body(**fields: Any) -> dict[str, Any]:
    return {"name": "train", "workspace": "lab", "quota": "team-a", "kind": "training", "gpus": 1, **fields}


def test_a_job_keeps_its_environment_and_image_and_the_api_shows_them(
    client_for: Clients, member: AbstractUser
) -> None:
    environment = {"EPOCHS": "3", "DATA_DIR": "/data/set a", "EMPTY": ""}
    answer = client_for(member).post(
        "/api/v1/jobs/", _body(environment=environment, image="registry.example/train:1.2"), format="json"
    )
    assert answer.status_code == 201, answer.json()
    job = Job.objects.get(pk=answer.json()["id"])
    assert (job.environment, job.image) == (environment, "registry.example/train:1.2")
    shown = client_for(member).get(f"/api/v1/jobs/{job.pk}/").json()
    assert (shown["environment"], shown["image"]) == (environment, "registry.example/train:1.2")


def test_a_job_without_them_has_an_empty_environment_and_no_image(cluster: Cluster) -> None:
    job = cluster.submit("plain")
    assert (job.environment, job.image) == ({}, "")


@pytest.mark.parametrize(
    ("environment", "image", "field", "words"),
    [
        (TOO_MANY, "", "environment", "at most 64 variables, got 65"),
        ({"1ST": "x"}, "", "environment", "'1ST' is not a variable name"),
        ({"A-B": "x"}, "", "environment", "'A-B' is not a variable name"),
        ({"N" * (bounds.JOB_ENV_NAME_MAX_LENGTH + 1): "x"}, "", "environment", "at most 128 characters"),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, "", "environment", "CUDA_VISIBLE_DEVICES is set by the node agent"),
        ({"GPU_QUOTA_FRACTION": "1"}, "", "environment", "GPU_QUOTA_FRACTION is set by the node agent"),
        ({"GQC_JOB_ID": "7"}, "", "environment", "GQC_JOB_ID is set by the node agent"),
        ({"BIG": LONG_VALUE}, "", "environment", "BIG: a value has at most 4,096 characters, got 4,097"),
        ({"NUL": "a\x00b"}, "", "environment", "NUL: a value cannot hold a NUL character"),
        ({"TWO": "a\nb"}, "", "environment", "TWO: a value is one line"),
        ({}, "has space:1", "image", "'has space:1' is not an image reference"),
        ({}, "r/" + "i" * bounds.JOB_IMAGE_MAX_LENGTH, "image", "at most 512 characters, got 514"),
    ],
)
def test_the_service_refuses_beyond_the_rules_naming_the_field(
    cluster: Cluster, environment: dict[str, str], image: str, field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        cluster.submit("bad", environment=environment, image=image)
    assert words in " ".join(refused.value.message_dict[field])
    assert not Job.objects.filter(name="bad").exists()


@pytest.mark.parametrize(
    ("environment", "words"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0"}, "CUDA_VISIBLE_DEVICES is set by the node agent"),
        ({"COUNT": 8}, "COUNT: a value is text, got int"),
        (TOO_MANY, "at most 64 variables, got 65"),
        (["A=1"], "environment must be an object, got a list"),
    ],
)
def test_the_api_answers_400_naming_environment(
    client_for: Clients, member: AbstractUser, environment: Any, words: str
) -> None:
    answer = client_for(member).post("/api/v1/jobs/", _body(environment=environment), format="json")
    assert answer.status_code == 400
    assert words in " ".join(answer.json()["environment"])


def test_the_schema_publishes_the_bounds(client_for: Clients, member: AbstractUser) -> None:
    schema = client_for(member).get("/api/schema/", {"format": "json"}).json()
    submit = schema["components"]["schemas"]["JobSubmit"]["properties"]
    assert submit["environment"]["maxProperties"] == bounds.JOB_ENV_VARIABLES_MAX
    assert submit["environment"]["additionalProperties"]["maxLength"] == bounds.JOB_ENV_VALUE_MAX_LENGTH
    assert job_environment.NAME_PATTERN.pattern in submit["environment"]["description"]
    assert submit["image"]["maxLength"] == bounds.JOB_IMAGE_MAX_LENGTH


@given(
    st.dictionaries(
        st.from_regex(job_environment.NAME_PATTERN, fullmatch=True),
        st.text(st.characters(exclude_characters="\x00\n\r", exclude_categories=["Cs"]), max_size=50),
        max_size=10,
    )
)
def test_what_the_form_writes_it_reads_back_and_the_rules_judge_names_alone(environment: dict[str, str]) -> None:
    lines = [f"{name}={value}" for name, value in environment.items()]
    assert job_environment.parse_assignments(lines) == (environment, [])
    reserved = {
        name
        for name in environment
        if name in job_environment.RESERVED_NAMES or name.startswith(job_environment.RESERVED_PREFIX)
    }
    assert len(job_environment.environment_errors(environment)) == len(reserved)


def test_lines_that_are_not_assignments_are_named_by_number() -> None:
    parsed, errors = job_environment.parse_assignments(["A=1", "", "oops", "A=2", "B==x"])
    assert parsed == {"A": "1", "B": "=x"}
    assert errors == ["line 3: 'oops' is not NAME=value", "line 4: A is set twice"]


# --- the agent's start ----------------------------------------------------------------------------------


def test_the_start_carries_the_jobs_variables_under_the_consoles_and_the_image(cluster: Cluster) -> None:
    Node.objects.filter(name__in=["gpu-1", "gpu-2"]).update(executor=NodeExecutor.AGENT, last_heartbeat=timezone.now())
    job = cluster.submit("env", command="env", environment={"EPOCHS": "3"}, image="train:1")
    # A row written before the rules (or by hand) may name the console's variables: never obeyed.
    Job.objects.filter(pk=job.pk).update(environment={"EPOCHS": "3", "GQC_JOB_NAME": "someone-else"})
    services.converge()
    node = Job.objects.get(pk=job.pk).placements.get().node
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {issue_node_token(actor=None, node=node)}")
    answer = client.post("/api/v1/agent/heartbeat/", {"node": node.name, "processes": []}, format="json")
    assert answer.status_code == 200, answer.content
    (start,) = answer.json()["starts"]
    assert start["environment"]["EPOCHS"] == "3"
    assert start["environment"]["GQC_JOB_NAME"] == "env"
    assert start["image"] == "train:1"


# --- Submit job and the job's page ------------------------------------------------------------------------


def _form(cluster: Cluster, **changes: str) -> dict[str, Any]:
    return {
        "workspace": cluster.workspace.pk,
        "quota": cluster.quotas["team-a"].pk,
        "quotas_for": cluster.workspace.pk,
        "name": "from-form",
        "kind": "training",
        "gpus": "1",
        "replicas": "1",
        "priority": "3",
        "grace_seconds": "0",
        "step": "submit",
        **changes,
    }


def test_submit_job_takes_one_variable_a_line_and_the_job_page_shows_them(cluster: Cluster, member: User) -> None:
    browser = Client()
    browser.force_login(member)
    typed = "EPOCHS=3\r\n\r\nURL=http://x/?a=b\r\n"
    answer = browser.post("/jobs/new/", _form(cluster, environment=typed, image="train:1"))
    assert answer.status_code == 302, answer.content.decode()[:2000]
    job = Job.objects.get(name="from-form")
    assert (job.environment, job.image) == ({"EPOCHS": "3", "URL": "http://x/?a=b"}, "train:1")
    page = browser.get(f"/jobs/{job.pk}/").content.decode()
    assert "<code>EPOCHS=3</code>" in page and "<code>train:1</code>" in page
    again = browser.get(f"/jobs/new/?from={job.pk}").content.decode()
    assert "EPOCHS=3\nURL=http://x/?a=b</textarea>" in again and 'value="train:1"' in again


def test_submit_job_refuses_a_bad_line_and_a_reserved_name_beside_the_field(cluster: Cluster, member: User) -> None:
    browser = Client()
    browser.force_login(member)
    bad_line = browser.post("/jobs/new/", _form(cluster, environment="EPOCHS 3")).content.decode()
    assert 'data-testid="error-environment">Line 1: &#x27;EPOCHS 3&#x27; is not NAME=value.' in bad_line
    reserved = browser.post("/jobs/new/", _form(cluster, environment="CUDA_VISIBLE_DEVICES=0")).content.decode()
    assert 'data-testid="error-environment">CUDA_VISIBLE_DEVICES is set by the node agent' in reserved
    assert not Job.objects.filter(name="from-form").exists()
