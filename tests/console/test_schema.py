"""The OpenAPI schema at /api/schema/ is generated without a warning and validates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
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
