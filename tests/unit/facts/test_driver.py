"""A driver that was on the node before gpunode: the footprint parser, the classifier and the
decision, on command outputs in the shapes the real commands print.

Shapes: `dpkg -S` prints ``pkg[:arch]: PATH`` for an owned file and ``dpkg-query: no path
found matching pattern PATH`` for one no package owns (future-architect/vuls,
scanner/debian_test.go, Test_debian_parseGetPkgName). `dpkg-query -W -f
'${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'` is the facts probe's own listing; the
versions are public ones: NVIDIA's Ubuntu repository builds ``-0ubuntu1``
(libnvidia-compute-450 450.51.06-0ubuntu1, NVIDIA/nvidia-docker#1364), Ubuntu's archive
``-0ubuntu0.<release>.<n>`` (nvidia-kernel-common-610 610.43.02-0ubuntu0.26.04.1,
psygreg/linuxtoys#1082), Debian's archive ``~deb<N>u<n>`` (470.141.03-1~deb11u1,
NVIDIA/k8s-device-plugin#346).
"""

from __future__ import annotations

import fnmatch
import subprocess
from typing import Any

import pytest

from toolkit.facts.driver import (
    DRIVER_FILES_PROBE,
    RUNFILE_MARKERS,
    classify_existing_driver,
    parse_driver_files,
)
from toolkit.lab import runfile
from toolkit.node.aptpins import DriverDecision, decide_existing_driver
from toolkit.node.nodefacts import PROBE_SCRIPT, driver_managed, node_facts

KERNEL = "6.8.0-1015-aws"
MODULE = f"/lib/modules/{KERNEL}/kernel/drivers/video/nvidia.ko"
LIBDIR = "/usr/lib/x86_64-linux-gnu"

# A runfile install of 550.127.05: the probe's "present" lines, then dpkg -S on them.
RUNFILE_PROBE = f"""\
present /usr/bin/nvidia-uninstall
present /usr/bin/nvidia-installer
present /var/log/nvidia-installer.log
present {MODULE}
present {LIBDIR}/libnvidia-ml.so.550.127.05
dpkg-query: no path found matching pattern /usr/bin/nvidia-uninstall
dpkg-query: no path found matching pattern /usr/bin/nvidia-installer
dpkg-query: no path found matching pattern /var/log/nvidia-installer.log
dpkg-query: no path found matching pattern {MODULE}
dpkg-query: no path found matching pattern {LIBDIR}/libnvidia-ml.so.550.127.05
"""

# The same libraries from NVIDIA's Ubuntu repository.
APT_PROBE = f"""\
present {LIBDIR}/libnvidia-ml.so.550.127.05
present {LIBDIR}/libcuda.so.550.127.05
libnvidia-compute-550:amd64: {LIBDIR}/libcuda.so.550.127.05
libnvidia-compute-550:amd64: {LIBDIR}/libnvidia-ml.so.550.127.05
"""

NVIDIA_APT = {
    "nvidia-driver-550-open": "550.127.05-0ubuntu1",
    "nvidia-dkms-550-open": "550.127.05-0ubuntu1",
    "libnvidia-compute-550": "550.127.05-0ubuntu1",
    "openssh-server": "1:8.9p1-3ubuntu0.10",
}
UBUNTU_APT = {
    "nvidia-driver-570-server": "570.133.20-0ubuntu0.22.04.1",
    "libnvidia-compute-570-server": "570.133.20-0ubuntu0.22.04.1",
    "linux-modules-nvidia-570-server-aws": "6.8.0-1015.16~22.04.1",
}
DEBIAN_APT = {"nvidia-driver": "535.216.01-1~deb12u1", "nvidia-kernel-dkms": "535.216.01-1~deb12u1"}

PINNED = {"version": "550.127.05", "branch": "550", "flavour": "open"}
PINS = {
    "nvidia-driver-550-open": "550.127.05-0ubuntu1",
    "nvidia-dkms-550-open": "550.127.05-0ubuntu1",
}


