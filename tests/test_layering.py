"""The project's layering (issue 28, "Pages live with their app"), checked by an AST walk over every
import, at module level or inside a function:

- No app imports the project package `console/` (settings, URLs, ASGI, Celery, the launcher,
  health, the dashboard): the project composes the apps, never the other way round.
- The bottom package `utilities/` (the page kit, the JSON types, the admin bases) imports no app:
  every app may import it.
- Between the apps, imports point one way: telemetry → scheduling → workspaces → quotas → utilities
  (DESIGN.md; live sits beside telemetry). Each app's own inner layers are checked by its own
  tests (tests/scheduling/test_layering.py, tests/quotas/test_services_layering.py).
- No module of the code over LINE_CAP lines. Tests and benchmarks are exempt: a test file reads as
  one behaviour's table, a benchmark as one script.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "console"
BOTTOM = "utilities"
# Lowest first: an app may import those before it, never those after it. An app the list does
# not name (a new one) is held only to the two rules about `console` and `utilities`.
ARROW = ("utilities", "quotas", "workspaces", "scheduling", "telemetry")
# Beside telemetry, above scheduling: the websocket, which reads every app to check a topic.
LIVE = "live"
# What the bottom package may import besides itself and the standard library.
BOTTOM_MAY_IMPORT = frozenset({"django", "rest_framework", "django_htmx"})

LINE_CAP = 450
# Modules over the cap, each with what is in the way of its split.
LINE_CAP_EXCEPTIONS: dict[str, str] = {
    # The Slurm executor landed as this test did, and its author is still at it.
    "slurm/executor.py": "Slurm executor in progress",
}


def apps() -> list[str]:
    """Every package of the repository that is a Django app (has apps.py), the project aside."""
    return sorted(path.parent.name for path in ROOT.glob("*/apps.py") if path.parent.name != PROJECT)


def code_packages() -> list[str]:
    return [*apps(), PROJECT, "gqc"]


@cache
def imported(path: Path) -> frozenset[tuple[str, int]]:
    """Every module an import in the file names, absolute, with its line."""
    names: set[tuple[str, int]] = set()
    package = list(path.relative_to(ROOT).with_suffix("").parts)
    package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            names.add((base, node.lineno))
    return frozenset(names)


def sources(package: str) -> list[Path]:
    return sorted(path for path in (ROOT / package).rglob("*.py") if "migrations" not in path.parts)


def imports_of(package: str, wanted: frozenset[str]) -> list[str]:
    """`file:line imports module` for each import in the package of a top-level package in `wanted`."""
    return [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sources(package)
        for name, line in sorted(imported(path))
        if name.split(".")[0] in wanted
    ]


def test_the_apps_are_found() -> None:
    assert {"quotas", "workspaces", "scheduling", "telemetry", "live", "utilities"} <= set(apps())


@pytest.mark.parametrize("app", apps())
def test_no_app_imports_the_project_package(app: str) -> None:
    assert imports_of(app, frozenset({PROJECT})) == []


def test_the_bottom_package_imports_no_app() -> None:
    allowed = {BOTTOM, "__future__", *sys.stdlib_module_names, *BOTTOM_MAY_IMPORT}
    outside = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sources(BOTTOM)
        for name, line in sorted(imported(path))
        if name.split(".")[0] not in allowed
    ]
    assert outside == []


@pytest.mark.parametrize("app", ARROW)
def test_imports_between_the_apps_point_down(app: str) -> None:
    above = frozenset(ARROW[ARROW.index(app) + 1 :]) | {LIVE}
    assert imports_of(app, above) == []


@pytest.mark.parametrize("package", code_packages())
def test_no_module_over_the_line_cap(package: str) -> None:
    over = {
        str(path.relative_to(ROOT)): lines
        for path in sources(package)
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LINE_CAP
        and str(path.relative_to(ROOT)) not in LINE_CAP_EXCEPTIONS
    }
    assert over == {}, f"split these modules (at most {LINE_CAP} lines each)"


def test_every_exception_to_the_line_cap_is_still_needed() -> None:
    """An exception whose module was split (or is gone) is struck off, so the list stays true."""
    stale = [
        name
        for name in LINE_CAP_EXCEPTIONS
        if not (ROOT / name).exists() or len((ROOT / name).read_text(encoding="utf-8").splitlines()) <= LINE_CAP
    ]
    assert stale == []
