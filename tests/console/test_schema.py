"""The OpenAPI schema at /api/schema/ is generated without a warning and validates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.test import APIClient

ROOT = Path(__file__).resolve().parents[2]


def test_schema_generates_without_warnings_and_validates(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "spectacular",
            "--validate",
            "--fail-on-warn",
            "--file",
            str(tmp_path / "s.yaml"),
        ],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    schema = (tmp_path / "s.yaml").read_text()
    for path in ("/api/v1/quotas/", "/api/v1/quotas/transfer/", "/api/v1/jobs/", "/api/v1/workspaces/"):
        assert f"  {path}:" in schema


@pytest.mark.django_db
def test_schema_and_docs_are_served(admin_client_api: APIClient) -> None:
    assert admin_client_api.get("/api/schema/").status_code == 200
    docs = admin_client_api.get("/api/docs/")
    assert docs.status_code == 200
    assert b"/static/drf_spectacular_sidecar/swagger-ui-dist/" in docs.content
    assert b"cdn.jsdelivr" not in docs.content and b"unpkg.com" not in docs.content


@pytest.mark.django_db
def test_every_request_example_in_the_schema_is_accepted_on_the_demo(settings: Any) -> None:
    """Swagger UI's "Try it out" starts from these bodies: each must work as it stands."""
    settings.SCHEDULER_TRIGGER = "inline"
    call_command("load_demo", verbosity=0)
    api = APIClient()
    api.force_authenticate(get_user_model().objects.get(username="admin"))
    schema = api.get("/api/schema/", {"format": "json"}).json()
    tried = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            for name, example in content.get("examples", {}).items():
                answer = getattr(api, method)(path, example["value"], format="json")
                assert answer.status_code < 400, (method, path, name, answer.json())
                tried.append(f"{method.upper()} {path} {name}")
    assert "POST /api/v1/jobs/ EstimateATrainingJob" in tried and len(tried) >= 2
