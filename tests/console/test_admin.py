"""Django's admin registers every model of the console, lists and shows each, and changes
nothing that only services.py may change; cancelling jobs goes through the service."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import AbstractUser, User
from django.test import Client

from scheduling.models import Job, JobState
from workspaces.models import Membership, Workspace

pytestmark = pytest.mark.django_db

OUR_APPS = ("quotas", "workspaces", "scheduling")


def our_models() -> list[type]:
    return [model for label in OUR_APPS for model in apps.get_app_config(label).get_models()]


def test_every_model_of_the_console_is_registered() -> None:
    missing = [model.__name__ for model in our_models() if not admin.site.is_registered(model)]
    assert missing == []


@pytest.fixture
def operator(pai_world: dict[str, User]) -> Client:
    client = Client()
    client.force_login(pai_world["platform-admin"])  # axes' backend refuses Client.login()
    return client


@pytest.mark.parametrize("model", our_models(), ids=lambda model: model.__name__)
def test_each_list_and_first_row_open(operator: Client, model: type) -> None:
    meta = model._meta  # type: ignore[attr-defined]
    base = f"/admin/{meta.app_label}/{meta.model_name}/"
    assert operator.get(base).status_code == 200
    assert operator.get(base, {"q": "Quota"}).status_code == 200 or not admin.site.get_model_admin(model).search_fields
    first = model.objects.first()  # type: ignore[attr-defined]
    if first is not None:
        assert operator.get(f"{base}{first.pk}/change/").status_code == 200


@pytest.mark.parametrize("model", [Workspace, Membership, Job])
def test_rows_that_services_own_are_read_only(operator: Client, model: type) -> None:
    meta = model._meta  # type: ignore[attr-defined]
    first = model.objects.first()  # type: ignore[attr-defined]
    assert operator.get(f"/admin/{meta.app_label}/{meta.model_name}/add/").status_code == 403
    change = operator.get(f"/admin/{meta.app_label}/{meta.model_name}/{first.pk}/change/").content.decode()
    assert 'name="_save"' not in change
    answer = operator.post(f"/admin/{meta.app_label}/{meta.model_name}/{first.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 403


def test_cancel_action_goes_through_the_service(operator: Client, make_user: Callable[..., AbstractUser]) -> None:
    job = Job.objects.get(name="train-b")
    answer = operator.post("/admin/scheduling/job/", {"action": "cancel", "_selected_action": [job.pk]}, follow=True)
    assert "Cancelled 1 job(s)." in answer.content.decode()
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert job.allocated_gpus == 0