def test_driver_files_name_their_owner_or_none() -> None:
    assert parse_driver_files(APT_PROBE) == {
        f"{LIBDIR}/libcuda.so.550.127.05": "libnvidia-compute-550",
        f"{LIBDIR}/libnvidia-ml.so.550.127.05": "libnvidia-compute-550",
    }
    files = parse_driver_files(RUNFILE_PROBE)
    assert set(files.values()) == {None}
    assert "/usr/bin/nvidia-uninstall" in files and MODULE in files
    assert parse_driver_files("") == {}


def test_the_probe_looks_where_the_runfile_installs() -> None:
    for path in (*RUNFILE_MARKERS, "/lib/modules/$k/kernel/drivers/video/nvidia.ko"):
        assert path in DRIVER_FILES_PROBE
    assert "section driver_files sh -c" in PROBE_SCRIPT


@pytest.mark.parametrize(
    ("probe", "packages", "kind", "version"),
    [
        ("", {"openssh-server": "1:8.9p1-3ubuntu0.10"}, "none", None),
        (RUNFILE_PROBE, {}, "runfile", "550.127.05"),
        # A runfile over a package install: the unowned files decide.
        (RUNFILE_PROBE, NVIDIA_APT, "runfile", "550.127.05"),
        (APT_PROBE, NVIDIA_APT, "apt-nvidia", "550.127.05"),
        ("", UBUNTU_APT, "apt-distribution", "570.133.20"),
        ("", DEBIAN_APT, "apt-distribution", "535.216.01"),
    ],
)
def test_classify(probe: str, packages: dict[str, str], kind: str, version: str | None) -> None:
    found = classify_existing_driver(parse_driver_files(probe), packages)
    assert (found.kind, found.version) == (kind, version)


def test_a_runfile_without_a_versioned_library_takes_the_loaded_version() -> None:
    files = {"/usr/bin/nvidia-uninstall": None}
    found = classify_existing_driver(files, {}, loaded="535.183.01")
    assert (found.kind, found.version, found.files) == (
        "runfile",
        "535.183.01",
        ("/usr/bin/nvidia-uninstall",),
    )


def decide(probe: str, packages: dict[str, str], managed: bool = False) -> DriverDecision:
    found = classify_existing_driver(parse_driver_files(probe), packages)
    return decide_existing_driver(found, PINNED, PINS, managed, host="gpu-1")


def test_a_runfile_driver_is_refused_with_its_files_and_the_way_out() -> None:
    decision = decide(RUNFILE_PROBE, {})
    assert decision.action == "refuse"
    assert decision.message.startswith("gpu-1: NVIDIA driver 550.127.05 was installed by")
    assert "/usr/bin/nvidia-uninstall" in decision.message and MODULE in decision.message
    assert "`sudo nvidia-uninstall --silent`" in decision.message
    assert "reboot it, then rerun" in decision.message
    # Even on a node gpunode provisioned: the runfile went on top of it.
    assert decide(RUNFILE_PROBE, NVIDIA_APT, managed=True).action == "refuse"


def test_the_pinned_apt_driver_is_adopted() -> None:
    decision = decide(APT_PROBE, NVIDIA_APT)
    assert decision.action == "adopt"
    assert "NVIDIA's repository" in decision.message and "adopted" in decision.message


@pytest.mark.parametrize(
    ("packages", "purge"),
    [
        # Another version of the pinned packages.
        (
            {**NVIDIA_APT, "nvidia-driver-550-open": "550.90.07-0ubuntu1"},
            "sudo apt-get purge libnvidia-compute-550 nvidia-dkms-550-open nvidia-driver-550-open",
        ),
        # The pinned version, the other flavour.
        (
            {"nvidia-driver-550": "550.127.05-0ubuntu1", "nvidia-dkms-550": "550.127.05-0ubuntu1"},
            "sudo apt-get purge nvidia-dkms-550 nvidia-driver-550",
        ),
        # An unpinned dependency of another version.
        (
            {**NVIDIA_APT, "libnvidia-compute-550": "550.90.07-0ubuntu1"},
            "sudo apt-get purge libnvidia-compute-550 nvidia-dkms-550-open nvidia-driver-550-open",
        ),
        # Ubuntu's archive.
        (
            UBUNTU_APT,
            "sudo apt-get purge libnvidia-compute-570-server linux-modules-nvidia-570-server-aws "
            "nvidia-driver-570-server",
        ),
        (DEBIAN_APT, "sudo apt-get purge nvidia-driver nvidia-kernel-dkms"),
    ],
)
def test_another_apt_driver_is_refused_with_the_purge(packages: dict[str, str], purge: str) -> None:
    decision = decide("", packages)
    assert decision.action == "refuse"
    assert f"`{purge}`" in decision.message
    assert "the stack pins the open driver 550.127.05" in decision.message


