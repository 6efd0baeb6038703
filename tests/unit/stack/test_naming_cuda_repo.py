"""naming.yml's names and versions, checked against what apt printed from NVIDIA's CUDA repository.

No public copy of the repository's ``Packages`` index (its stanzas) for ubuntu2204, ubuntu2404
or debian12 was found; what public logs kept of it is apt's own report of the index, stored
under ``tests/data/real/cuda-repo/<os>/`` (sources and what was searched:
tests/data/real/SOURCES.md, "cuda-repo/"). Each test resolves stacks whose versions appear in a
capture and checks that every name the rules produce for that component is one the repository
carries, at a version the stack's requirement accepts and no other of the listed versions does.
"""

from __future__ import annotations

import re

import pytest
from shared_fixtures import REPO

from toolkit.stack.debversion import satisfies
from toolkit.stack.resolve import resolve
from unit.stack.support import make

CAPTURES = REPO / "tests" / "data/real/cuda-repo"
NVIDIA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/{os}/x86_64"


def _nvidia_versions(capture: str, os_id: str) -> list[str]:
    """The versions an ``apt-cache policy`` version table lists from NVIDIA's repository for
    ``os_id``: a version line (``[***] VERSION PRIORITY``) followed by indented source lines."""
    source = NVIDIA_REPO.format(os=os_id)
    versions: list[str] = []
    current = ""
    for line in (CAPTURES / os_id / capture).read_text().splitlines():
        version_line = re.fullmatch(r"\s+(?:\*\*\* )?(\S+) -?\d+", line)
        if version_line:
            current = version_line.group(1)
        elif current and re.fullmatch(rf"\s+-?\d+ {re.escape(source)}  Packages", line):
            versions.append(current)
    return versions


def _only_match(requirement: str, offered: list[str]) -> str:
    matches = [v for v in offered if satisfies(requirement, v)]
    assert len(matches) == 1, (requirement, offered)
    return matches[0]


# --- ubuntu2204 ---------------------------------------------------------------------------


def _policy_versions() -> list[str]:
    return _nvidia_versions("apt-policy-libnccl-dev.txt", "ubuntu2204")


def test_the_ubuntu2204_capture_lists_nvidias_nccl_builds() -> None:
    # One NCCL release is built for several CUDA minors; each build is its own version.
    assert _policy_versions() == [
        "2.28.9-1+cuda13.0",
        "2.28.9-1+cuda12.9",
        "2.28.7-1+cuda13.0",
        "2.28.7-1+cuda12.9",
        "2.28.3-1+cuda13.0",
    ]


@pytest.mark.parametrize("nccl", _policy_versions())
def test_nccl_names_the_build_nvidias_ubuntu2204_repository_carries(nccl: str) -> None:
    cuda = "13.0.2" if nccl.endswith("+cuda13.0") else "12.9.1"
    stack, hardware = make({"cuda": cuda, "nccl": nccl})
    packages = resolve(stack, hardware, "ubuntu2204")["nccl"]["packages"]
    assert set(packages) == {"libnccl2", "libnccl-dev"}
    # The capture is libnccl-dev's table; the rule asks for exactly that build and no other.
    assert _only_match(packages["libnccl-dev"], _policy_versions()) == nccl
    assert packages["libnccl2"] == nccl


def test_fabric_manager_580_is_the_unsuffixed_package_on_ubuntu2204() -> None:
    capture = (CAPTURES / "ubuntu2204/apt-install-fabricmanager-580.txt").read_text()
    # apt: "Package nvidia-fabricmanager-580 is a virtual package provided by:
    #  nvidia-fabricmanager 580.65.06-1"; libnvsdm-580 has no such version either.
    provider = re.search(r"virtual package provided by:\n (\S+) (\S+)\n", capture)
    assert provider is not None
    real_name, real_version = provider.groups()
    assert (real_name, real_version) == ("nvidia-fabricmanager", "580.65.06-1")
    assert "for 'nvidia-fabricmanager-580' was not found" in capture

    stack, hardware = make({"driver": {"version": "580.65.06"}, "cuda": "13.0.0",
                            "nccl": "2.28.3-1+cuda13.0"})  # fmt: skip
    section = resolve(stack, hardware, "ubuntu2204")["fabric_manager"]
    assert section["enabled"]
    packages = section["packages"]
    assert "nvidia-fabricmanager-580" not in packages
    assert satisfies(packages[real_name], real_version)
    assert not any(name.endswith("-580") for name in packages)


# --- debian12 -----------------------------------------------------------------------------


def _driver_versions() -> list[str]:
    return _nvidia_versions("apt-cache-policy-nvidia-driver.txt", "debian12")


def test_the_debian12_capture_lists_nvidias_driver_builds() -> None:
    assert _driver_versions() == [
        "560.28.03-1",
        "555.42.06-1",
        "555.42.02-1",
        "550.90.07-1",
        "550.54.15-1",
        "550.54.14-1",
        "545.23.08-1",
        "545.23.06-1",
    ]


@pytest.mark.parametrize("version", _driver_versions())
@pytest.mark.parametrize("flavour", ["open", "proprietary"])
def test_debian12_driver_asks_for_the_version_nvidias_repository_carries(
    version: str, flavour: str
) -> None:
    upstream = version.rsplit("-", 1)[0]
    stack, hardware = make({"driver": {"version": upstream, "flavour": flavour}})
    packages = resolve(stack, hardware, "debian12")["driver"]["packages"]
    # NVIDIA's debian12 repository names the driver meta-package nvidia-driver, whatever the
    # branch, and revision -1 is the one it carries; the requirement picks that build alone.
    assert "nvidia-driver" in packages
    assert not any(re.fullmatch(r"nvidia-driver-\d+(-open)?", name) for name in packages)
    assert _only_match(packages["nvidia-driver"], _driver_versions()) == version
