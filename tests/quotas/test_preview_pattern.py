"""The one dry-run pattern: each write `x` has a `preview_x` that takes exactly what `x` takes,
and no service takes a `dry_run` flag (quotas/services/preview.py)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from quotas import services
from scheduling import services as job_services

PREVIEWS = [name for name in services.__all__ if name.startswith("preview_")]


def _pairs() -> list[tuple[Callable[..., Any], Callable[..., Any]]]:
    pairs = [(getattr(services, name), getattr(services, name.removeprefix("preview_"))) for name in PREVIEWS]
    return [
        *pairs,
        (job_services.preview_cancel_job, job_services.cancel_job),
        (job_services.preview_submit_job, job_services.submit_job),
    ]


def test_every_previewable_write_has_its_preview() -> None:
    writes = {
        "create_quota",
        "update_quota",
        "delete_quota",
        "scale_quota",
        "transfer_quota",
        "create_node",
        "update_node",
        "set_node_state",
        "delete_node",
        "cordon_node",
        "drain_node",
        "uncordon_node",
    }
    assert {name.removeprefix("preview_") for name in PREVIEWS} == writes


@pytest.mark.parametrize(("preview", "write"), _pairs(), ids=lambda function: function.__name__)
def test_a_preview_takes_what_its_write_takes(preview: Callable[..., Any], write: Callable[..., Any]) -> None:
    assert inspect.signature(preview).parameters == inspect.signature(write).parameters


def test_no_service_takes_a_dry_run_flag() -> None:
    takers = [
        f"{module.__name__}.{name}"
        for module in (services, job_services)
        for name in module.__all__
        if inspect.isfunction(function := getattr(module, name)) and "dry_run" in inspect.signature(function).parameters
    ]
    assert takers == []
