"""Facts about a node: pure parsers of command output, and the drift comparison.

The commands run on the node (through Ansible action plugins on the controller); only the
parsing lives here, so it is tested table by table without a node.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from functools import cmp_to_key
from typing import Any

from toolkit import converge, nodestate
from toolkit.stack import systems
from toolkit.stack.debversion import compare_versions, satisfies

NVIDIA_VENDOR = "10de"
# PCI class codes (PCI SIG class code list): VGA 0300, 3D controller 0302, other bridge 0680.
GPU_CLASSES = {"0300", "0302"}
NVSWITCH_CLASS = "0680"

MISMATCH = "Driver/library version mismatch"


# os-release ID -> the distribution name Ansible reports (``ansible_distribution``).
# Source: os-release(5) (freedesktop.org); Ansible's distribution facts use the same names.
DISTRIBUTIONS = {"debian": "Debian", "ubuntu": "Ubuntu"}


def parse_os_release(text: str) -> dict[str, str]:
    """``KEY=value`` pairs of ``/etc/os-release`` (quotes removed), see os-release(5)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            values[key.strip()] = value.strip().strip('"').strip("'")
    return values


def os_facts(os_release: str, debian_version: str, kernel: str, machine: str) -> dict[str, str]:
    """The OS facts gpunode's roles read, named and shaped as Ansible's ``setup`` names them.

    Read by the facts probe instead of a ``setup`` round trip: ``distribution`` (Debian,
    Ubuntu, else the os-release NAME), ``distribution_version`` (Debian's point release from
    ``/etc/debian_version``, e.g. 12.7; Ubuntu's VERSION_ID, e.g. 22.04),
    ``distribution_major_version``, ``kernel`` (``uname -r``) and ``architecture``
    (``uname -m``).
    """
    values = parse_os_release(os_release)
    ident = values.get("ID", "").lower()
    distribution = DISTRIBUTIONS.get(ident) or values.get("NAME") or ident or "unknown"
    version = values.get("VERSION_ID", "")
    point = debian_version.strip()
    if distribution == "Debian" and point[:1].isdigit():
        version = point
    return {
        "distribution": distribution,
        "distribution_version": version,
        "distribution_major_version": version.split(".")[0],
        "kernel": kernel.strip(),
        "architecture": machine.strip(),
    }


class UnsupportedOS(ValueError):
    """The node's OS is not one gpunode supports."""


def os_id(distribution: str, version: str) -> str:
    """NVIDIA's OS id for a node: ``ubuntu2204``, ``ubuntu2404`` or ``debian12``.

    Args:
        distribution: ``ansible_distribution`` (``Debian``, ``Ubuntu``).
        version: ``ansible_distribution_version`` (``22.04``, ``12.7`` or ``12``).

    Raises:
        UnsupportedOS: Naming the OS and the supported ones.
    """
    dist = distribution.strip()
    ver = version.strip()
    key_version = ver if dist == "Ubuntu" else ver.split(".")[0]
    found = systems.BY_RELEASE.get((dist, key_version))
    if found is None:
        supported = ", ".join(f"{d} {v}" for d, v in systems.BY_RELEASE)
        raise UnsupportedOS(f"unsupported OS {dist} {ver}; supported: {supported}")
    return found.os_id


@dataclass(frozen=True)
class PciDevice:
    """One NVIDIA PCI device from ``lspci -nn``."""

    slot: str
    pci_class: str
    device_id: str
    description: str


_LSPCI = re.compile(
    r"^(?P<slot>\S+)\s+(?P<cls_name>[^\[]*)\[(?P<cls>[0-9a-f]{4})\]:\s+(?P<desc>.*?)"
    r"\s*\[(?P<vendor>[0-9a-f]{4}):(?P<device>[0-9a-f]{4})\]",
    re.IGNORECASE,
)


def parse_lspci(text: str) -> list[PciDevice]:
    """NVIDIA devices in ``lspci -nn`` output (other vendors are left out)."""
    devices = []
    for line in text.splitlines():
        match = _LSPCI.match(line.strip())
        if match and match["vendor"].lower() == NVIDIA_VENDOR:
            devices.append(
                PciDevice(
                    slot=match["slot"],
                    pci_class=match["cls"].lower(),
                    device_id=match["device"].lower(),
                    description=match["desc"].strip(),
                )
            )
    return devices


