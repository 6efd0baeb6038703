"""The node side of ``gpunode check``: every passive signal of one node, read in one go.

Shipped with the acceptance runner's modules in one Python program on the stdin of one SSH
command (``toolkit.check.plan.probe_program``, ``payload.inline_program``); standard library only
besides the runner and the facts' parsers shipped with it. It reads through the runner's own
functions (GPUs and their memory counters from
``nvidia-smi``, versions, the kernel log's XIDs, the state file, the machine's identity), so a
passive check and acceptance read the very same facts, and adds the raw counters only a
passive check needs: PCIe AER statistics, RDMA port states and the units that must run. It
judges nothing: ``toolkit.check.rules`` does, on the control machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

from toolkit.acceptance.node_runner import facts as runner
from toolkit.acceptance.node_runner.common import now_iso
from toolkit.facts import nvidia

# Linux, Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats: "These attributes show up
# under all the devices that are AER capable", one counter a line, ending with the totals.
AER_FILES = ("aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal")
# The RDMA ports (state, link layer, ``counters/link_downed``: ``rules.LINK_DOWNED``) are read
# by the runner's own reader, as acceptance reads them.
RDMA_PORT_FILES = runner.RDMA_PORT_FILES


def read_aer(pci_dir: str) -> dict[str, Any]:
    """Every AER-capable device's raw counter files under ``pci_dir``, by PCI address."""
    devices: dict[str, dict[str, str]] = {}
    try:
        names = sorted(os.listdir(pci_dir))
    except OSError as err:
        return {"dir": pci_dir, "error": str(err), "devices": devices}
    for name in names:
        files = {
            kind: text
            for kind in AER_FILES
            if (text := runner.read_text(os.path.join(pci_dir, name, kind))) is not None
        }
        if files:
            devices[name] = files
    return {"dir": pci_dir, "error": None, "devices": devices}


def read_rdma(rdma_dir: str) -> dict[str, Any]:
    """Every RDMA port's state and counter files under ``rdma_dir`` (``mlx5_0/1`` -> its
    files, by their path under the port): ``runner.read_rdma``."""
    return runner.read_rdma(rdma_dir)


def read_units(units: list[str]) -> dict[str, str]:
    """``systemctl is-active`` of each unit (one state a line, in the order asked)."""
    if not units:
        return {}
    try:
        proc = subprocess.run(
            ["systemctl", "is-active", "--", *units],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return {unit: f"unknown ({err})" for unit in units}
    states = proc.stdout.split()
    return {unit: states[i] if i < len(states) else "unknown" for i, unit in enumerate(units)}


def versions(gpus: dict[str, Any], packages: list[str]) -> dict[str, Any]:
    """The runner's versions (``/proc/driver/nvidia/version``, the packages), the loaded
    driver taken from the GPU listing just read rather than from one more ``nvidia-smi``
    (``driver_version`` is one of its fields; a failed listing carries NVML's message)."""
    out = dict(runner.query_versions(None, packages))
    if gpus.get("ok"):
        loaded = sorted({str(g.get("driver_version")) for g in gpus.get("list") or []})
        out["driver_loaded"] = loaded[0] if len(loaded) == 1 else loaded or None
    elif gpus.get("error") and gpus["error"] != "nvidia-smi not found":
        out["nvml_error"] = gpus["error"]
        out["nvml_library"] = nvidia.parse_nvidia_smi_driver("", gpus["error"], 1).library_version
    return out


def main(spec: dict[str, Any]) -> dict[str, Any]:
    """Every passive signal of this node, raw (``spec``: what the control machine asks)."""
    started = time.perf_counter()
    smi = shutil.which("nvidia-smi")
    if smi:
        gpus = runner.query_gpus(smi)
    else:
        gpus = {"ok": False, "error": "nvidia-smi not found", "count": 0, "list": []}
    return {
        "started": now_iso(),
        "os_release": runner.read_text("/etc/os-release"),
        "gpus": gpus,
        "versions": versions(gpus, list(spec.get("packages") or [])),
        "kernel_log": runner.read_kernel_log(
            spec.get("kernel_log_command") or runner.DEFAULT_KERNEL_LOG_COMMAND
        ),
        "state": runner.read_state(spec["state_file"]),
        "identity": runner.query_identity(str(spec.get("dmi_dir") or runner.DMI_DIR)),
        "aer": read_aer(spec["pci_dir"]),
        "rdma": read_rdma(spec["rdma_dir"]),
        "units": read_units(list(spec.get("units") or [])),
        "duration_s": time.perf_counter() - started,
    }
