"""The probe dialect (``toolkit.facts.probe``): scripts run by a real ``sh``, split back."""

from __future__ import annotations

import ast
import subprocess
import sys

from shared_fixtures import REPO

from toolkit.facts import probe, system
from toolkit.facts.probe import Fact

FACTS_DIR = REPO / "toolkit" / "facts"


def run(script: str) -> str:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True).stdout


def test_a_script_of_facts_and_blocks_splits_back_into_its_sections() -> None:
    echo = Fact("echo", ("printf", "%s\\n", "a b", "c"), lambda rc, text: text.split("\n"))
    script = probe.script(
        [
            echo,
            Fact("absent", ("gpunode-no-such-program", "-x"), lambda rc, text: rc),
            Fact("fails", ("sh", "-c", "echo oops >&2; exit 3"), lambda rc, text: text),
            probe.block("no-newline", "printf 'x'"),
            probe.block("blank-last-line", "printf 'x\\n\\n'"),
            probe.block("skipped", "echo never", when="[ -e /gpunode/no/such/file ]"),
            "for f in one two; do\n" + probe.block("each", 'echo "$f"', arg='"$f"') + "\ndone",
        ]
    )
    sections = probe.split(run(script))
    assert [(s.name, s.arg, s.text, s.rc) for s in sections] == [
        ("echo", "", "a b\nc", 0),
        ("absent", "", "", None),
        ("fails", "", "oops", 3),
        ("no-newline", "", "x", 0),
        ("blank-last-line", "", "x\n", 0),
        ("skipped", "", "", None),
        ("each", "one", "one", 0),
        ("each", "two", "two", 0),
    ]
    named = probe.by_name(run(script))
    assert echo.read(named) == ["a b", "c"]
    assert named["absent"] == (None, "")
    assert Fact("never-printed", ("true",), lambda rc, text: rc).read(named) is None


def test_a_terminal_connection_crlf_and_output_without_sections() -> None:
    text = run(probe.script([probe.block("lines", "printf 'a\\nb\\n'")]))
    assert probe.split(text.replace("\n", "\r\n")) == probe.split(text)
    assert probe.split(text)[0].text == "a\nb"
    assert probe.split("sh: 1: lsblk: not found") == []


def test_the_facts_package_imports_the_standard_library_and_itself_only() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for path in sorted(FACTS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                top = name.split(".")[0]
                assert top in stdlib or name.startswith("toolkit.facts"), f"{path.name}: {name}"


def test_one_marker_format_in_the_toolkit_roles_and_playbooks() -> None:
    root = FACTS_DIR.parents[1]
    owners = {
        str(path.relative_to(root))
        for folder in ("toolkit", "roles", "playbooks")
        for path in (root / folder).rglob("*")
        if path.is_file()
        and path.suffix in (".py", ".yml", ".yaml", ".sh", ".j2")
        and "@@gpunode" in path.read_text(errors="replace")
    }
    assert owners == {"toolkit/facts/probe.py"}


def test_the_address_fact_is_the_first_address_or_none() -> None:
    assert system.ADDRESS.parse(0, "10.0.0.2 172.17.0.1 fd00::2 ") == "10.0.0.2"
    assert system.ADDRESS.parse(0, "") is None
    assert system.ADDRESS.parse(None, "") is None
    assert system.ADDRESS.parse(1, "hostname: invalid option -- 'I'") is None