def lspci_gpus(devices: Iterable[PciDevice]) -> list[PciDevice]:
    """The GPUs among NVIDIA PCI devices (display and 3D controllers)."""
    return [d for d in devices if d.pci_class in GPU_CLASSES]


def lspci_nvswitches(devices: Iterable[PciDevice]) -> list[PciDevice]:
    """The NVSwitches among NVIDIA PCI devices (NVIDIA bridges)."""
    return [d for d in devices if d.pci_class == NVSWITCH_CLASS]


_SMI_LIST = re.compile(r"^GPU\s+(?P<index>\d+):\s+(?P<name>.+?)\s+\(UUID:\s*(?P<uuid>[^)]+)\)")


def parse_nvidia_smi_list(text: str) -> list[dict[str, str]]:
    """GPUs from ``nvidia-smi -L``: index, name and UUID of each."""
    gpus = []
    for line in text.splitlines():
        match = _SMI_LIST.match(line.strip())
        if match:
            gpus.append(
                {"index": match["index"], "name": match["name"], "uuid": match["uuid"].strip()}
            )
    return gpus


def parse_secure_boot(text: str) -> bool | None:
    """Secure Boot state from ``mokutil --sb-state``: True, False, or None when unknown."""
    lowered = text.lower()
    if "secureboot enabled" in lowered:
        return True
    if "secureboot disabled" in lowered or "doesn't support secure boot" in lowered:
        return False
    return None


def parse_dpkg_query(text: str) -> dict[str, str]:
    """Installed packages from ``dpkg-query -W`` with Package, Version and db:Status-Abbrev.

    Only packages whose status is installed (``ii``, ``hi``) count; removed-but-configured
    (``rc``) and half-installed ones do not.
    """
    installed = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        name, version, status = parts[0].strip(), parts[1].strip(), parts[2].strip()
        if len(status) >= 2 and status[1] == "i" and version:
            installed[name.split(":")[0]] = version
    return installed


def parse_dpkg_held(text: str) -> set[str]:
    """Held packages from ``dpkg-query -W`` with db:Status-Abbrev (desired state ``h``)."""
    held = set()
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].strip().startswith("h"):
            held.add(parts[0].strip().split(":")[0])
    return held


def parse_holds(text: str) -> set[str]:
    """Held packages from ``apt-mark showhold`` (one name per line, maybe with ``:arch``)."""
    return {line.strip().split(":")[0] for line in text.splitlines() if line.strip()}


_VERSION = re.compile(r"\b(\d{3}\.\d+(?:\.\d+)?)\b")


@dataclass(frozen=True)
class LoadedDriver:
    """What the kernel has loaded, as ``nvidia-smi`` or ``/proc/driver/nvidia/version`` say."""

    version: str | None
    mismatch: bool = False
    library_version: str | None = None
    source: str = ""
    detail: str = ""


def parse_nvidia_smi_driver(stdout: str, stderr: str, rc: int | None) -> LoadedDriver:
    """The loaded driver from ``nvidia-smi --query-gpu=driver_version --format=csv,noheader``.

    Args:
        stdout: Its standard output (one version per GPU).
        stderr: Its standard error.
        rc: Its exit status; None when ``nvidia-smi`` is not installed.

    Returns:
        The loaded version; on a driver/library mismatch, ``mismatch`` and the library version
        (newer drivers print ``NVML library version: <V>``).
    """
    if rc is None:
        return LoadedDriver(version=None, source="nvidia-smi", detail="nvidia-smi not installed")
    text = f"{stdout}\n{stderr}"
    if MISMATCH in text:
        library = re.search(r"NVML library version:\s*(\S+)", text)
        return LoadedDriver(
            version=None,
            mismatch=True,
            library_version=library.group(1) if library else None,
            source="nvidia-smi",
            detail=MISMATCH,
        )
    if rc != 0:
        first = text.strip().splitlines()[0] if text.strip() else f"exit status {rc}"
        return LoadedDriver(version=None, source="nvidia-smi", detail=first)
    versions = {line.strip() for line in stdout.splitlines() if line.strip()}
    if len(versions) == 1:
        return LoadedDriver(version=versions.pop(), source="nvidia-smi")
    if not versions:
        return LoadedDriver(version=None, source="nvidia-smi", detail="no GPU reported")
    return LoadedDriver(
        version=None,
        source="nvidia-smi",
        detail=f"GPUs report different drivers: {sorted(versions)}",
    )


