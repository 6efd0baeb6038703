"""The README's list of a site's edits to the sample is the list the integration test makes.

tests/integration/test_07_sample.py copies ``inventories/sample``, makes ``SITE_EDITS`` and
reaches ``ready`` on the lab; the README's "Making the sample yours" tells a site what to
edit. Both name the same edits, so neither can drift from the other. The test module is read
as source (``ast``), not imported: it needs a Docker engine only when it runs.
"""

from __future__ import annotations

import ast
import re

import yaml
from shared_fixtures import REPO

README = REPO / "README.md"
MODULE = REPO / "tests" / "integration" / "test_07_sample.py"
SAMPLE = REPO / "inventories" / "sample"


def _literal(name: str) -> object:
    tree = ast.parse(MODULE.read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                assert node.value is not None
                return ast.literal_eval(node.value)
    raise AssertionError(f"{MODULE} has no {name}")


def readme_edits() -> list[str]:
    """The bold names of the bullets under "Making the sample yours", in order."""
    text = README.read_text()
    start = text.index("**Making the sample yours.**")
    names: list[str] = []
    for line in text[start:].splitlines()[1:]:
        match = re.match(r"- \*\*`([a-z_]+)`\*\*:", line)
        if match:
            names.append(match.group(1))
        elif names and not line.startswith("  "):
            break
    return names


def test_readme_lists_exactly_the_tests_site_edits() -> None:
    edits = _literal("SITE_EDITS")
    assert isinstance(edits, dict)
    assert readme_edits() == list(edits)


def test_the_edited_repository_keys_are_the_samples_own() -> None:
    # Every repository key the test edits is one the sample documents (set or commented).
    text = (SAMPLE / "group_vars/all/repositories.yml").read_text()
    edits = _literal("SITE_EDITS")
    assert isinstance(edits, dict)
    for key in (*edits["repositories"], *edits["os"]):
        assert re.search(rf"^#? ?{key}:", text, re.MULTILINE), key


def test_the_lab_replaces_the_profile_the_sample_names() -> None:
    # The sample's GPU floors are its profile's alone (one source per floor): the lab drops
    # the profile name and writes its own floors for what needs GPU arithmetic.
    floors = _literal("GPU_FLOORS")
    hardware = yaml.safe_load((SAMPLE / "group_vars/h100_sxm/hardware.yml").read_text())
    acceptance = hardware["hardware"]["acceptance"]
    assert isinstance(floors, tuple)
    assert acceptance["profile"] == "h100-sxm-8"
    assert not set(floors) & set(acceptance)
