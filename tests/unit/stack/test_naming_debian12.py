"""NVIDIA's debian12 repository names, checked against what apt printed from it.

The real artefacts and their sources: tests/data/real/SOURCES.md.
"""

from __future__ import annotations

import re

import pytest
from shared_fixtures import REPO

from toolkit.lab import catalog
from toolkit.stack.resolve import naming_rules, resolve
from unit.stack.support import make

REAL = REPO / "tests" / "data/real"


def _module_alternatives(apt_output: str) -> list[str]:
    """Package names of nvidia-driver's kernel module dependency in apt's unmet-dependency
    report (a ``Depends:`` line continued by indented ``or`` lines), versions left out."""
    lines = apt_output.splitlines()
    start = next(i for i, line in enumerate(lines) if "Depends: nvidia-kernel-dkms" in line)
    names = []
    for line in lines[start:]:
        text = line.split("Depends:", 1)[-1].strip()
        names.append(text.split()[0])
        if not text.endswith(" or"):
            break
    return names


def _real_alternatives() -> list[str]:
    return _module_alternatives((REAL / "nvidia-debian12-apt-driver-depends.txt").read_text())


def test_the_real_report_names_nvidias_open_module() -> None:
    # nvidia-kernel-545.23.08 is a virtual name (what nvidia-kernel-dkms provides).
    assert _real_alternatives() == [
        "nvidia-kernel-dkms",
        "nvidia-kernel-545.23.08",
        "nvidia-kernel-open-dkms",
    ]


@pytest.mark.parametrize("version", ["550.127.05", "580.95.05", "595.45.04"])
@pytest.mark.parametrize("flavour", ["open", "proprietary"])
def test_debian12_module_package_is_the_one_nvidias_repository_has(
    version: str, flavour: str
) -> None:
    stack, hardware = make({"driver": {"version": version, "flavour": flavour}})
    names = set(resolve(stack, hardware, "debian12")["driver"]["packages"])
    modules = {n for n in names if re.fullmatch(r"nvidia-(open-)?kernel-(open-)?dkms", n)}
    wanted = "nvidia-kernel-open-dkms" if flavour == "open" else "nvidia-kernel-dkms"
    assert modules == {wanted}
    assert wanted in _real_alternatives()
    assert "nvidia-open-kernel-dkms" not in names  # Debian's archive name, not NVIDIA's


def test_the_lab_driver_reaches_the_module_as_nvidias_does() -> None:
    spec = next(
        s for s in catalog.packages() if s.name == "nvidia-driver" and s.version == "550.127.05-1"
    )
    module = next(d for d in spec.depends if d.startswith("nvidia-kernel-dkms"))
    lab = [alt.split()[0] for alt in module.split(" | ")]
    real = _real_alternatives()
    # The same real packages in the same order; the virtual middle name carries the version.
    assert [lab[0], lab[2]] == [real[0], real[2]]
    assert lab[1] == "nvidia-kernel-550.127.05" and real[1].startswith("nvidia-kernel-5")


def test_every_naming_rule_names_a_known_source() -> None:
    rules = naming_rules()
    known = set(rules["sources"])
    found = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if "source" in node:
                found.append(node["source"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({key: value for key, value in rules.items() if key != "sources"})
    assert found and set(found) <= known, set(found) - known
    assert "debian12_open_module" in found