def parse_proc_driver_version(text: str) -> tuple[str | None, bool | None]:
    """Version and flavour from ``/proc/driver/nvidia/version``: (version, open or not)."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = _VERSION.search(line)
            return (match.group(1) if match else None, "Open Kernel Module" in line)
    return (None, None)


def strip_epoch_revision(apt_version: str) -> str:
    """The upstream part of an apt version: ``550.127.05-1`` -> ``550.127.05``."""
    version = apt_version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


@dataclass(frozen=True)
class Drift:
    """One difference between what is pinned and what a node has."""

    component: str
    package: str
    pinned: str
    found: str
    kind: str  # "version" | "missing" | "not-held" | "loaded"

    def message(self, host: str = "") -> str:
        """A sentence naming the node (when given), the package and both versions."""
        prefix = f"{host}: " if host else ""
        if self.kind == "not-held":
            return f"{prefix}{self.package} {self.found} is not held"
        if self.kind == "missing":
            return f"{prefix}{self.package} pinned {self.pinned} is not installed"
        if self.kind == "loaded":
            return f"{prefix}driver module loaded {self.found}, pinned {self.pinned}"
        return f"{prefix}{self.package} pinned {self.pinned}, installed {self.found}"


COMPONENTS = ("driver", "cuda", "nccl", "fabric_manager", "imex", "container_toolkit")


def pinned_packages(resolved: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Component -> {package: exact version} from a resolved stack (disabled parts left out)."""
    pins: dict[str, dict[str, str]] = {}
    for component in COMPONENTS:
        part = resolved.get(component)
        if not isinstance(part, Mapping):
            continue
        if component in ("fabric_manager", "imex") and not part.get("enabled", True):
            continue
        packages = dict(part.get("packages") or {})
        if component == "driver":
            packages.update(part.get("pinning_packages") or {})
        pins[component] = {str(k): str(v) for k, v in packages.items()}
    return pins


def compare(
    resolved: Mapping[str, Any],
    installed: Mapping[str, str],
    held: Iterable[str],
    loaded: LoadedDriver,
) -> tuple[dict[str, Any], list[Drift]]:
    """Pinned vs installed vs loaded for one node.

    Args:
        resolved: The node's resolved stack (``gpunode_stack``).
        installed: Installed package versions (``parse_dpkg_query``).
        held: Held package names (``parse_holds``).
        loaded: The loaded driver (``parse_nvidia_smi_driver``).

    Returns:
        A report (component -> package -> pinned/installed/held) and every drift found.
    """
    held_set = set(held)
    report: dict[str, Any] = {}
    drifts: list[Drift] = []
    for component, packages in pinned_packages(resolved).items():
        rows = {}
        for package, pinned in sorted(packages.items()):
            found = installed.get(package)
            is_held = package in held_set
            rows[package] = {"pinned": pinned, "installed": found, "held": is_held}
            if found is None:
                drifts.append(Drift(component, package, pinned, "", "missing"))
            elif found != pinned:
                drifts.append(Drift(component, package, pinned, found, "version"))
            elif not is_held:
                drifts.append(Drift(component, package, pinned, found, "not-held"))
        report[component] = rows
    driver = resolved.get("driver") or {}
    pinned_driver = str(driver.get("version") or "")
    loaded_text = loaded.version or (
        f"mismatch (library {loaded.library_version})" if loaded.mismatch else loaded.detail
    )
    report["loaded_driver"] = {
        "pinned": pinned_driver,
        "loaded": loaded.version,
        "mismatch": loaded.mismatch,
        "detail": loaded.detail,
    }
    if pinned_driver and loaded.version != pinned_driver:
        drifts.append(
            Drift("driver", "kernel module", pinned_driver, loaded_text or "none", "loaded")
        )
    return report, drifts


