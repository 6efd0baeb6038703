"""A driver that was there before gpunode: its files, their owners, and how it came."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from toolkit.facts.dpkg import strip_epoch_revision
from toolkit.facts.probe import Fact

#
# Rebuilt cloud instances often come with a driver. Its footprint tells how it came:
# - NVIDIA's .run installer: nvidia-installer installs itself to /usr/bin/nvidia-installer
#   (NVIDIA driver README, "Installing the NVIDIA Driver", download.nvidia.com/XFree86/
#   Linux-x86_64/455.38/README/installdriver.html), logs to /var/log/nvidia-installer.log
#   (its log's header names the path) and is removed with /usr/bin/nvidia-uninstall (CUDA
#   Installation Guide for Linux, "Handle Conflicting Installation Methods":
#   `sudo /usr/bin/nvidia-uninstall`); its kernel module goes to /lib/modules/`uname -r`/
#   kernel/drivers/video/ or .../video/ (NVIDIA support answer 141, "Linux - Installed
#   components"). dpkg owns none of these files. A runfile install and a package install must
#   not be mixed: the CUDA guide's "Handle Conflicting Installation Methods" has the runfile's
#   uninstalled first, and Debian's nvidia-installer-cleanup package (packages.debian.org)
#   says such an installation conflicts with the packaged drivers.
# - apt: the driver's packages are in dpkg's database; the libraries belong to them.
RUNFILE_MARKERS = (
    "/usr/bin/nvidia-uninstall",
    "/usr/bin/nvidia-installer",
    "/var/log/nvidia-installer.log",
)
RUNFILE_MODULE_DIRS = ("kernel/drivers/video", "video")
DRIVER_LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu"
# The versioned files only (libnvidia-ml.so.550.127.05): the installer writes them there, while
# Debian's packages keep theirs under nvidia/current/ and reach them through alternatives,
# whose links in this directory dpkg does not list as owned.
DRIVER_LIBRARIES = ("libnvidia-ml.so.[0-9][0-9][0-9].*", "libcuda.so.[0-9][0-9][0-9].*")
# Each of those files that exists ("present PATH"), then `dpkg -S` of them: "pkg[:arch][,
# pkg...]: PATH" for an owned file, "dpkg-query: no path found matching pattern PATH" for one
# no package owns (the shapes vuls parses, future-architect/vuls scanner/debian_test.go,
# Test_debian_parseGetPkgName). dpkg -S exits 1 on any unowned file: the probe ignores it.
DRIVER_FILES_PROBE = (
    'k=$(uname -r); found=""\n'
    "for f in "
    + " ".join(RUNFILE_MARKERS)
    + " "
    + " ".join(f"/lib/modules/$k/{d}/nvidia.ko" for d in RUNFILE_MODULE_DIRS)
    + " "
    + " ".join(f"{DRIVER_LIBRARY_DIR}/{lib}" for lib in DRIVER_LIBRARIES)
    + '; do\n  if [ -e "$f" ]; then echo "present $f"; found="$found $f"; fi\ndone\n'
    + 'if [ -n "$found" ]; then dpkg -S $found; fi\nexit 0\n'
)

_PRESENT = "present "
_UNOWNED = "dpkg-query: no path found matching pattern "


def parse_driver_files(text: str) -> dict[str, str | None]:
    """Driver files found on the node -> the package owning each (None: no package does)."""
    files: dict[str, str | None] = {}
    owners: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(_PRESENT):
            files[line[len(_PRESENT) :].strip()] = None
        elif line.startswith(_UNOWNED) or line.startswith("diversion "):
            continue
        elif ": /" in line:
            packages, _, path = line.partition(": /")
            owners["/" + path.strip()] = ", ".join(
                p.strip().split(":")[0] for p in packages.split(",") if p.strip()
            )
    return {path: owners.get(path) for path in files}


# Packages of an apt-installed driver, by name: NVIDIA's repositories (cuda-drivers,
# nvidia-open, nvidia-driver-<branch>[-open|-server], libnvidia-compute-<branch>, Debian 12's
# nvidia-driver, nvidia-kernel-dkms, libcuda1, nvidia-smi) and Ubuntu's archive, whose
# precompiled modules come as linux-modules-nvidia-<branch>[-server]-<kernel flavour> (Ubuntu
# Server docs, "NVIDIA drivers installation").
DRIVER_PACKAGE = re.compile(
    r"^(nvidia-driver|nvidia-open|cuda-drivers|nvidia-dkms|nvidia-kernel|nvidia-headless|"
    r"nvidia-utils|nvidia-compute-utils|libnvidia-compute|libcuda1$|nvidia-smi$|"
    r"linux-(modules|objects|signatures)-nvidia)"
)
# A distribution's own build, by its Debian revision: Ubuntu's archive builds
# `<V>-0ubuntu0.<release>.<n>` (610.43.02-0ubuntu0.26.04.1, 430.50-0ubuntu0.18.04.1 in public
# dpkg listings: psygreg/linuxtoys#1082, NVIDIA/nvidia-docker#1364), Debian's stable and
# backports `~deb<N>u<n>` / `~bpo<N>` (470.141.03-1~deb11u1, NVIDIA/k8s-device-plugin#346;
# 390.48-2~bpo9+3, NVIDIA/nvidia-docker#736); NVIDIA's repositories build `-0ubuntu1` and `-1`
# (450.51.06-0ubuntu1, NVIDIA/nvidia-docker#1364; 550.90.12-1, tests/data/real/SOURCES.md).
_DISTRIBUTION_REVISION = re.compile(r"0ubuntu0\.\d|~deb\d+u\d|~bpo\d")
PRECOMPILED = re.compile(r"^linux-(modules|objects|signatures)-nvidia")


@dataclass(frozen=True)
class ExistingDriver:
    """The driver a node had before gpunode changed it, and how it was installed."""

    kind: str  # "none" | "runfile" | "apt-nvidia" | "apt-distribution"
    version: str | None
    files: tuple[str, ...] = ()  # driver files no package owns (a runfile install)
    packages: Mapping[str, str] | None = None  # driver packages installed (apt)

    def origin(self) -> str:
        """Where it came from, in words."""
        return {
            "runfile": "NVIDIA's .run installer",
            "apt-nvidia": "apt (NVIDIA's repository)",
            "apt-distribution": "apt (the distribution's archive)",
        }.get(self.kind, "nothing")


_LIB_VERSION = re.compile(r"\.so\.(\d{3}\.\d+(?:\.\d+)?)$")


def classify_existing_driver(
    files: Mapping[str, str | None], packages: Mapping[str, str], loaded: str | None = None
) -> ExistingDriver:
    """How the node's driver was installed: none, runfile, apt-nvidia or apt-distribution.

    Args:
        files: ``parse_driver_files`` of the probe (driver files and their owners).
        packages: Every installed package (``parse_dpkg_query``).
        loaded: The loaded module's version, when the files do not name one.

    A driver file no package owns means the .run installer; otherwise driver packages mean
    apt, from the distribution when their Debian revision (or Ubuntu's precompiled module
    packages) says so, from NVIDIA's repository otherwise.
    """
    unowned = tuple(sorted(path for path, owner in files.items() if owner is None))
    if unowned:
        versions = sorted(
            {m.group(1) for path in unowned if (m := _LIB_VERSION.search(path)) is not None}
        )
        return ExistingDriver("runfile", versions[0] if len(versions) == 1 else loaded, unowned)
    driver = {name: version for name, version in packages.items() if DRIVER_PACKAGE.match(name)}
    if not driver:
        return ExistingDriver("none", None)
    distribution = any(
        PRECOMPILED.match(name) or _DISTRIBUTION_REVISION.search(version)
        for name, version in driver.items()
    )
    upstream = sorted(
        {strip_epoch_revision(v) for n, v in driver.items() if not PRECOMPILED.match(n)}
    )
    version = upstream[-1] if len(upstream) == 1 else loaded or (upstream[-1] if upstream else None)
    return ExistingDriver(
        "apt-distribution" if distribution else "apt-nvidia", version, packages=dict(driver)
    )


DRIVER_FILES = Fact(
    "driver_files",
    ("sh", "-c", DRIVER_FILES_PROBE),
    lambda rc, text: parse_driver_files(text) if rc == 0 else {},
)
