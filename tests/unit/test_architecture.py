"""The import structure of ``toolkit``, read from its source (an AST walk, nothing imported).

Floors (docs/architecture.md): a package never imports one above it and two packages never
import each other; nothing outside the lab and its CLI imports the lab. The package pairs that
still import each other are listed below with what unties them (issue 24); the list may only
shrink, and so may the count of function-level ``toolkit`` imports (each hides an arrow), each
of which says why it is there in a comment on its line or just above its block of imports.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TOOLKIT = Path(__file__).resolve().parents[2] / "toolkit"
LAB_DOORS = {"toolkit/lab", "toolkit/cli/lab.py"}

# Two-way package pairs not yet untied, each with the arrow that runs the wrong way: none left
# (issue 24 untied acceptance-images, acceptance-report, acceptance-stack and inventory-stack).
KNOWN_TWO_WAY: set[tuple[str, str]] = set()
# Longer cycles: the packages that reach each other through a chain of imports. One knot is
# left: toolkit.hardware reads acceptance.thresholds (the profile's floors), and acceptance's
# flows read inventories (hosts, over remote), which read hardware profiles. It may only shrink.
KNOWN_KNOT = {"acceptance", "hardware", "inventory", "remote"}
# Function-level imports of toolkit modules: 88 when this test was written, 46 since the steps
# got their own floor (toolkit/steps imports at module level; cli/up keeps `up --help` light),
# 31 since toolkit.stack re-exports nothing and acceptance's flow is toolkit/steps/accept.py,
# 18 since the stack's targets and names moved out of stack/ and the rest import at module
# level: what is left keeps a CLI group's `--help` (or an error's path) free of heavy modules.
MAX_FUNCTION_LEVEL_IMPORTS = 18


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "toolkit"


def _imports(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("toolkit"):
            if node.module == "toolkit":
                found += [f"toolkit.{alias.name}" for alias in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("toolkit")]
    return found


def _explained(lines: list[str], node: ast.stmt) -> bool:
    """A comment on the import's own line, or on the line above its block of imports."""
    if "#" in lines[node.lineno - 1]:
        return True
    above = node.lineno - 2
    while above >= 0 and lines[above].strip().startswith(("from ", "import ")):
        above -= 1
    return above >= 0 and lines[above].strip().startswith("#")


def _graph() -> tuple[dict[str, set[str]], list[str], list[str]]:
    """Package edges, the lab's importers outside it, and the function-level ``toolkit``
    imports (``path:line``, ending in `` (no comment)`` where nothing says why)."""
    edges: dict[str, set[str]] = defaultdict(set)
    lab_importers = []
    function_level = []
    for path in sorted(TOOLKIT.rglob("*.py")):
        relative = path.relative_to(TOOLKIT.parent)
        module = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        text = path.read_text()
        tree = ast.parse(text)
        lines = text.splitlines()
        for target in _imports(tree):
            source, dest = _package(module), _package(target)
            if dest != source:
                edges[source].add(dest)
            inside = any(str(relative).startswith(door) for door in LAB_DOORS)
            if dest == "lab" and not inside:
                lab_importers.append(str(relative))
        for function in ast.walk(tree):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and _imports(node):
                        why = "" if _explained(lines, node) else " (no comment)"
                        function_level += [f"{relative}:{node.lineno}{why}"] * len(_imports(node))
    return edges, lab_importers, function_level


def test_no_new_two_way_package_imports_and_nothing_outside_the_lab_imports_it() -> None:
    edges, lab_importers, function_level = _graph()
    two_way = {tuple(sorted((a, b))) for a in edges for b in edges[a] if a in edges.get(b, ())}
    print(f"\ntwo-way package pairs: {len(two_way)}; function-level toolkit imports: "
          f"{len(function_level)}")  # fmt: skip
    assert lab_importers == [], f"imports of toolkit.lab outside the lab: {lab_importers}"
    assert two_way <= KNOWN_TWO_WAY, f"new two-way package imports: {two_way - KNOWN_TWO_WAY}"
    untied = KNOWN_TWO_WAY - two_way
    assert not untied, f"untied, take them off KNOWN_TWO_WAY: {untied}"
    assert len(function_level) <= MAX_FUNCTION_LEVEL_IMPORTS, function_level
    unexplained = [where for where in function_level if where.endswith("(no comment)")]
    assert unexplained == [], f"function-level imports without a comment saying why: {unexplained}"


def _knots(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected sets of two or more packages (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    knots: list[set[str]] = []

    def visit(package: str) -> None:
        index[package] = low[package] = len(index)
        stack.append(package)
        for target in edges.get(package, ()):
            if target not in index:
                visit(target)
                low[package] = min(low[package], low[target])
            elif target in stack:
                low[package] = min(low[package], index[target])
        if low[package] == index[package]:
            knot = set()
            while True:
                member = stack.pop()
                knot.add(member)
                if member == package:
                    break
            if len(knot) > 1:
                knots.append(knot)

    for package in sorted(edges):
        if package not in index:
            visit(package)
    return knots


def test_no_package_joins_the_knot_and_it_only_shrinks() -> None:
    edges, _lab_importers, _function_level = _graph()
    knots = _knots(edges)
    print(f"\npackage cycles: {[sorted(k) for k in knots]}")
    assert all(knot <= KNOWN_KNOT for knot in knots), f"new package cycles: {knots}"
    assert set().union(*knots) == KNOWN_KNOT, f"untied, take them off KNOWN_KNOT: {knots}"


def test_only_the_cli_imports_the_steps() -> None:
    """The steps are the floor under the CLI (docs/architecture.md): a domain package that
    imported one would run a step's flow from below it."""
    edges, _lab_importers, _function_level = _graph()
    importers = {package for package, targets in edges.items() if "steps" in targets}
    assert importers == {"cli"}, f"packages importing toolkit.steps: {sorted(importers)}"
