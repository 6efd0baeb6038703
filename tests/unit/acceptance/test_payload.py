"""The runner's zipapp (toolkit.acceptance.payload): the same bytes from the same sources (the
training image bakes it in and must stay reproducible), every module of the runner in it, the
standard library only, and runnable by a bare Python as a node runs it."""

from __future__ import annotations

import ast
import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

from toolkit.acceptance import node_runner, payload


def _entries(data: bytes) -> list[zipfile.ZipInfo]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.infolist()


def test_the_zipapp_is_the_same_bytes_from_the_same_sources() -> None:
    first = payload.runner_zipapp.__wrapped__()
    second = payload.runner_zipapp.__wrapped__()
    assert first == second
    assert first.startswith(b"#!/usr/bin/env python3\n")
    entries = _entries(first)
    names = [e.filename for e in entries]
    assert names == sorted(names) == sorted(payload.runner_files())
    # Nothing of the build machine's clock or files' times and modes goes in.
    assert {e.date_time for e in entries} == {payload.ZIP_EPOCH} == {(1980, 1, 1, 0, 0, 0)}
    assert {e.external_attr >> 16 for e in entries} == {0o644}
    assert {e.compress_type for e in entries} == {zipfile.ZIP_STORED}


def test_the_zipapp_holds_every_module_of_the_runner_at_its_own_path() -> None:
    files = payload.runner_files()
    folder = Path(node_runner.__file__).parent
    modules = {f"toolkit/acceptance/node_runner/{p.name}" for p in folder.glob("*.py")}
    assert len(modules) >= 10 and modules <= set(files)
    for module in modules:
        assert files[module] == (folder / Path(module).name).read_bytes()
    # The parent packages are empty: their real __init__ files are not the runner's.
    assert files["toolkit/__init__.py"] == files["toolkit/acceptance/__init__.py"] == b""
    # With it, the facts' parsers it shares with the control machine (one owner each).
    shipped = {name.replace(".", "/") + ".py" for name in payload.SHIPPED_MODULES}
    assert "toolkit/facts/dpkg.py" in shipped and files["toolkit/facts/__init__.py"] == b""
    assert set(files) == modules | shipped | {
        "__main__.py",
        "toolkit/__init__.py",
        "toolkit/acceptance/__init__.py",
        "toolkit/facts/__init__.py",
    }


def test_a_module_of_another_package_ships_by_its_name() -> None:
    files = payload.runner_files(("toolkit.acceptance.memory_health",))
    source = Path(node_runner.__file__).parent.parent / "memory_health.py"
    assert files["toolkit/acceptance/memory_health.py"] == source.read_bytes()
    assert files["toolkit/acceptance/__init__.py"] == b""


def test_every_shipped_module_imports_the_standard_library_only() -> None:
    files = payload.runner_files()
    shipped = {name[:-3].replace("/", ".").removesuffix(".__init__") for name in files}
    for name, data in files.items():
        tree = ast.parse(data)
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [str(node.module)]
            else:
                continue
            for module in modules:
                root = module.split(".")[0]
                if root == "torch":  # the optional framework: imported where a check needs it
                    assert id(node) not in top_level, f"{name} imports torch at its top"
                    continue
                assert root in sys.stdlib_module_names or module in shipped, f"{name}: {module}"


def test_a_bare_python_runs_the_zipapp(runner_pyz: Path, tmp_path: Path) -> None:
    # -I -S: no site-packages, no PYTHONPATH, no current folder; only the archive itself.
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(runner_pyz), "nccl-probe"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    probe = json.loads(out.stdout)
    assert probe["framework"] is None and set(probe) >= {"version", "path", "how", "source"}
    bad = subprocess.run(
        [sys.executable, "-I", "-S", str(runner_pyz), "run", "--spec", "absent.json", "--out", "o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and "cannot read spec absent.json" in bad.stderr
