"""List endpoints answer in a number of queries that does not grow with their rows."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from quotas import services
from quotas.models import Node, Quota


def grow_to(size: int) -> None:
    """`size` nodes and a three-level tree of `size` quotas (one audit record per write)."""
    if not Quota.objects.exists():
        root = services.create_quota(actor=None, name="root", gpus=0)
        for index in range(3):
            services.create_quota(actor=None, name=f"team-{index}", parent=root)
    for index in range(Node.objects.count(), size):
        services.create_node(actor=None, name=f"node-{index}", gpus=8)
    for index in range(Quota.objects.count(), size):
        services.create_quota(actor=None, name=f"project-{index}", parent=f"team-{index % 3}")


def queries_for(client: APIClient, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path)
    assert response.status_code == 200, response.content
    return len(captured)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/api/v1/quotas/?limit=1000", id="quotas"),
        pytest.param("/api/v1/nodes/?limit=1000", id="nodes"),
        pytest.param("/api/v1/audit-log/?limit=1000", id="audit-log"),
    ],
)
def test_list_queries_do_not_grow_with_rows(admin_client_api: APIClient, path: str) -> None:
    grow_to(8)
    with_8_rows = queries_for(admin_client_api, path)
    grow_to(60)
    with_60_rows = queries_for(admin_client_api, path)

    assert with_60_rows == with_8_rows
