"""Telemetry sits above scheduling (telemetry/__init__.py): the apps below never import it, and
it imports the console only for the admin's base class (as scheduling's admin does)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("app", ["quotas", "workspaces", "scheduling"])
def test_lower_apps_do_not_import_telemetry(app: str) -> None:
    found = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / app).rglob("*.py"))
        if any(name == "telemetry" or name.startswith("telemetry.") for name in imports(path))
    ]
    assert found == []


def test_telemetry_imports_the_console_only_in_its_admin() -> None:
    found = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "telemetry").rglob("*.py"))
        if path.name != "admin.py" and any(name.split(".")[0] == "console" for name in imports(path))
    ]
    assert found == []
