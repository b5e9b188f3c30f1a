"""The modules of quotas/services/ import only those listed before them in its __init__'s docstring,
so that the package has no import circle and each subject can be read from the top down."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "quotas" / "services"
# Lowest first, as quotas/services/__init__.py lists them.
ORDER = ("common", "errors", "preview", "rules", "tree", "guarantees", "nodes", "cordon", "inventory", "pools")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("quotas.services."):
            names.add(node.module.removeprefix("quotas.services.").split(".")[0])
        elif isinstance(node, ast.Import):
            names.update(
                alias.name.removeprefix("quotas.services.").split(".")[0]
                for alias in node.names
                if alias.name.startswith("quotas.services.")
            )
    return names


def test_every_module_is_listed() -> None:
    assert {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"} == set(ORDER)


@pytest.mark.parametrize("module", ORDER)
def test_imports_point_down(module: str) -> None:
    allowed = set(ORDER[: ORDER.index(module)])
    assert imported_modules(PACKAGE / f"{module}.py") <= allowed
