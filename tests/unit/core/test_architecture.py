"""The structure of ``toolkit``, read from its source (an AST walk, nothing imported).

Floors (docs/architecture.md, whose picture this reads): a module imports only from its own
floor or below, so no two packages reach each other through any chain of imports; nothing
outside the lab and its CLI imports the lab, and nothing but the CLI imports the steps. The
playbook engine (``toolkit/ansible``) holds no Ansible plugin and sits below every domain the
plugins (``toolkit/plugins``) call. The
count of function-level ``toolkit`` imports (each hides an arrow) is capped, and each
says why it is there in a comment on its line or just above its block of imports. No file is
over about 800 lines without saying why on its first line. No ``nvidia-smi`` query is spelled
outside ``toolkit/facts/`` (and the lab's stand-ins, which answer them), in the roles and
playbooks either.
"""

from __future__ import annotations

import ast
from collections import defaultdict

from shared_fixtures import REPO

TOOLKIT = REPO / "toolkit"
LAB_DOORS = {"toolkit/lab", "toolkit/cli/lab.py"}

# Function-level imports of toolkit modules: 88 when this test was written, 46 since the steps
# got their own floor (toolkit/steps imports at module level; cli/up keeps `up --help` light),
# 31 since toolkit.stack re-exports nothing and acceptance's flow is toolkit/steps/accept/,
# 18 since the stack's targets and names moved out of stack/ and the rest import at module
# level: what is left keeps a CLI group's `--help` (or an error's path) free of heavy modules;
# 20 since `up` imports its image stage (Docker's client) in the thread beside the survey and
# the acceptance flow only when a node needs accepting: a no-op `up` imports about half as much
# (toolkit/steps/up.py). Raised only with a measured reason like these.
MAX_FUNCTION_LEVEL_IMPORTS = 20


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


def test_nothing_outside_the_lab_imports_it_and_function_level_imports_say_why() -> None:
    _edges, lab_importers, function_level = _graph()
    print(f"\nfunction-level toolkit imports: {len(function_level)}")
    assert lab_importers == [], f"imports of toolkit.lab outside the lab: {lab_importers}"
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


def test_no_package_cycles() -> None:
    """No two packages reach each other, directly (a two-way pair) or through a chain."""
    edges, _lab_importers, _function_level = _graph()
    knots = sorted(sorted(knot) for knot in _knots(edges))
    print(f"\npackage cycles: {knots}")
    assert knots == [], f"packages that reach each other through their imports: {knots}"


def test_only_the_cli_imports_the_steps() -> None:
    """The steps are the floor under the CLI (docs/architecture.md): a domain package that
    imported one would run a step's flow from below it."""
    edges, _lab_importers, _function_level = _graph()
    importers = {package for package, targets in edges.items() if "steps" in targets}
    assert importers == {"cli"}, f"packages importing toolkit.steps: {sorted(importers)}"


def _floors() -> dict[str, int]:
    """The picture of docs/architecture.md's "Floors": each package or module by its floor,
    the top (``cli/``) 0; lines at one indentation are one floor."""
    doc = (TOOLKIT.parent / "docs" / "architecture.md").read_text()
    picture = doc.split("## Floors: what may import what", 1)[1].split("```")[1]
    floors = {}
    for line in picture.strip("\n").splitlines():
        depth = (len(line) - len(line.lstrip(" "))) // 2
        for word in line.split():
            if word.endswith("/") or word.endswith(".py"):
                floors[word.removesuffix("/").removesuffix(".py")] = depth
    return floors


def test_the_floors_picture_holds_every_package_and_no_import_goes_up() -> None:
    """docs/architecture.md draws the floors; the code keeps to the drawing."""
    floors = _floors()
    edges, _lab_importers, _function_level = _graph()
    modules = {path.stem for path in TOOLKIT.glob("*.py")}
    packages = {path.parent.name for path in TOOLKIT.glob("*/__init__.py")}
    missing = {name for name in modules | packages if not name.startswith("__")} - set(floors)
    assert missing == set(), f"not on the picture: {sorted(missing)}"
    up = sorted(
        f"{source} -> {target}"
        for source, targets in edges.items()
        for target in targets
        if not source.startswith("__") and not target.startswith("__")
        if floors[target] < floors[source]
    )
    assert up == [], f"imports that go up a floor (docs/architecture.md): {up}"


