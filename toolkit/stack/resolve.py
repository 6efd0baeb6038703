"""Resolving a stack to exact packages per OS, and the stack id.

The package names and version templates are data (``packages.yml``); this module fills them
from the stack and applies the stack's per-OS version overrides.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

from toolkit.config import did_you_mean
from toolkit.errors import ConfigError
from toolkit.stack.models import SUPPORTED_OS, HardwareProfile, Stack
from toolkit.stack.versions import cuda_full, cuda_major_minor, driver_branch, parse_nccl

# Architectures whose servers are Arm (Grace): NVIDIA's repositories call that arch "sbsa".
_ARM_ARCHITECTURES = frozenset({"grace_hopper", "grace_blackwell"})
_DEB_ARCH = {"x86_64": "amd64", "sbsa": "arm64"}


@lru_cache(maxsize=1)
def package_data() -> dict[str, Any]:
    """The package names and version templates shipped with the package (``packages.yml``)."""
    text = resources.files("toolkit.stack").joinpath("packages.yml").read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def fabric_manager_enabled(stack: Stack, hardware: HardwareProfile) -> bool:
    """Whether Fabric Manager is installed: NVSwitch present, not an IMEX platform, not "none"."""
    from toolkit.stack.matrix import matrix

    arch = matrix().architectures[hardware.gpu.info.architecture]
    uses_imex = arch.fabric is not None and arch.fabric.value == "imex"
    return hardware.gpu.nvswitch and not uses_imex and stack.fabric_manager != "none"


def fabric_manager_version(stack: Stack) -> str:
    """The Fabric Manager version: the driver's unless pinned explicitly."""
    if stack.fabric_manager in ("auto", "none"):
        return stack.driver.version
    return stack.fabric_manager


def _fill(entries: list[dict[str, Any]], fields: Mapping[str, Any]) -> dict[str, str]:
    """Package name -> exact version, for the entries that apply to the driver branch."""
    default = package_data()["default_version"]
    branch = int(fields["branch"])
    return {
        str(entry["name"]).format(**fields): str(entry.get("version", default)).format(**fields)
        for entry in entries
        if int(entry.get("min_branch", 0)) <= branch <= int(entry.get("max_branch", 10_000))
    }


def _sections(stack: Stack, hardware: HardwareProfile) -> dict[str, Any]:
    """The OS-independent resolution: each component's version and default packages."""
    data = package_data()
    driver = stack.driver.version
    branch = driver_branch(driver)
    cuda = cuda_full(stack.cuda)
    cuda_major, cuda_minor = cuda_major_minor(cuda)
    base = {"branch": branch, "cuda_major": cuda_major, "cuda_minor": cuda_minor}
    nccl = parse_nccl(stack.nccl)

    sections: dict[str, Any] = {
        "driver": {
            "version": driver,
            "branch": str(branch),
            "flavour": stack.driver.flavour,
            "packages": _fill(data["driver"][stack.driver.flavour], {**base, "version": driver}),
            "pinning_packages": _fill(data["driver"]["pinning"], {**base, "version": driver}),
        },
        "cuda": {
            "version": cuda,
            "packages": _fill(data["cuda"], {**base, "version": cuda}),
        },
        "nccl": {
            "version": nccl.version,
            "cuda": nccl.cuda,
            "packages": _fill(data["nccl"], {**base, "version": nccl.package_version}),
        },
    }
    enabled = fabric_manager_enabled(stack, hardware)
    fm_version = fabric_manager_version(stack)
    sections["fabric_manager"] = {
        "enabled": enabled,
        "version": fm_version if enabled else None,
        "packages": (
            _fill(data["fabric_manager"]["packages"], {**base, "version": fm_version})
            if enabled
            else {}
        ),
    }
    sections["container_toolkit"] = {
        "version": stack.container_toolkit,
        "packages": _fill(
            data["container_toolkit"]["packages"], {**base, "version": stack.container_toolkit}
        ),
    }
    sections["cudnn"] = _cudnn(stack.cudnn, base)
    sections["dcgm"] = _dcgm(stack.dcgm, base)
    return sections


def _cudnn(version: str | None, base: dict[str, Any]) -> dict[str, Any] | None:
    if version is None:
        return None
    data = package_data()["cudnn"]
    if version.startswith("8."):
        plain = version.split("-", 1)[0]
        return {"version": plain, "packages": _fill(data["v8"], {**base, "version": version})}
    fields = {**base, "version": version, "cudnn_major": version.split(".", 1)[0]}
    return {"version": version, "packages": _fill(data["v9_and_later"], fields)}


