"""The operating systems gpunode supports: one table, from which every other list is derived.

Each entry is NVIDIA's repository OS id (the ``<os>`` of
``developer.download.nvidia.com/compute/cuda/repos/<os>/<arch>/``), the family of naming rules
it follows (``naming.yml``), and the distribution and version as Ansible reports them
(``ansible_distribution``, ``ansible_distribution_version``; Debian by its major version, as
``12.7`` is a point release of ``12``). Source: NVIDIA CUDA repository layout; the CUDA
installation guide's supported distributions.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.facts.system import DISTRIBUTIONS, parse_os_release


@dataclass(frozen=True)
class OperatingSystem:
    """One supported OS."""

    os_id: str  # NVIDIA's repository OS id
    family: str  # the naming rules' family (naming.yml `families:`)
    distribution: str  # ansible_distribution
    version: str  # ansible_distribution_version (Ubuntu) or its major version (Debian)


SYSTEMS: tuple[OperatingSystem, ...] = (
    OperatingSystem("ubuntu2204", "ubuntu", "Ubuntu", "22.04"),
    OperatingSystem("ubuntu2404", "ubuntu", "Ubuntu", "24.04"),
    OperatingSystem("debian12", "debian", "Debian", "12"),
)
SUPPORTED_OS: tuple[str, ...] = tuple(s.os_id for s in SYSTEMS)
BY_ID: dict[str, OperatingSystem] = {s.os_id: s for s in SYSTEMS}
# (distribution, version) as Ansible reports them -> the OS.
BY_RELEASE: dict[tuple[str, str], OperatingSystem] = {
    (s.distribution, s.version): s for s in SYSTEMS
}


def family(os_id: str) -> str:
    """The naming-rule family of an OS (``ubuntu2204`` -> ``ubuntu``).

    Raises:
        KeyError: Not a supported OS id (callers check ``SUPPORTED_OS`` first).
    """
    return BY_ID[os_id].family


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
    found = BY_RELEASE.get((dist, key_version))
    if found is None:
        supported = ", ".join(f"{d} {v}" for d, v in BY_RELEASE)
        raise UnsupportedOS(f"unsupported OS {dist} {ver}; supported: {supported}")
    return found.os_id


def os_id_of_release(os_release: str | None) -> str | None:
    """NVIDIA's OS id of a node from its ``/etc/os-release``; None when it is not supported
    (acceptance and ``gpunode check`` read it so; a converge refuses through :func:`os_id`)."""
    values = parse_os_release(os_release or "")
    dist = DISTRIBUTIONS.get(values.get("ID", "").lower())
    if dist is None:
        return None
    try:
        return os_id(dist, values.get("VERSION_ID", ""))
    except UnsupportedOS:
        return None