ENGINE = "ansible"
PLUGINS = "plugins"
# What makes a file an Ansible plugin: action plugins subclass ActionBase, filter plugins define
# FilterModule, modules build an AnsibleModule.
PLUGIN_MARKS = ("ansible.plugins", "ansible.module_utils", "FilterModule", "AnsibleModule")


def test_the_engine_holds_no_plugin_and_sits_below_the_domains_its_plugins_call() -> None:
    """Plugins are content (issue 40): they live in ``toolkit/plugins``, and the engine that runs
    playbooks imports none of the domains they call; the picture puts the engine below them."""
    in_engine = sorted(
        str(path.relative_to(TOOLKIT.parent))
        for path in (TOOLKIT / ENGINE).rglob("*.py")
        if any(mark in path.read_text() for mark in PLUGIN_MARKS)
    )
    assert in_engine == [], f"Ansible plugins inside the engine package: {in_engine}"
    assert not (TOOLKIT / ENGINE / "plugins").exists()
    assert (TOOLKIT / PLUGINS / "action").is_dir()

    floors = _floors()
    ground = max(floors.values())
    edges, _lab_importers, _function_level = _graph()
    domains = {
        target
        for target in edges[PLUGINS]
        if target != ENGINE and not target.startswith("__") and floors[target] != ground
    }
    assert domains >= {"check", "disks", "node", "stack", "inventory"}
    beside_or_above = sorted(d for d in domains if floors[d] >= floors[ENGINE])
    assert beside_or_above == [], (
        f"domains the plugins call on the engine's floor or below it: {beside_or_above}"
    )
    imported = sorted(edges[ENGINE] & domains)
    assert imported == [], f"domains the engine imports: {imported}"


MAX_LINES = 800


def test_no_toolkit_file_is_over_800_lines_without_a_reason_on_its_first_line() -> None:
    """A file past about 800 lines has seams already (issue 24): cut along them, or say on its
    first line why it stays whole (the line names its length: "... over 800 lines: ...")."""
    long = {}
    for path in sorted(TOOLKIT.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            lines = path.read_bytes().decode("utf-8", errors="replace").splitlines()
            if len(lines) > MAX_LINES and "800 lines" not in lines[0]:
                long[str(path.relative_to(TOOLKIT.parent))] = len(lines)
    assert long == {}, f"over {MAX_LINES} lines with no reason on the first line: {long}"


# What spells an nvidia-smi query: its query and format options, and the topology matrix's
# subcommand. toolkit/facts/ owns every such command (toolkit/facts/nvidia.py); the lab's
# stand-ins answer them, so they read the same options.
SMI_SPELLINGS = ("--query-", "--format=csv", "--loop-ms")
FACT_HOMES = ("toolkit/facts/", "toolkit/lab/")


def test_no_nvidia_smi_query_outside_the_facts() -> None:
    found = []
    for path in sorted(TOOLKIT.rglob("*.py")):
        where = str(path.relative_to(TOOLKIT.parent))
        if where.startswith(FACT_HOMES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            elif isinstance(node, ast.JoinedStr):  # an f-string's literal parts
                text = "".join(
                    part.value
                    for part in node.values
                    if isinstance(part, ast.Constant) and isinstance(part.value, str)
                )
            else:
                continue
            if text.startswith(SMI_SPELLINGS) or text == "topo":
                found.append(f"{where}:{node.lineno} {text[:40]!r}")
    # The roles and playbooks read them through gpunode_node_facts (its `read`), not a command.
    for path in sorted([*(REPO / "roles").rglob("*.yml"), *(REPO / "playbooks").rglob("*.yml")]):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
            if any(spelling in code for spelling in SMI_SPELLINGS):
                found.append(f"{path.relative_to(REPO)}:{number} {code.strip()[:40]!r}")
    assert found == [], f"nvidia-smi queries outside toolkit/facts/: {found}"
