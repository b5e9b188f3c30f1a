"""Play a shipped scenario through `manage.py simulate --json` and hand its checkpoints to the test."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from tests.scheduling.scenarios.helpers import Checkpoints

SCENARIOS = Path(__file__).resolve().parents[3] / "docs" / "scenarios"


@pytest.fixture
def simulate(django_db_blocker: Any) -> Callable[[str], Checkpoints]:
    """simulate("reclaim") → {checkpoint name: its JSON object}. simulate opens its own private
    database, so the test database is never created for these tests."""

    def run(name: str) -> Checkpoints:
        out = io.StringIO()
        with django_db_blocker.unblock():
            call_command("simulate", str(SCENARIOS / f"{name}.yaml"), "--json", stdout=out)
        checkpoints = [json.loads(line) for line in out.getvalue().splitlines() if line.strip()]
        return {checkpoint["checkpoint"]: checkpoint for checkpoint in checkpoints}

    return run