def parse_findmnt(text: str) -> dict[str, dict[str, str]]:
    """Mount point -> its source and filesystem, from ``findmnt --raw --noheadings --output
    TARGET,SOURCE,FSTYPE`` (raw mode escapes blanks as ``\x20``)."""
    mounts: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 3 or not fields[0].startswith("/"):
            continue
        target, source, fstype = (_unescape_findmnt(f) for f in fields)
        mounts[target] = {"source": source, "fstype": fstype}
    return mounts


def _unescape_findmnt(field: str) -> str:
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), field)


def drift_dicts(host: str, drifts: Iterable[Drift]) -> list[dict[str, str]]:
    """Drifts as plain data with their message (for JSON and for node state reasons)."""
    return [{**asdict(d), "host": host, "message": d.message(host)} for d in drifts]


# --- a driver that was there before gpunode ------------------------------------------------
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
_PRECOMPILED = re.compile(r"^linux-(modules|objects|signatures)-nvidia")


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
        _PRECOMPILED.match(name) or _DISTRIBUTION_REVISION.search(version)
        for name, version in driver.items()
    )
    upstream = sorted(
        {strip_epoch_revision(v) for n, v in driver.items() if not _PRECOMPILED.match(n)}
    )
    version = upstream[-1] if len(upstream) == 1 else loaded or (upstream[-1] if upstream else None)
    return ExistingDriver(
        "apt-distribution" if distribution else "apt-nvidia", version, packages=dict(driver)
    )


@dataclass(frozen=True)
class DriverDecision:
    """What provision does with the driver it found: proceed, adopt it, or refuse the node."""

    action: str  # "proceed" | "adopt" | "refuse"
    message: str


def decide_existing_driver(
    existing: ExistingDriver,
    driver: Mapping[str, Any],
    pins: Mapping[str, str],
    managed: bool,
    host: str = "",
) -> DriverDecision:
    """Whether provision may go on with the driver a node has (pure; preflight asks it).

    Args:
        existing: ``classify_existing_driver`` of the node.
        driver: The resolved stack's driver (``version``, ``branch``, ``flavour``).
        pins: The driver's pinned packages (name -> version, from the lock).
        managed: gpunode installed this node's driver (a converge stamp or a node state):
            the driver role moves its own packages between pins.
        host: The node's name, for the messages.

    A .run install is always refused (the way out: its uninstaller, a reboot, a rerun). A
    package install gpunode did not make is adopted only when it is the pin: every pinned
    package installed is at its pinned version, no package of another branch or flavour is
    there, and the rest are of the pinned version; any other is refused, with the purge that
    removes it.
    """
    prefix = f"{host}: " if host else ""
    found = f"NVIDIA driver {existing.version or '(version unknown)'}"
    if existing.kind == "none":
        return DriverDecision("proceed", f"{prefix}no NVIDIA driver installed")
    if existing.kind == "runfile":
        return DriverDecision(
            "refuse",
            f"{prefix}{found} was installed by NVIDIA's .run installer (files no package owns: "
            f"{', '.join(existing.files)}); gpunode installs the driver with apt and the two "
            "must not be mixed. Nothing was changed. Way out: run `sudo nvidia-uninstall "
            "--silent` on the node, reboot it, then rerun.",
        )
    installed = dict(existing.packages or {})
    if managed:
        return DriverDecision("proceed", f"{prefix}{found} installed by gpunode")
    pinned = str(driver.get("version") or "")
    branch = str(driver.get("branch") or pinned.split(".")[0])
    flavour = str(driver.get("flavour") or "")
    off_pin = [n for n in installed if n in pins and not satisfies(pins[n], installed[n])]
    stale = [
        n
        for n in installed
        if n not in pins
        and (
            _PRECOMPILED.match(n)
            or is_stale_driver_package(n, pins, branch, flavour)
            or strip_epoch_revision(installed[n]) != pinned
        )
    ]
    listed = ", ".join(f"{n} {installed[n]}" for n in sorted(installed))
    if not off_pin and not stale and any(n in pins for n in installed):
        return DriverDecision(
            "adopt",
            f"{prefix}{found} from {existing.origin()} is the pinned {flavour} driver "
            f"({listed}): adopted, provision holds it",
        )
    return DriverDecision(
        "refuse",
        f"{prefix}{found} is installed from {existing.origin()} ({listed}); the stack pins "
        f"the {flavour} driver {pinned} ({', '.join(f'{n} {v}' for n, v in sorted(pins.items()))})"
        ". Nothing was changed. Way out: run `sudo apt-get purge "
        f"{' '.join(sorted(installed))}` on the node, reboot it, then rerun.",
    )


