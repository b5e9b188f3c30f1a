"""The layering of `scheduling/` (written at the top of scheduling/__init__.py), checked by an AST
walk over the package: every import, at module level or inside a function, is an edge.

KNOWN_VIOLATIONS is where a violation that must stay for a while is written down with the change
that removes it. It is empty: the last circle (triggers → cycle → executors → services →
triggers) was broken by handing the triggers their runners from SchedulingConfig.ready(),
passing the executor's name into scheduler_status, and moving the job summary to lifecycle.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "scheduling"

# Lowest first. A module may import modules of its own layer or of a layer below it.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("engine", frozenset({"engine"})),
    (
        "infrastructure",
        frozenset(
            {
                "models",
                "migrations",
                "clock",
                "lock",
                "bulk",
                "pending_reasons",
                "beat",
                "history",
                "gc_pauses",
                "job_environment",
                "changes",
            }
        ),
    ),
    ("lifecycle", frozenset({"lifecycle"})),
    (
        "reads",
        frozenset(
            {
                "selectors",
                "snapshot",
                "snapshot_rows",
                "snapshot_moves",
                "quota_figures",
                "metrics_reads",
                "holders",
                "invariants",
                "estimate_base",
                "estimates",
                "usage",
                "agent_selectors",
                "agent_beat",
                "allocation_history",
                "quota_charts",
                "quota_in_view",
                "page_figures",
                "mentions",
                "resource_figures",
            }
        ),
    ),
    ("publication", frozenset({"live", "events"})),
    ("cycle requests", frozenset({"triggers"})),
    ("executors", frozenset({"executors"})),
    ("commit", frozenset({"commit_rows", "commit"})),
    ("cycle", frozenset({"cycle"})),
    (
        "writes",
        frozenset(
            {"job_writes", "submission", "job_endings", "manual_cycle", "services", "agent_claims", "agent_services"}
        ),
    ),
    ("entry points", frozenset({"tasks", "providers", "simulate"})),
    (
        "interfaces",
        frozenset(
            {
                "api",
                "views",
                "quota_views",
                "quota_actions",
                "node_views",
                "node_actions",
                "pool_views",
                "workspace_views",
                "forms",
                "templatetags",
                "urls",
                "admin",
                "apps",
                "management",
            }
        ),
    ),
)

# (importer, imported): what removes the edge.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_names(path: Path) -> list[tuple[str, int]]:
    """Every module named by an import in the file (`from a import b` names a.b and a), with its line."""
    names: list[tuple[str, int]] = []
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            names.append((base, node.lineno))
            names.extend((f"{base}.{alias.name}", node.lineno) for alias in node.names)
    return names


@cache
def edges() -> dict[str, dict[str, int]]:
    """Importer -> imported module of the package -> line; `from a import b` is an edge to a.b
    when a.b is a module, else to a."""
    known = modules()
    graph: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        targets: dict[str, int] = {}
        seen_modules = {imported for imported, _ in imported_names(path) if imported in known}
        for imported, line in imported_names(path):
            if imported not in known or imported == name:
                continue
            # `from scheduling import engine` also names the package scheduling; only the module counts
            if any(other.startswith(imported + ".") for other in seen_modules) and imported != name:
                continue
            targets.setdefault(imported, line)
        graph[name] = targets
    return graph


def layer_of(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) < 2:
        return None  # the package itself
    for level, (_, members) in enumerate(LAYERS):
        if parts[1] in members:
            return level
    raise AssertionError(f"{name} is in no layer: add it to LAYERS and to scheduling/__init__.py")


def layer_violations() -> dict[tuple[str, str], int]:
    found: dict[tuple[str, str], int] = {}
    for importer, targets in edges().items():
        low = layer_of(importer)
        for imported, line in targets.items():
            high = layer_of(imported)
            if low is not None and high is not None and high > low:
                found[(importer, imported)] = line
    return found


def test_every_module_has_a_layer() -> None:
    for name in modules():
        layer_of(name)


@pytest.mark.parametrize("name", sorted(name for name in modules() if name.startswith("scheduling.engine")))
def test_the_engine_imports_only_itself_and_the_standard_library(name: str) -> None:
    outside = sorted(
        f"{imported} (line {line})"
        for imported, line in imported_names(modules()[name])
        if imported.split(".")[0] not in (*sys.stdlib_module_names, "__future__")
        and not (imported == "scheduling.engine" or imported.startswith("scheduling.engine."))
        and imported != "scheduling"  # `from scheduling import engine` names the package too
    )
    assert outside == [], f"{name} imports {', '.join(outside)}"


def test_the_engine_session_imports_no_action() -> None:
    """session.py is below the actions; the actions are below the cycle that lists them."""
    graph = edges()
    assert not [m for m in graph["scheduling.engine.session"] if m.startswith("scheduling.engine.actions")]
    for name, targets in graph.items():
        if name.startswith("scheduling.engine.actions"):
            assert "scheduling.engine.cycle" not in targets, name


def test_selectors_do_not_import_executors() -> None:
    imports = edges()["scheduling.selectors"]
    assert not [m for m in imports if m.startswith("scheduling.executors")]


def test_the_writes_import_only_the_cycles_public_names() -> None:
    """A write asks for a cycle or runs one (`run_cycle`, `converge`); the commit and the cycle's
    private helpers are the cycle's own business."""
    writes = next(level for level, (label, _) in enumerate(LAYERS) if label == "writes")
    found: list[str] = []
    for name, targets in edges().items():
        if layer_of(name) != writes:
            continue
        found.extend(f"{name} imports {imported}" for imported in targets if imported.startswith("scheduling.commit"))
        for node in ast.walk(ast.parse(modules()[name].read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "scheduling.cycle":
                found.extend(f"{name} imports cycle.{a.name}" for a in node.names if a.name.startswith("_"))
    assert found == []


def test_no_new_import_against_the_layers() -> None:
    new = {edge: line for edge, line in layer_violations().items() if edge not in KNOWN_VIOLATIONS}
    assert new == {}, "imports against the layering of scheduling/__init__.py (importer, imported): line"


def import_circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative enough for ~60 nodes)."""
    graph = edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_the_engine_has_no_import_circle() -> None:
    assert [c for c in import_circles() if any(m.startswith("scheduling.engine") for m in c)] == []


def test_no_import_circle() -> None:
    assert import_circles() == []
