"""The node as nvidia-smi sees it: the emulated GPUs, the loaded driver, persistence, load.

Reads what the lab writes (``/var/lib/gpunode-lab/hardware.json``, the loaded driver's
version, the persistence daemon's mode, the busy file); GPUNODE_LAB_ROOT (default "/")
relocates every path. The readings the query fields and the reports share are here too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(os.environ.get("GPUNODE_LAB_ROOT", "/"))
STATE = ROOT / "var/lib/gpunode-lab"
HARDWARE = STATE / "hardware.json"
LOADED = STATE / "loaded-driver-version"
PERSISTENCE = STATE / "persistence-mode.json"
PERSISTENCED_PID = ROOT / "run/nvidia-persistenced/nvidia-persistenced.pid"
# What the stand-in daemon set the driver's persistence mode to (it writes "1" or "0").
PERSISTENCED_MODE = ROOT / "run/nvidia-persistenced/gpunode-lab-persistence-mode"
# GPU work: one PID a line, of processes that keep the GPUs busy (the lab has no CUDA, so
# this file stands in for a CUDA context; while a listed process lives the GPUs are loaded).
GPU_BUSY = ROOT / "run/gpunode-lab/gpu-busy"

NA = "[N/A]"
# Exit codes of the real tool (nvidia-smi(1), RETURN VALUE; 18 is NVML's
# NVML_ERROR_LIB_RM_VERSION_MISMATCH, which nvidia-smi passes through).
EXIT_INVALID = 2
EXIT_NOT_FOUND = 6
EXIT_NO_DRIVER = 9
EXIT_MISMATCH = 18

Gpu = dict[str, Any]


@dataclass(frozen=True)
class Driver:
    """The user-space driver the script was built for (its package's versions)."""

    version: str  # the installed user-space driver
    cuda: str  # the highest CUDA version this driver supports
    nvml: str  # major.minor, as the real tool prints it


class SmiExit(Exception):
    """Stop with a message on stdout (the real tool writes its errors there) and a code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def loaded_version(driver: Driver) -> str:
    """The emulated kernel module's version; NVML refuses to start without a match."""
    try:
        loaded = LOADED.read_text().strip()
    except OSError:
        loaded = ""
    if not loaded:
        raise SmiExit(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n",
            EXIT_NO_DRIVER,
        )
    if loaded != driver.version:
        raise SmiExit(
            "Failed to initialize NVML: Driver/library version mismatch\n"
            f"NVML library version: {driver.nvml}\n",
            EXIT_MISMATCH,
        )
    return loaded


def load_gpus() -> list[Gpu]:
    try:
        data = json.loads(HARDWARE.read_text())
        gpus = list(data["gpus"])
    except (OSError, ValueError, KeyError, TypeError):
        gpus = []
    if not gpus:
        raise SmiExit("No devices were found\n", EXIT_NOT_FOUND)
    return gpus


def load_hardware() -> dict[str, Any]:
    try:
        data = json.loads(HARDWARE.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(pid_text: str) -> bool:
    try:
        return Path(f"/proc/{int(pid_text.strip())}").exists()
    except ValueError:
        return False


def persistence_enabled(gpu: Gpu) -> bool:
    """Persistence is on while nvidia-persistenced runs *in persistence mode* (Ubuntu's and
    Debian's unit start it with --no-persistence-mode: then it only holds the devices open),
    or after `nvidia-smi -pm 1`."""
    try:
        daemon = _alive(PERSISTENCED_PID.read_text())
        if daemon and PERSISTENCED_MODE.read_text().strip() == "1":
            return True
    except OSError:
        pass
    try:
        legacy = json.loads(PERSISTENCE.read_text())
    except (OSError, ValueError):
        return False
    return bool(isinstance(legacy, dict) and legacy.get(gpu["pci_bus_id"]))


def busy() -> bool:
    """Whether work runs on the GPUs: a live process listed in the busy file."""
    try:
        return any(_alive(line) for line in GPU_BUSY.read_text().splitlines() if line.strip())
    except OSError:
        return False


def link_gen(gpu: Gpu) -> int:
    """The current link generation: lowered while idle on GPUs that do (`pcie-idle`)."""
    idle = gpu.get("pcie_gen_idle")
    return int(idle) if idle is not None and not busy() else int(gpu["pcie_gen_current"])


def select(gpus: list[Gpu], ids: str | None) -> list[Gpu]:
    """`-i`: a comma list of indices, UUIDs or PCI bus ids."""
    if ids is None:
        return gpus
    chosen: list[Gpu] = []
    for wanted in ids.split(","):
        wanted = wanted.strip()
        for gpu in gpus:
            bus = gpu["pci_bus_id"]
            if wanted in (str(gpu["index"]), gpu["uuid"]) or wanted.upper() in (bus, bus[4:]):
                chosen.append(gpu)
                break
        else:
            raise SmiExit("No devices were found\n", EXIT_NOT_FOUND)
    return chosen


def set_persistence(gpus: list[Gpu], value: str) -> str:
    on = value.strip().upper() in ("1", "ENABLED")
    if value.strip().upper() not in ("0", "1", "ENABLED", "DISABLED"):
        raise SmiExit(
            f'Invalid persistence mode "{value}". Use 0/DISABLED or 1/ENABLED.\n', EXIT_INVALID
        )
    if os.geteuid() != 0 and "GPUNODE_LAB_ROOT" not in os.environ:
        raise SmiExit("Unable to set persistence mode: Insufficient Permissions\n", 4)
    try:
        state = json.loads(PERSISTENCE.read_text())
    except (OSError, ValueError):
        state = {}
    lines = []
    for gpu in gpus:
        state[gpu["pci_bus_id"]] = on
        verb = "Enabled" if on else "Disabled"
        lines.append(f"{verb} Legacy persistence mode for GPU {gpu['pci_bus_id']}.")
    PERSISTENCE.parent.mkdir(parents=True, exist_ok=True)
    PERSISTENCE.write_text(json.dumps(state, indent=1) + "\n")
    lines.append("All done.")
    return "\n".join(lines) + "\n"


def free_mib(gpu: Gpu) -> int:
    """Free framebuffer memory: total less reserved and used."""
    return int(gpu["memory_total_mib"] - gpu["memory_reserved_mib"] - gpu["memory_used_mib"])


def hbm(gpu: Gpu) -> bool:
    """Whether the GPU has HBM (and with it MIG and a memory temperature)."""
    return gpu["architecture"] in ("Hopper", "Ampere", "Blackwell")


def yes_no(flag: object) -> str:
    return "Yes" if flag else "No"


def enabled(flag: object) -> str:
    return "Enabled" if flag else "Disabled"