def driver_managed(facts: Mapping[str, Any]) -> bool:
    """Whether gpunode installed the node's driver: its converge stamp, or a node state."""
    converged = facts.get("converged")
    stamped = isinstance(converged, Mapping) and isinstance(converged.get("driver"), Mapping)
    state = (facts.get("state") or {}).get("state")
    return stamped or state in ("provisioned", "ready", "not-ready")


# One round trip gathers every fact: each command's output between markers, with its exit
# status ("missing" when the command is not installed). The last section reads the converge
# stamps, the digests of the files they name and their services (toolkit.converge.PROBE).
PROBE_SCRIPT = (
    r"""
section() {
  name=$1; shift
  echo "@@gpunode-begin $name"
  if command -v "$1" >/dev/null 2>&1; then
    LC_ALL=C "$@" 2>&1
    echo "@@gpunode-end $name $?"
  else
    echo "@@gpunode-end $name missing"
  fi
}
section lspci lspci -nn
section smi_list nvidia-smi -L
section smi_driver nvidia-smi --query-gpu=driver_version --format=csv,noheader
section proc_version cat /proc/driver/nvidia/version
section mokutil mokutil --sb-state
section dpkg dpkg-query -W -f '${Package}\t${Version}\t${db:Status-Abbrev}\n'
section holds apt-mark showhold
section kernel uname -r
section machine uname -m
section os_release cat /etc/os-release
section debian_version cat /etc/debian_version
section mounts findmnt --raw --noheadings --output TARGET,SOURCE,FSTYPE
"""
    + f"section driver_files sh -c {shlex.quote(DRIVER_FILES_PROBE)}\n"
    + f"section state cat {shlex.quote(nodestate.PATH)}\n"
    + f"section converged python3 -c {shlex.quote(converge.PROBE)}\n"
)

_BEGIN = "@@gpunode-begin "
_END = "@@gpunode-end "


def parse_sections(text: str) -> dict[str, tuple[int | None, str]]:
    """Split the probe script's output: section -> (exit status or None if missing, output)."""
    sections: dict[str, tuple[int | None, str]] = {}
    current: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith(_BEGIN):
            current, body = line[len(_BEGIN) :].strip(), []
        elif line.startswith(_END) and current is not None:
            status = line[len(_END) :].split()[-1]
            rc = None if status == "missing" else int(status) if status.isdigit() else 1
            sections[current] = (rc, "\n".join(body))
            current = None
        elif current is not None:
            body.append(line)
    return sections


# Packages worth reporting about a node (the rest of dpkg's list is left out of facts).
RELEVANT_PACKAGE = re.compile(
    r"^(nvidia|libnvidia|cuda|libnccl|libcudnn|datacenter-gpu-manager|docker|containerd|"
    r"linux-headers|linux-image)"
)


