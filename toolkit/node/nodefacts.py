"""The fact ``gpunode_node``: every fact a converge depends on, read in one probe round trip.

The facts (and their parsers) are ``toolkit.facts``'s; this module chooses them, adds the
node state file and the converge stamps, and turns the sections into the one fact the roles
read, with the drift comparison (``toolkit.node.drift``) and the decision about a driver found
on the node (``toolkit.node.aptpins``) once a stack is resolved.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from toolkit.facts import dpkg, driver, mounts, nvidia, pci, probe, system, systemd
from toolkit.facts.driver import ExistingDriver, classify_existing_driver
from toolkit.facts.nvidia import LoadedDriver
from toolkit.facts.pci import NVIDIA_VENDOR, lspci_gpus, lspci_nvswitches
from toolkit.node import converge, nodestate
from toolkit.node.aptpins import decide_existing_driver
from toolkit.node.drift import compare, pinned_packages

# Every fact of one converge, in the order the probe reads them; the converge stamps come last.
FACTS: tuple[probe.Fact, ...] = (
    pci.LSPCI,
    nvidia.SMI_LIST,
    nvidia.SMI_DRIVER,
    nvidia.PROC_VERSION,
    system.SECURE_BOOT,
    dpkg.DPKG,
    dpkg.HOLDS,
    system.KERNEL,
    system.MACHINE,
    system.OS_RELEASE,
    system.DEBIAN_VERSION,
    mounts.MOUNTS,
    driver.DRIVER_FILES,
    systemd.OWN_UNITS,
    nodestate.FACT,
    converge.FACT,
)
PROBE_SCRIPT = probe.script(FACTS)
# Facts a role reads when it needs them (``gpunode_node_facts`` with ``read``), by name.
ON_DEMAND: dict[str, probe.Fact] = {
    fact.name: fact for fact in (nvidia.SMI_PERSISTENCE, nvidia.SMI_COMPUTE_APPS)
}

Sections = Mapping[str, tuple[probe.Status, str]]


def parse_sections(text: str) -> dict[str, tuple[probe.Status, str]]:
    """The probe script's output: section -> (exit status or None if missing, output)."""
    return probe.by_name(text)


def driver_managed(facts: Mapping[str, Any]) -> bool:
    """Whether gpunode installed the node's driver: its converge stamp, or a node state."""
    converged = facts.get("converged")
    stamped = isinstance(converged, Mapping) and isinstance(converged.get("driver"), Mapping)
    state = (facts.get("state") or {}).get("state")
    return stamped or state in ("provisioned", "ready", "not-ready")


# One round trip gathers every fact: each command's output between markers, with its exit
# status ("missing" when the command is not installed). The last section reads the converge


# Packages worth reporting about a node (the rest of dpkg's list is left out of facts).
RELEVANT_PACKAGE = re.compile(
    r"^(nvidia|libnvidia|cuda|libnccl|libcudnn|datacenter-gpu-manager|docker|containerd|"
    r"linux-headers|linux-image)"
)


def node_facts(sections: Sections, resolved: Mapping[str, Any] | None) -> dict[str, Any]:
    """The fact ``gpunode_node`` from probe sections, with drift when a stack is resolved.

    Args:
        sections: ``parse_sections`` of the probe script's output.
        resolved: The node's resolved stack (``gpunode_stack``), or None before preflight.

    Returns:
        GPUs (and where they were seen), NVSwitches, Secure Boot, kernel, relevant installed
        packages, holds, the loaded driver, and (with a stack) the drift report.
    """
    devices = pci.LSPCI.read(sections)
    smi_gpus = nvidia.SMI_LIST.read(sections)
    gpu_pci_ids: list[str] = []
    if smi_gpus:
        gpus = [g["name"] for g in smi_gpus]
        gpu_source = "nvidia-smi"
    elif devices and lspci_gpus(devices):
        gpus = [d.description for d in lspci_gpus(devices)]
        gpu_pci_ids = [f"{NVIDIA_VENDOR}:{d.device_id}" for d in lspci_gpus(devices)]
        gpu_source = "lspci"
    else:
        gpus = []
        gpu_source = "lspci" if devices is not None else "none"
    nvswitches = len(lspci_nvswitches(devices)) if devices is not None else None

    all_installed = dpkg.DPKG.read(sections)
    converged = converge.FACT.read(sections)
    pinned = {
        package for packages in pinned_packages(resolved or {}).values() for package in packages
    } | converge.stamped_packages(converged)
    installed = {
        name: version
        for name, version in all_installed.items()
        if name in pinned or RELEVANT_PACKAGE.match(name)
    }

    loaded = nvidia.SMI_DRIVER.read(sections)
    proc_version, proc_open = nvidia.PROC_VERSION.read(sections)
    if loaded.version is None and not loaded.mismatch and proc_version:
        loaded = LoadedDriver(version=proc_version, source="/proc/driver/nvidia/version")

    existing = classify_existing_driver(
        driver.DRIVER_FILES.read(sections), all_installed, loaded.version
    )

    facts: dict[str, Any] = {
        "kernel": system.KERNEL.read(sections),
        "gpus": gpus,
        "gpu_pci_ids": gpu_pci_ids,
        "gpu_count": len(gpus),
        "gpu_source": gpu_source,
        "nvswitch_count": nvswitches,
        "secure_boot": system.SECURE_BOOT.read(sections),
        "installed": installed,
        "held": dpkg.HOLDS.read(sections),
        "loaded_driver": asdict(loaded),
        "module_open": proc_open,
        "existing_driver": asdict(existing),
        "mounts": mounts.MOUNTS.read(sections),
        "converged": converged,
        "state": nodestate.FACT.read(sections),
        # gpunode's own unit files (/etc/systemd/system/gpunode-*), None when not read: the
        # passive checks' role removes a timer the inventory turned off without looking again.
        "own_units": systemd.OWN_UNITS.read(sections),
        # Every installed package: the drift comparison may come after the stack is resolved.
        "packages": all_installed,
        "os": system.os_facts(
            system.OS_RELEASE.read(sections),
            system.DEBIAN_VERSION.read(sections),
            sections.get(system.KERNEL.name, (None, ""))[1],
            system.MACHINE.read(sections),
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
