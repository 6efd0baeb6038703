"""Filters for gpunode's roles: apt and dpkg output (``toolkit.facts``), pins.

The pins are ``toolkit.node.aptpins``'s. Filters run on the controller, so the parsing lives
(and is tested) in the toolkit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from toolkit.facts.dpkg import (
    parse_dpkg_held,
    parse_dpkg_query,
    parse_holds,
    parse_madison,
    parse_rdepends,
)
from toolkit.facts.systemd import persistence_exec_start
from toolkit.node.aptpins import family_changes, missing_pins, pick_versions
from toolkit.stack.aptindex import key_fingerprints
from toolkit.stack.systems import os_id


def gpunode_os_id(distribution: str, version: Any) -> str:
    """NVIDIA's OS id of a node (``debian12``, ``ubuntu2204``, ``ubuntu2404``) from
    ``ansible_distribution`` and ``ansible_distribution_version``: the roles' vars/<os>.yml.
    An OS gpunode does not support fails naming the supported ones
    (``toolkit.stack.systems.os_id``, which preflight applies first)."""
    return os_id(str(distribution), str(version))


def gpunode_dpkg_installed(text: str) -> dict[str, str]:
    """Installed packages (name -> version) from gpunode's dpkg-query format."""
    return parse_dpkg_query(str(text))


def gpunode_dpkg_held(text: str) -> list[str]:
    """Held packages from gpunode's dpkg-query format (desired state ``h``)."""
    return sorted(parse_dpkg_held(str(text)))


def gpunode_madison(text: str) -> dict[str, list[str]]:
    """Offered versions (name -> versions) from ``apt-cache madison``."""
    return parse_madison(str(text))


def gpunode_missing_pins(pins: Mapping[str, Any], madison_text: str) -> list[str]:
    """``pkg=version`` of each pin the repositories do not offer."""
    return missing_pins({str(k): str(v) for k, v in pins.items()}, parse_madison(str(madison_text)))


def gpunode_family_changes(
    installed: Mapping[str, Any], pins: Mapping[str, Any], branch: str = "", flavour: str = ""
) -> dict[str, Any]:
    """Stale, moving and new packages when a family moves to ``pins``."""
    return family_changes(
        {str(k): str(v) for k, v in installed.items()},
        {str(k): str(v) for k, v in pins.items()},
        str(branch),
        str(flavour),
    )


def gpunode_rdepends(text: str) -> list[str]:
    """Reverse dependencies from ``apt-cache rdepends --installed``."""
    return parse_rdepends(str(text))


def gpunode_holds(text: str) -> list[str]:
    """Held package names from ``apt-mark showhold``."""
    return sorted(parse_holds(str(text)))


def gpunode_apt_names(pins: Mapping[str, Any]) -> list[str]:
    """``name=version`` arguments for ``ansible.builtin.apt`` from a pin dict, sorted."""
    return [f"{name}={version}" for name, version in sorted(pins.items())]


def gpunode_pick_versions(pins: Mapping[str, Any], madison_text: str) -> dict[str, str]:
    """Exact versions for ``V-*`` requirements from ``apt-cache madison`` output."""
    pins = {str(k): str(v) for k, v in pins.items()}
    return pick_versions(pins, parse_madison(str(madison_text)))


def gpunode_key_fingerprints(text: str) -> list[str]:
    """The fingerprints of the primary keys in a key file (read as latin-1 text); [] if none."""
    try:
        return key_fingerprints(str(text).encode("latin-1"))
    except (ValueError, IndexError):
        return []


def gpunode_persistence_exec_start(unit: str) -> str:
    """The drop-in ``ExecStart=`` that turns persistence mode on in the packaged unit's text."""
    return persistence_exec_start(str(unit))


def gpunode_host_addresses(hosts: Any, hostvars: Mapping[str, Any]) -> list[str]:
    """The address of each host, sorted: its ``ansible_host``, else its inventory name (the
    name Ansible connects to when ``ansible_host`` is not set)."""
    return sorted(str(hostvars[h].get("ansible_host") or h) for h in hosts)


class FilterModule:
    """gpunode's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        """Filter name -> function."""
        return {
            "gpunode_os_id": gpunode_os_id,
            "gpunode_dpkg_installed": gpunode_dpkg_installed,
            "gpunode_dpkg_held": gpunode_dpkg_held,
            "gpunode_madison": gpunode_madison,
            "gpunode_missing_pins": gpunode_missing_pins,
            "gpunode_family_changes": gpunode_family_changes,
            "gpunode_holds": gpunode_holds,
            "gpunode_rdepends": gpunode_rdepends,
            "gpunode_apt_names": gpunode_apt_names,
            "gpunode_key_fingerprints": gpunode_key_fingerprints,
            "gpunode_pick_versions": gpunode_pick_versions,
            "gpunode_persistence_exec_start": gpunode_persistence_exec_start,
            "gpunode_host_addresses": gpunode_host_addresses,
        }