def node_facts(
    sections: Mapping[str, tuple[int | None, str]], resolved: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The fact ``gpunode_node`` from probe sections, with drift when a stack is resolved.

    Args:
        sections: ``parse_sections`` of the probe script's output.
        resolved: The node's resolved stack (``gpunode_stack``), or None before preflight.

    Returns:
        GPUs (and where they were seen), NVSwitches, Secure Boot, kernel, relevant installed
        packages, holds, the loaded driver, and (with a stack) the drift report.
    """

    def get(name: str) -> tuple[int | None, str]:
        return sections.get(name, (None, ""))

    lspci_rc, lspci_out = get("lspci")
    devices = parse_lspci(lspci_out) if lspci_rc == 0 else []
    list_rc, list_out = get("smi_list")
    smi_gpus = parse_nvidia_smi_list(list_out) if list_rc == 0 else []
    gpu_pci_ids: list[str] = []
    if smi_gpus:
        gpus = [g["name"] for g in smi_gpus]
        gpu_source = "nvidia-smi"
    elif lspci_rc == 0 and lspci_gpus(devices):
        gpus = [d.description for d in lspci_gpus(devices)]
        gpu_pci_ids = [f"{NVIDIA_VENDOR}:{d.device_id}" for d in lspci_gpus(devices)]
        gpu_source = "lspci"
    else:
        gpus = []
        gpu_source = "lspci" if lspci_rc == 0 else "none"
    nvswitches = len(lspci_nvswitches(devices)) if lspci_rc == 0 else None

    sb_rc, sb_out = get("mokutil")
    secure_boot = parse_secure_boot(sb_out) if sb_rc is not None else None

    dpkg_rc, dpkg_out = get("dpkg")
    all_installed = parse_dpkg_query(dpkg_out) if dpkg_rc == 0 else {}
    converged = converge.parse_probe(*get("converged"))
    pinned = {
        package for packages in pinned_packages(resolved or {}).values() for package in packages
    } | converge.stamped_packages(converged)
    installed = {
        name: version
        for name, version in all_installed.items()
        if name in pinned or RELEVANT_PACKAGE.match(name)
    }
    holds_rc, holds_out = get("holds")
    held = sorted(parse_holds(holds_out)) if holds_rc == 0 else []

    smi_rc, smi_out = get("smi_driver")
    loaded = parse_nvidia_smi_driver(smi_out, "", smi_rc)
    proc_rc, proc_out = get("proc_version")
    proc_version, proc_open = parse_proc_driver_version(proc_out) if proc_rc == 0 else (None, None)
    if loaded.version is None and not loaded.mismatch and proc_version:
        loaded = LoadedDriver(version=proc_version, source="/proc/driver/nvidia/version")

    files_rc, files_out = get("driver_files")
    existing = classify_existing_driver(
        parse_driver_files(files_out) if files_rc == 0 else {}, all_installed, loaded.version
    )

    facts: dict[str, Any] = {
        "kernel": get("kernel")[1].strip(),
        "gpus": gpus,
        "gpu_pci_ids": gpu_pci_ids,
        "gpu_count": len(gpus),
        "gpu_source": gpu_source,
        "nvswitch_count": nvswitches,
        "secure_boot": secure_boot,
        "installed": installed,
        "held": held,
        "loaded_driver": asdict(loaded),
        "module_open": proc_open,
        "existing_driver": asdict(existing),
        "mounts": parse_findmnt(get("mounts")[1]) if get("mounts")[0] == 0 else {},
        "converged": converged,
        "state": _state(get("state")),
        # Every installed package: the drift comparison may come after the stack is resolved.
        "packages": all_installed,
        "os": os_facts(
            get("os_release")[1] if get("os_release")[0] == 0 else "",
            get("debian_version")[1] if get("debian_version")[0] == 0 else "",
            get("kernel")[1],
            get("machine")[1] if get("machine")[0] == 0 else "",
        ),
    }
    return with_drift(facts, resolved) if resolved else facts


def with_drift(facts: Mapping[str, Any], resolved: Mapping[str, Any]) -> dict[str, Any]:
    """Node facts with the comparison to a resolved stack added: ``versions`` (pinned,
    installed, held per package, and the loaded driver) and every ``drift``."""
    loaded = LoadedDriver(**facts["loaded_driver"])
    report, drifts = compare(resolved, facts["packages"], facts["held"], loaded)
    existing = dict(facts.get("existing_driver") or {"kind": "none", "version": None})
    existing["files"] = tuple(existing.get("files") or ())
    decision = decide_existing_driver(
        ExistingDriver(**existing),
        resolved.get("driver") or {},
        pinned_packages(resolved).get("driver", {}),
        driver_managed(facts),
    )
    return {
        **facts,
        "driver_decision": asdict(decision),
        "versions": report,
        "drift": [{**asdict(d), "message": "drift: " + d.message()} for d in drifts],
    }


def _state(section: tuple[int | None, str]) -> dict[str, Any]:
    """The node's state file as read by the probe (``cat`` fails only when there is none)."""
    rc, text = section
    if rc == 0:
        return nodestate.parse(text)
    if rc is not None and "No such file" in text:
        return nodestate.new()
    return {"state": "unknown", "reason": [f"{nodestate.PATH} could not be read: {text[:200]}"]}


def gpu_model_names(
    names: Iterable[str],
    lookup: Any,
    device_ids: Iterable[str | None] = (),
    lookup_id: Any = None,
) -> list[str | None]:
    """Catalog model of each GPU (``lookup`` is ``toolkit.stack.catalog.lookup_gpu``).

    A PCI device id (from ``lspci -nn``, ``lookup_id`` is ``lookup_gpu_by_pci_id``) decides
    first: an older pci.ids names an H100 SXM only ``NVIDIA Corporation Device 2330``. The
    name is the hint otherwise; ``lspci`` descriptions carry the marketing name in brackets
    (``GH100 [H100 SXM5 80GB]``) and that part is looked up when the whole name is unknown.
    """
    ids = list(device_ids)
    models: list[str | None] = []
    for i, name in enumerate(names):
        device_id = ids[i] if i < len(ids) else None
        info = lookup_id(device_id) if lookup_id is not None and device_id else None
        if info is None:
            info = lookup(name)
        if info is None:
            bracket = re.search(r"\[([^\]]+)\]", name)
            info = lookup(bracket.group(1)) if bracket else None
        models.append(info.model if info is not None else None)
    return models


def parse_madison(text: str) -> dict[str, list[str]]:
    """Versions the repositories offer, from ``apt-cache madison PKG...``.

    Lines look like ``  libnccl2 | 2.21.5-1+cuda12.4 | http://... Packages``.
    """
    offered: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 3 and parts[0] and parts[1]:
            versions = offered.setdefault(parts[0], [])
            if parts[1] not in versions:
                versions.append(parts[1])
    return offered


def missing_pins(pins: Mapping[str, str], offered: Mapping[str, Iterable[str]]) -> list[str]:
    """``package=version`` (``package (>=V)`` for a floor) of every pin the repositories do not
    carry, sorted."""
    return sorted(
        f"{name} ({version})" if version.startswith(">=") else f"{name}={version}"
        for name, version in pins.items()
        if version not in set(offered.get(name, ()))
    )


def pick_versions(pins: Mapping[str, str], offered: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Exact versions for pins that may be requirements (``V-*``: any Debian revision of ``V``;
    ``>=V``: ``V`` or later, see :func:`toolkit.stack.debversion.satisfies`).

    Each requirement becomes the highest offered version that satisfies it; an exact pin, or a
    requirement nothing satisfies, stays as it is (the availability check then names it).
    """
    picked = {}
    for name, wanted in pins.items():
        fits = [v for v in offered.get(name, ()) if satisfies(wanted, v)]
        picked[name] = max(fits, key=cmp_to_key(compare_versions)) if fits else wanted
    return picked


_BRANCH_IN_NAME = re.compile(r"-(\d{3})(?:-|$)")
# Names of the proprietary module flavour only: Ubuntu's branch-suffixed and (from R590)
# unbranched metas and DKMS packages, Debian's nvidia-kernel-dkms, cuda-drivers. Debian's
# nvidia-driver serves both flavours, but it is pinned in both, so never judged here.
_PROPRIETARY_ONLY = re.compile(
    r"^(nvidia-driver(-\d{3})?|nvidia-dkms(-\d{3})?|nvidia-kernel-dkms|cuda-drivers(-\d{3})?)$"
)


def is_stale_driver_package(name: str, pins: Mapping[str, str], branch: str, flavour: str) -> bool:
    """Whether an installed driver-family package belongs to another pin and must go.

    Dependencies of the pinned packages (``libnvidia-compute-<branch>``, ``nvidia-persistenced``
    ...) are not pinned themselves; they stay. A package goes when its name carries another
    branch, when it is another version's lock package, or when it belongs to the other module
    flavour (``nvidia-open``, ``*-open``, NVIDIA's debian12 ``nvidia-kernel-open-dkms``, Debian's
    ``nvidia-open-kernel-dkms`` versus ``nvidia-driver-<b>``, ``nvidia-kernel-dkms``,
    ``cuda-drivers``).
    """
    if name in pins:
        return False
    match = _BRANCH_IN_NAME.search(name)
    if match and match.group(1) != branch:
        return True
    if name.startswith("nvidia-driver-pinning-"):
        return True
    if name == "nvidia-open":
        # The R580+ open meta-package: pinned whenever it belongs to the stack.
        return True
    if flavour == "open":
        return bool(_PROPRIETARY_ONLY.match(name))
    return (
        name.startswith("nvidia-open")
        or name.endswith("-open")
        or name == "nvidia-kernel-open-dkms"
    )


PERSISTENCED = "/usr/bin/nvidia-persistenced"
# systemd's ExecStart= prefixes before the command (systemd.service(5), "Command lines").
_EXEC_PREFIXES = "-@:+!"


def persistence_exec_start(unit: str) -> str:
    """The ``ExecStart=`` of a drop-in that turns persistence mode on in a packaged unit.

    ``unit`` is the text of the installed ``nvidia-persistenced.service``. Its command line is
    kept, the user it names included (Debian's unit runs the daemon as ``nvpd``, Ubuntu's as
    ``nvidia-persistenced``: tests/data/real/SOURCES.md); ``--no-persistence-mode`` becomes
    ``--persistence-mode``. A unit without ``--user``, or no unit (not installed yet, in check
    mode), runs the daemon as root, as NVIDIA's own role does
    (NVIDIA/ansible-role-nvidia-driver, files/nvidia-persistenced-override.conf).
    """
    command: list[str] = []
    section = ""
    for raw in unit.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif section == "[Service]" and line.startswith("ExecStart="):
            # An empty assignment resets the list; the last command line is the one that runs.
            command = shlex.split(line.removeprefix("ExecStart=").lstrip(_EXEC_PREFIXES))
    if not command:
        command = [PERSISTENCED]
    args = [a for a in command[1:] if a not in ("--no-persistence-mode", "--persistence-mode")]
    if not any(a in ("--user", "-u") or a.startswith("--user=") for a in args):
        args = ["--user", "root", *args]
    return shlex.join([command[0], *args, "--persistence-mode"])


def parse_rdepends(text: str) -> list[str]:
    """Package names from ``apt-cache rdepends --installed PKG...`` (the reverse dependencies).

    Output is each queried package, a ``Reverse Depends:`` line, then indented names
    (``|`` marks an alternative).
    """
    names = []
    for line in text.splitlines():
        if line.startswith(" ") and line.strip():
            name = line.strip().lstrip("|").split(":")[0].strip()
            if name and name not in names:
                names.append(name)
    return sorted(names)


def family_changes(
    installed: Mapping[str, str],
    pins: Mapping[str, str],
    branch: str = "",
    flavour: str = "",
) -> dict[str, list[str]]:
    """What moving to ``pins`` does to installed packages of one family.

    Args:
        installed: Installed packages of the family (name -> version).
        pins: The pinned packages of the family (name -> exact version).
        branch: The pinned driver branch (``550``); with ``flavour``, enables the driver rules
            of :func:`is_stale_driver_package`. Without them every unpinned package is stale.
        flavour: ``open`` or ``proprietary``.

    Returns:
        ``stale``: installed, belonging to another pin (to remove); ``moving``: pinned,
        installed at another version (to unhold and replace); ``install``: pinned, absent.
    """
    if branch:
        stale = [n for n in installed if is_stale_driver_package(n, pins, branch, flavour)]
    else:
        stale = [n for n in installed if n not in pins]
    return {
        "stale": sorted(stale),
        "moving": sorted(
            name
            for name, version in pins.items()
            if name in installed and installed[name] != version
        ),
        "install": sorted(name for name in pins if name not in installed),
    }


def profile_warnings(facts: Mapping[str, Any], hardware: Mapping[str, Any]) -> list[str]:
    """Differences between what a node shows and its hardware profile that do not stop it.

    A missing GPU or a fabric that is not seen is a hardware fault for the acceptance test
    to report with its reason; provisioning goes on and says so.
    """
    gpu = hardware.get("gpu") or {}
    warnings = []
    count = facts.get("gpu_count") or 0
    if count and gpu.get("count") and count != gpu["count"]:
        warnings.append(
            f"{count} GPU(s) seen by {facts.get('gpu_source')}, the hardware profile says "
            f"{gpu['count']}"
        )
    if gpu.get("nvswitch") and facts.get("nvswitch_count") == 0:
        warnings.append("the hardware profile says NVSwitch, but lspci shows no NVSwitch")
    if not count and facts.get("gpu_source") == "lspci":
        warnings.append("no NVIDIA GPU on the PCI bus (lspci)")
    return warnings