def test_the_distribution_origin_is_named() -> None:
    assert "the distribution's archive" in decide("", UBUNTU_APT).message


def test_a_driver_gpunode_installed_moves_with_the_pin() -> None:
    moving = {**NVIDIA_APT, "nvidia-driver-550-open": "550.90.07-0ubuntu1"}
    assert decide("", moving, managed=True).action == "proceed"
    assert decide("", {}).action == "proceed"


@pytest.mark.parametrize(
    ("facts", "managed"),
    [
        ({"converged": {}, "state": {"state": "new"}}, False),
        ({"converged": "python3 is missing on the node", "state": {"state": "new"}}, False),
        ({"converged": {"driver": {"stamp": {}}}, "state": {"state": "new"}}, True),
        ({"converged": {}, "state": {"state": "not-ready"}}, True),
    ],
)
def test_driver_managed(facts: dict[str, Any], managed: bool) -> None:
    assert driver_managed(facts) is managed


def test_node_facts_carry_the_decision_preflight_reads() -> None:
    sections = {
        "dpkg": (0, "".join(f"{n}\t{v}\tii \n" for n, v in NVIDIA_APT.items())),
        "driver_files": (0, RUNFILE_PROBE),
        "kernel": (0, KERNEL + "\n"),
    }
    resolved = {"driver": {**PINNED, "packages": PINS}}
    facts = node_facts(sections, resolved)
    assert facts["existing_driver"]["kind"] == "runfile"
    assert facts["driver_decision"]["action"] == "refuse"
    sections["driver_files"] = (0, APT_PROBE)
    assert node_facts(sections, resolved)["driver_decision"]["action"] == "adopt"


def probe_patterns(kernel: str) -> list[str]:
    """The paths and globs the facts probe tests, for one kernel release."""
    loop = DRIVER_FILES_PROBE.split("for f in ", 1)[1].split("; do", 1)[0]
    return [word.replace("$k", kernel) for word in loop.split()]


def test_the_lab_fault_leaves_what_the_probe_finds_and_classifies_as_runfile() -> None:
    kernel = "6.1.0-26-amd64"
    files = runfile.footprint(kernel)
    patterns = probe_patterns(kernel)
    seen = [path for path in files if any(fnmatch.fnmatch(path, p) for p in patterns)]
    # Every marker, the module and the versioned libraries (the .so.1 links are not probed).
    assert set(seen) == {p for p in files if not p.endswith(".so.1")}
    probe = "".join(f"present {p}\n" for p in seen) + "".join(
        f"dpkg-query: no path found matching pattern {p}\n" for p in seen
    )
    found = classify_existing_driver(parse_driver_files(probe), {})
    assert (found.kind, found.version) == ("runfile", runfile.VERSION)
    assert runfile.UNINSTALLER in found.files and runfile.module_path(kernel) in found.files


def test_the_lab_uninstaller_removes_exactly_the_footprint() -> None:
    kernel = "6.1.0-26-amd64"
    script = runfile.uninstaller(kernel)
    assert subprocess.run(["sh", "-n"], input=script, text=True).returncode == 0
    removed = script.split("rm -f ", 1)[1].split("\n", 1)[0].split()
    assert sorted(removed) == sorted(runfile.footprint(kernel))
    assert runfile.footprint(kernel)[runfile.UNINSTALLER].mode == 0o755