def _dcgm(version: str | None, base: dict[str, Any]) -> dict[str, Any] | None:
    if version is None:
        return None
    data = package_data()["dcgm"]
    major = int(version.split(".", 1)[0])
    entries = data["v3"] if major <= 3 else data["v4_and_later"]
    fields = {**base, "version": version, "dcgm_major": major}
    return {"version": version, "packages": _fill(entries, fields)}


def _package_index(sections: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Package name -> (section, key) of the mapping that lists it."""
    index = {}
    for name, section in sections.items():
        if isinstance(section, dict):
            for key in ("packages", "pinning_packages"):
                for package in section.get(key, {}):
                    index[package] = (name, key)
    return index


def unknown_overrides(stack: Stack, hardware: HardwareProfile) -> list[tuple[str, str, str]]:
    """Overrides in ``stack.packages`` naming a package the stack does not install.

    Returns:
        ``(os, package, suggestion)`` for each, the suggestion a "did you mean" tail.
    """
    index = _package_index(_sections(stack, hardware))
    return [
        (os_id, package, did_you_mean(package, sorted(index)))
        for os_id, overrides in sorted(stack.packages.items())
        for package in overrides
        if package not in index
    ]


def canonical(stack: Stack, hardware: HardwareProfile) -> dict[str, Any]:
    """The resolved, OS-independent stack that the stack id is a hash of.

    Versions are normalised (``12.8`` -> ``12.8.0``); the repositories (a site choice, the
    lab's differ) and the minor-version-compat opt-in (installs nothing) are not part of it.
    """
    sections = _sections(stack, hardware)
    return {
        "driver": {k: sections["driver"][k] for k in ("version", "branch", "flavour")},
        "cuda": sections["cuda"]["version"],
        "nccl": parse_nccl(stack.nccl).package_version,
        "fabric_manager": {k: sections["fabric_manager"][k] for k in ("enabled", "version")},
        "container_toolkit": stack.container_toolkit,
        "cudnn": stack.cudnn,
        "dcgm": stack.dcgm,
        "package_overrides": {os_id: dict(v) for os_id, v in stack.packages.items()},
    }


def stack_id(stack: Stack, hardware: HardwareProfile) -> str:
    """12 hex characters of the SHA-256 of the canonical JSON of :func:`canonical`."""
    text = json.dumps(canonical(stack, hardware), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def default_arch(hardware: HardwareProfile) -> str:
    """``sbsa`` for Grace (Arm) systems, else ``x86_64`` (NVIDIA's repository arch names)."""
    return "sbsa" if hardware.gpu.info.architecture in _ARM_ARCHITECTURES else "x86_64"


def resolve(
    stack: Stack,
    hardware: HardwareProfile,
    os_id: str,
    *,
    arch: str | None = None,
    repo_vars: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The resolved stack for one OS: exact packages, repositories and the stack id.

    Args:
        stack: The validated stack.
        hardware: The group's hardware profile (decides Fabric Manager and the arch).
        os_id: ``ubuntu2204``, ``ubuntu2404`` or ``debian12``.
        arch: ``x86_64`` or ``sbsa``; by default from the GPU (Grace systems are ``sbsa``).
        repo_vars: Inventory variables overriding the repository URLs
            (``gpunode_nvidia_repo_url``, ``gpunode_container_toolkit_repo_url``); ``{os}``,
            ``{arch}`` and ``{deb_arch}`` in them are filled in.

    Returns:
        The shape documented in docs/architecture.md, "The resolved stack".

    Raises:
        ConfigError: Unknown OS or arch, or an override naming a package the stack does not
            install.
    """
    if os_id not in SUPPORTED_OS:
        raise ConfigError(f"unknown OS {os_id!r}" + did_you_mean(os_id, list(SUPPORTED_OS)))
    arch = arch or default_arch(hardware)
    if arch not in _DEB_ARCH:
        raise ConfigError(f"unknown arch {arch!r}" + did_you_mean(arch, list(_DEB_ARCH)))
    sections = _sections(stack, hardware)
    index = _package_index(sections)
    for package, version in stack.packages.get(os_id, {}).items():
        if package not in index:
            raise ConfigError(
                f"stack.packages.{os_id}.{package}: the stack installs no such package"
                + did_you_mean(package, sorted(index))
            )
        section, key = index[package]
        sections[section][key][package] = version

    repositories = []
    for repo in package_data()["repositories"]:
        uri = str((repo_vars or {}).get(repo["variable"]) or repo["uri"])
        for key, value in (("{os}", os_id), ("{arch}", arch), ("{deb_arch}", _DEB_ARCH[arch])):
            uri = uri.replace(key, value)
        repositories.append(
            {"name": repo["name"], "uri": uri, "suite": repo["suite"], "keyring": repo["keyring"]}
        )
    return {
        "stack_id": stack_id(stack, hardware),
        "os": os_id,
        **sections,
        "repositories": repositories,
    }
