"""Where a person sets a guarantee of 0, the page says what it means (SCHEDULING.md: the weight
defaults to the guarantee, so no guarantee and no weight is weight 0, Run:ai's "Lowest"): the
New quota form and Scale next to the guarantee, and the quota page of such a quota."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractUser
from django.test import Client

from quotas.services import tree as quota_services
from tests.console.conftest import quota_id
from tests.console.test_quota_pages import client_as

pytestmark = pytest.mark.django_db

MEANING = "with no guarantee and no weight this quota only gets GPUs that nobody else wants"


def admin(world: dict[str, AbstractUser]) -> Client:
    return client_as(world, "platform-admin")


@pytest.mark.parametrize("form", ["/quotas/new/", "new-child", "scale"])
def test_the_guarantee_field_says_what_0_means(pai_world: dict[str, AbstractUser], form: str) -> None:
    url = form if form.startswith("/") else f"/quotas/{quota_id('Quota1.2')}/{form}/"
    page = admin(pai_world).get(url)
    assert page.status_code == 200
    text = page.content.decode()
    assert f"0 is allowed: {MEANING}." in text
    # beside the guarantee field, as its description (read out with the field)
    assert 'aria-describedby="id_gpus_helptext"' in text


@pytest.mark.parametrize(
    ("gpus", "weight", "says_it"),
    [
        pytest.param(0, None, True, id="no-guarantee-no-weight"),
        pytest.param(0, 0, True, id="no-guarantee-weight-0"),
        pytest.param(0, 2, False, id="no-guarantee-a-weight"),
        pytest.param(4, None, False, id="a-guarantee"),
    ],
)
def test_the_quota_page_says_it_for_a_quota_with_no_guarantee_and_no_weight(
    pai_world: dict[str, AbstractUser], gpus: float, weight: float | None, says_it: bool
) -> None:
    quota = quota_services.create_quota(actor=None, name="spare", parent="Quota1.2", gpus=gpus, weight=weight)
    page = admin(pai_world).get(f"/quotas/{quota.pk}/")
    assert page.status_code == 200
    assert (MEANING in page.content.decode()) == says_it
