#!/usr/bin/python3
"""nvidia-smi of the gpunode lab: reports the node's emulated GPUs like the real tool.

Installed as /usr/bin/nvidia-smi by the stand-in nvidia-smi package, with the
package's own driver version baked in. It reads:

- /var/lib/gpunode-lab/hardware.json: the emulated GPUs and injected faults (written by the
  lab, see toolkit/lab/hardware.py);
- /var/lib/gpunode-lab/loaded-driver-version: the version of the "loaded kernel module",
  written by the kernel-module package at install time (when nothing was loaded) and at
  (emulated) boot. When it differs from this script's version, NVML cannot initialise, as
  on a real node after an upgrade without a reboot.

GPUNODE_LAB_ROOT (default "/") relocates every path, so tests run it without a node.
Stdlib only: it runs on the node's system Python.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

VERSION = "@VERSION@"  # the installed user-space driver (this package's version)
CUDA_VERSION = "@CUDA_VERSION@"  # the highest CUDA version this driver supports
NVML_VERSION = "@NVML_VERSION@"  # major.minor, as the real tool prints it

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


class SmiExit(Exception):
    """Stop with a message on stdout (the real tool writes its errors there) and a code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# --- state --------------------------------------------------------------------------------


def loaded_version() -> str:
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
    if loaded != VERSION:
        raise SmiExit(
            "Failed to initialize NVML: Driver/library version mismatch\n"
            f"NVML library version: {NVML_VERSION}\n",
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


# --- query fields ---------------------------------------------------------------------------

# Bits of nvmlClocksEventReasons (nvml.h).
REASONS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}


class Field:
    """One queryable field: its header name, unit and how to read it from a GPU."""

    def __init__(self, header: str, unit: str | None, read: Callable[[Gpu], object]) -> None:
        self.header = header
        self.unit = unit
        self.read = read

    def value(self, gpu: Gpu, units: bool) -> str:
        raw = self.read(gpu)
        if raw is None:
            return NA
        text = f"{raw:.2f}" if isinstance(raw, float) else str(raw)
        if self.unit and units:
            return f"{text} {self.unit}"
        return text


def _free(gpu: Gpu) -> int:
    return int(gpu["memory_total_mib"] - gpu["memory_reserved_mib"] - gpu["memory_used_mib"])


def _hbm(gpu: Gpu) -> bool:
    return gpu["architecture"] in ("Hopper", "Ampere", "Blackwell")


def _yes_no(flag: object) -> str:
    return "Yes" if flag else "No"


def _enabled(flag: object) -> str:
    return "Enabled" if flag else "Disabled"


def _key(key: str) -> Callable[[Gpu], object]:
    return lambda g: g[key]


def _reason(bit: int) -> Callable[[Gpu], object]:
    return lambda g: "Active" if int(g["throttle_reasons_active"]) & bit else "Not Active"


def _fields(context: dict[str, Any]) -> dict[str, Field]:
    loaded = context["driver_version"]
    count = context["count"]
    table: dict[str, Field] = {}

    def add(names: str, unit: str | None, read: Callable[[Gpu], object]) -> None:
        header, *_ = names.split()
        field = Field(header + (f" [{unit}]" if unit else ""), unit, read)
        for name in names.split():
            table[name] = field

    add("timestamp", None, lambda g: context["timestamp"])
    add("driver_version", None, lambda g: loaded)
    add("count", None, lambda g: count)
    add("name gpu_name", None, lambda g: g["name"])
    add("serial gpu_serial", None, lambda g: g["serial"])
    add("uuid gpu_uuid", None, lambda g: g["uuid"])
    add("pci.bus_id gpu_bus_id", None, lambda g: g["pci_bus_id"])
    add("pci.domain", None, lambda g: "0x" + g["pci_bus_id"][4:8])
    add("pci.bus", None, lambda g: "0x" + g["pci_bus_id"][9:11])
    add("pci.device", None, lambda g: "0x" + g["pci_bus_id"][12:14])
    add("pci.device_id", None, lambda g: g["pci_device_id"])
    add("pci.sub_device_id", None, lambda g: g["pci_subsystem_id"])
    add("index", None, lambda g: g["index"])
    add("minor_number", None, lambda g: g["minor_number"])
    add("vbios_version", None, lambda g: g["vbios_version"])
    add("inforom.img inforom.image", None, lambda g: "G520.0200.00.05")
    add("persistence_mode", None, lambda g: _enabled(persistence_enabled(g)))
    add("accounting.mode", None, lambda g: "Disabled")
    add("display_mode", None, lambda g: "Disabled")
    add("display_active", None, lambda g: "Disabled")
    add("compute_mode", None, lambda g: "Default")
    add("compute_cap", None, lambda g: g["compute_cap"])
    add("mig.mode.current", None, lambda g: "Disabled" if _hbm(g) else None)
    add("mig.mode.pending", None, lambda g: "Disabled" if _hbm(g) else None)
    add("pstate", None, lambda g: "P0")
    add("fan.speed", "%", lambda g: None)
    add("memory.total", "MiB", lambda g: g["memory_total_mib"])
    add("memory.reserved", "MiB", lambda g: g["memory_reserved_mib"])
    add("memory.used", "MiB", lambda g: g["memory_used_mib"])
    add("memory.free", "MiB", _free)
    add("utilization.gpu", "%", lambda g: g["utilization_gpu_pct"])
    add("utilization.memory", "%", lambda g: g["utilization_mem_pct"])
    add("temperature.gpu", None, lambda g: g["temperature_c"])
    add("temperature.memory", None, lambda g: g["temperature_c"] + 9 if _hbm(g) else None)
    add("temperature.gpu.tlimit", None, lambda g: g["slowdown_temp_c"] - g["temperature_c"])
    add("power.management", None, lambda g: "Enabled")
    add("power.draw", "W", lambda g: float(g["power_draw_w"]))
    add("power.draw.average", "W", lambda g: float(g["power_draw_w"]))
    add("power.draw.instant", "W", lambda g: float(g["power_draw_w"]))
    add("power.limit", "W", lambda g: float(g["power_limit_w"]))
    add("enforced.power.limit", "W", lambda g: float(g["power_limit_w"]))
    add("power.default_limit", "W", lambda g: float(g["power_limit_w"]))
    add("power.min_limit", "W", lambda g: float(g["power_min_limit_w"]))
    add("power.max_limit", "W", lambda g: float(g["power_limit_w"]))
    add("clocks.current.graphics clocks.gr", "MHz", lambda g: g["clocks_sm_mhz"])
    add("clocks.current.sm clocks.sm", "MHz", lambda g: g["clocks_sm_mhz"])
    add("clocks.current.memory clocks.mem", "MHz", lambda g: g["clocks_mem_mhz"])
    add("clocks.current.video clocks.video", "MHz", lambda g: 765)
    add("clocks.max.graphics clocks.max.gr", "MHz", lambda g: g["clocks_max_sm_mhz"])
    add("clocks.max.sm", "MHz", lambda g: g["clocks_max_sm_mhz"])
    add("clocks.max.memory clocks.max.mem", "MHz", lambda g: g["clocks_max_mem_mhz"])
    add("pcie.link.gen.current pcie.link.gen.gpucurrent", None, link_gen)
    add("pcie.link.gen.max", None, lambda g: g["pcie_gen_max"])
    add("pcie.link.gen.gpumax", None, lambda g: g.get("pcie_gen_gpu_max", g["pcie_gen_max"]))
    add("pcie.link.gen.hostmax", None, lambda g: g.get("pcie_gen_host_max", g["pcie_gen_max"]))
    add("pcie.link.width.current", None, lambda g: g["pcie_width_current"])
    add("pcie.link.width.max", None, lambda g: g["pcie_width_max"])
    add("ecc.mode.current", None, lambda g: _enabled(g["ecc_enabled"]))
    add("ecc.mode.pending", None, lambda g: _enabled(g["ecc_enabled"]))
    for kind, key in (("corrected", "ecc_corrected"), ("uncorrected", "ecc_uncorrected")):
        for span in ("volatile", "aggregate"):
            value_key = f"{key}_{span}"
            add(
                f"ecc.errors.{kind}.{span}.total ecc.errors.{kind}.{span}.device_memory "
                f"ecc.errors.{kind}.{span}.dram",
                None,
                _key(value_key),
            )
            add(f"ecc.errors.{kind}.{span}.sram", None, lambda g: 0)
    # Ampere and later replace page retirement with row remapping: these read N/A there.
    add("retired_pages.single_bit_ecc.count retired_pages.sbe", None, lambda g: None)
    add("retired_pages.double_bit.count retired_pages.dbe", None, lambda g: None)
    add("retired_pages.pending", None, lambda g: None)
    add("remapped_rows.correctable", None, lambda g: g["remapped_rows_correctable"])
    add("remapped_rows.uncorrectable", None, lambda g: g["remapped_rows_uncorrectable"])
    add("remapped_rows.pending", None, lambda g: int(bool(g["remapped_rows_pending"])))
    add("remapped_rows.failure", None, lambda g: int(bool(g["remapped_rows_failure"])))
    # NVIDIA/DCGM#263 shows `--query-gpu=index,gpu_recovery_action` printing "0, None".
    add("gpu_recovery_action", None, lambda g: g.get("recovery_action", "None"))
    for prefix in ("clocks_throttle_reasons", "clocks_event_reasons"):
        add(f"{prefix}.active", None, lambda g: f"0x{int(g['throttle_reasons_active']):016x}")
        add(f"{prefix}.supported", None, lambda g: "0x00000000000001ff")
        for reason, bit in REASONS.items():
            add(f"{prefix}.{reason}", None, _reason(bit))
    return table


REMAPPED_ROWS_FIELDS = {
    "gpu_bus_id",
    "pci.bus_id",
    "gpu_uuid",
    "uuid",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
}
COMPUTE_APPS_FIELDS = {
    "timestamp": "timestamp",
    "gpu_name": "gpu_name",
    "gpu_bus_id": "gpu_bus_id",
    "gpu_serial": "gpu_serial",
    "gpu_uuid": "gpu_uuid",
    "pid": "pid",
    "process_name": "process_name",
    "name": "process_name",
    "used_gpu_memory": "used_gpu_memory [MiB]",
    "used_memory": "used_gpu_memory [MiB]",
}


def parse_format(spec: str | None) -> tuple[bool, bool]:
    """`--format=csv[,noheader][,nounits]` -> (header, units)."""
    if spec is None:
        raise SmiExit(
            '"--format=" is a required option when querying, for example --format=csv\n'
            "Please run 'nvidia-smi -h' for help.\n",
            EXIT_INVALID,
        )
    options = [part.strip() for part in spec.split(",") if part.strip()]
    if "csv" not in options:
        raise SmiExit(
            f'"{spec}" is not a valid format. Only csv is supported for queries.\n'
            "Please run 'nvidia-smi -h' for help.\n",
            EXIT_INVALID,
        )
    for option in options:
        if option not in ("csv", "noheader", "nounits"):
            raise SmiExit(f'"{option}" is not a valid format option.\n\n', EXIT_INVALID)
    return "noheader" not in options, "nounits" not in options


def query(gpus: list[Gpu], fields_arg: str, fmt: str | None, allowed: set[str] | None) -> str:
    names = [name.strip() for name in fields_arg.split(",") if name.strip()]
    context = {
        "driver_version": VERSION,
        "count": len(gpus),
        "timestamp": time.strftime("%Y/%m/%d %H:%M:%S.") + f"{int(time.time() * 1000) % 1000:03d}",
    }
    table = _fields(context)
    if not names:
        raise SmiExit("No fields were given to query.\n\n", EXIT_INVALID)
    for name in names:
        if name not in table or (allowed is not None and name not in allowed):
            raise SmiExit(f'Field "{name}" is not a valid field to query.\n\n', EXIT_INVALID)
    header, units = parse_format(fmt)
    lines = []
    if header:
        lines.append(", ".join(table[name].header for name in names))
    for gpu in gpus:
        lines.append(", ".join(table[name].value(gpu, units) for name in names))
    return "\n".join(lines) + "\n"


def query_compute_apps(fields_arg: str, fmt: str | None) -> str:
    names = [name.strip() for name in fields_arg.split(",") if name.strip()]
    for name in names:
        if name not in COMPUTE_APPS_FIELDS:
            raise SmiExit(f'Field "{name}" is not a valid field to query.\n\n', EXIT_INVALID)
    header, _units = parse_format(fmt)
    # No process ever runs on an emulated GPU: the real tool then prints the header only.
    return ", ".join(COMPUTE_APPS_FIELDS[n] for n in names) + "\n" if header else ""


# --- -L, the table, -q, topo ------------------------------------------------------------------


def list_gpus(gpus: list[Gpu]) -> str:
    return "".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n" for g in gpus)


def _cell(left: str, right: str, width: int) -> str:
    return left + " " * max(1, width - len(left) - len(right)) + right


HEADINGS = (
    (
        " GPU  Name                 Persistence-M ",
        " Bus-Id          Disp.A ",
        " Volatile Uncorr. ECC ",
    ),
    (
        " Fan  Temp   Perf          Pwr:Usage/Cap ",
        "           Memory-Usage ",
        " GPU-Util  Compute M. ",
    ),
    ("", "", "               MIG M. "),
)


def summary_table(gpus: list[Gpu]) -> str:
    rule = "+" + "-" * 89 + "+"
    lines = [time.strftime("%a %b %e %H:%M:%S %Y").ljust(31), rule]
    banner = (
        f" NVIDIA-SMI {VERSION}".ljust(35)
        + f"Driver Version: {VERSION}".ljust(31)
        + f"CUDA Version: {CUDA_VERSION}"
    )
    lines.append("|" + banner.ljust(89) + "|")
    lines.append("|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+")
    for left, middle, right in HEADINGS:
        lines.append(f"|{left:<41}|{middle:>24}|{right:>22}|")
    lines.append("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|")
    for gpu in gpus:
        name = gpu["name"] if len(gpu["name"]) <= 24 else gpu["name"][:21] + "..."
        pm = "On" if persistence_enabled(gpu) else "Off"
        ecc = str(gpu["ecc_uncorrected_volatile"]) if gpu["ecc_enabled"] else "N/A"
        used = f"{gpu['memory_used_mib']}MiB / {gpu['memory_total_mib']}MiB"
        power = f"{round(gpu['power_draw_w']):>4}W / {round(gpu['power_limit_w']):>4}W"
        mig = "Disabled" if _hbm(gpu) else "N/A"
        col1 = _cell(f"{gpu['index']:>4}  {name}", f"{pm}  ", 41)
        col2 = f"{gpu['pci_bus_id']:>19} Off "
        col3 = f"{ecc:>21} "
        lines.append(f"|{col1}|{col2}|{col3}|")
        col1 = _cell(f" N/A  {gpu['temperature_c']:>3}C    P0", f"{power} ", 41)
        col2 = f"{used:>23} "
        col3 = f"{gpu['utilization_gpu_pct']:>7}%{'Default':>13} "
        lines.append(f"|{col1}|{col2}|{col3}|")
        lines.append(f"|{' ' * 41}|{' ' * 24}|{mig:>21} |")
        lines.append("+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+")
    lines += [
        " " * 91,
        rule,
        "| Processes:".ljust(90) + "|",
        "|  GPU   GI   CI        PID   Type   Process name" + " " * 30 + "GPU Memory |",
        "|        ID   ID" + " " * 63 + "Usage      |",
        "|" + "=" * 89 + "|",
        "|  No running processes found".ljust(90) + "|",
        rule,
    ]
    return "\n".join(lines) + "\n"


Node = tuple[str, object]  # (key, value) or (key, [children]) in the -q layout

DISPLAY_SECTIONS = {
    "MEMORY": {"FB Memory Usage", "BAR1 Memory Usage"},
    "UTILIZATION": {"Utilization"},
    "ECC": {"ECC Mode", "ECC Errors"},
    "TEMPERATURE": {"Temperature"},
    "POWER": {"GPU Power Readings"},
    "CLOCK": {"Clocks", "Max Clocks"},
    "COMPUTE": {"Compute Mode"},
    "PIDS": {"Processes"},
    "PERFORMANCE": {"Performance State", "Clocks Event Reasons"},
    "PAGE_RETIREMENT": {"Retired Pages"},
    "ROW_REMAPPER": {"Remapped Rows"},
}


def _gpu_nodes(gpu: Gpu) -> list[Node]:
    g = gpu
    bus = g["pci_bus_id"]
    active = int(g["throttle_reasons_active"])
    ecc_v = [
        ("SRAM Correctable", 0),
        ("SRAM Uncorrectable Parity", 0),
        ("SRAM Uncorrectable SEC-DED", 0),
        ("DRAM Correctable", g["ecc_corrected_volatile"]),
        ("DRAM Uncorrectable", g["ecc_uncorrected_volatile"]),
    ]
    ecc_a = [
        ("SRAM Correctable", 0),
        ("SRAM Uncorrectable Parity", 0),
        ("SRAM Uncorrectable SEC-DED", 0),
        ("DRAM Correctable", g["ecc_corrected_aggregate"]),
        ("DRAM Uncorrectable", g["ecc_uncorrected_aggregate"]),
        ("SRAM Threshold Exceeded", "No"),
    ]
    banks = g["row_remap_banks"]
    reasons = [
        ("Idle", 0x1),
        ("Applications Clocks Setting", 0x2),
        ("SW Power Cap", 0x4),
        ("HW Slowdown", 0x8),
        ("HW Thermal Slowdown", 0x40),
        ("HW Power Brake Slowdown", 0x80),
        ("Sync Boost", 0x10),
        ("SW Thermal Slowdown", 0x20),
    ]
    return [
        ("Product Name", g["name"]),
        ("Product Brand", g["brand"]),
        ("Product Architecture", g["architecture"]),
        ("Display Mode", "Disabled"),
        ("Display Active", "Disabled"),
        ("Persistence Mode", _enabled(persistence_enabled(g))),
        ("Addressing Mode", "None"),
        ("MIG Mode", [("Current", "Disabled"), ("Pending", "Disabled")] if _hbm(g) else "N/A"),
        ("Accounting Mode", "Disabled"),
        ("Accounting Mode Buffer Size", "4000"),
        ("Driver Model", [("Current", "N/A"), ("Pending", "N/A")]),
        ("Serial Number", g["serial"]),
        ("GPU UUID", g["uuid"]),
        ("Minor Number", g["minor_number"]),
        ("VBIOS Version", g["vbios_version"]),
        ("MultiGPU Board", "No"),
        ("Board ID", "0x" + bus[9:11].lower() + "00"),
        ("Board Part Number", g["board_part_number"]),
        ("GPU Part Number", g["pci_device_id"][2:6] + "-885-A1"),
        # Where R565+ drivers print it, between "GPU Reset Status" and the GSP firmware
        # (tests/data/real/nvidia-smi-q.h100-sxm-8.565.57.01.txt).
        ("GPU Recovery Action", g.get("recovery_action", "None")),
        ("GSP Firmware Version", VERSION),
        (
            "PCI",
            [
                ("Bus", "0x" + bus[9:11]),
                ("Device", "0x" + bus[12:14]),
                ("Domain", "0x" + bus[4:8]),
                ("Device Id", g["pci_device_id"]),
                ("Bus Id", bus),
                ("Sub System Id", g["pci_subsystem_id"]),
                (
                    "GPU Link Info",
                    [
                        (
                            "PCIe Generation",
                            [
                                ("Max", g["pcie_gen_max"]),
                                ("Current", link_gen(g)),
                                ("Device Current", link_gen(g)),
                                ("Device Max", g.get("pcie_gen_gpu_max", g["pcie_gen_max"])),
                                ("Host Max", g.get("pcie_gen_host_max", g["pcie_gen_max"])),
                            ],
                        ),
                        (
                            "Link Width",
                            [
                                ("Max", f"{g['pcie_width_max']}x"),
                                ("Current", f"{g['pcie_width_current']}x"),
                            ],
                        ),
                    ],
                ),
                ("Replays Since Reset", "0"),
                ("Tx Throughput", "0 KB/s"),
                ("Rx Throughput", "0 KB/s"),
                ("Atomic Caps Inbound", "N/A"),
                ("Atomic Caps Outbound", "N/A"),
            ],
        ),
        ("Fan Speed", "N/A"),
        ("Performance State", "P0"),
        (
            "Clocks Event Reasons",
            [(label, "Active" if active & bit else "Not Active") for label, bit in reasons],
        ),
        (
            "FB Memory Usage",
            [
                ("Total", f"{g['memory_total_mib']} MiB"),
                ("Reserved", f"{g['memory_reserved_mib']} MiB"),
                ("Used", f"{g['memory_used_mib']} MiB"),
                ("Free", f"{_free(g)} MiB"),
            ],
        ),
        (
            "BAR1 Memory Usage",
            [("Total", "131072 MiB"), ("Used", "1 MiB"), ("Free", "131071 MiB")],
        ),
        ("Compute Mode", "Default"),
        (
            "Utilization",
            [
                ("Gpu", f"{g['utilization_gpu_pct']} %"),
                ("Memory", f"{g['utilization_mem_pct']} %"),
                ("Encoder", "0 %"),
                ("Decoder", "0 %"),
            ],
        ),
        (
            "ECC Mode",
            [("Current", _enabled(g["ecc_enabled"])), ("Pending", _enabled(g["ecc_enabled"]))],
        ),
        ("ECC Errors", [("Volatile", ecc_v), ("Aggregate", ecc_a)]),
        (
            "Retired Pages",
            [
                ("Single Bit ECC", "N/A"),
                ("Double Bit ECC", "N/A"),
                ("Pending Page Blacklist", "N/A"),
            ],
        ),
        (
            "Remapped Rows",
            [
                ("Correctable Error", g["remapped_rows_correctable"]),
                ("Uncorrectable Error", g["remapped_rows_uncorrectable"]),
                ("Pending", _yes_no(g["remapped_rows_pending"])),
                ("Remapping Failure Occurred", _yes_no(g["remapped_rows_failure"])),
                (
                    "Bank Remap Availability Histogram",
                    [
                        ("Max", f"{banks - g['remapped_rows_uncorrectable']} bank(s)"),
                        ("High", "0 bank(s)"),
                        ("Partial", f"{g['remapped_rows_uncorrectable']} bank(s)"),
                        ("Low", "0 bank(s)"),
                        ("None", "0 bank(s)"),
                    ],
                ),
            ],
        ),
        (
            "Temperature",
            [
                ("GPU Current Temp", f"{g['temperature_c']} C"),
                ("GPU T.Limit Temp", f"{g['slowdown_temp_c'] - g['temperature_c']} C"),
                ("GPU Shutdown Temp", f"{g['shutdown_temp_c']} C"),
                ("GPU Slowdown Temp", f"{g['slowdown_temp_c']} C"),
                ("GPU Max Operating Temp", f"{g['slowdown_temp_c'] - 2} C"),
                ("Memory Current Temp", f"{g['temperature_c'] + 9} C" if _hbm(g) else "N/A"),
                ("Memory Max Operating Temp", "95 C" if _hbm(g) else "N/A"),
            ],
        ),
        (
            "GPU Power Readings",
            [
                ("Power Draw", f"{g['power_draw_w']:.2f} W"),
                ("Current Power Limit", f"{g['power_limit_w']:.2f} W"),
                ("Requested Power Limit", f"{g['power_limit_w']:.2f} W"),
                ("Default Power Limit", f"{g['power_limit_w']:.2f} W"),
                ("Min Power Limit", f"{g['power_min_limit_w']:.2f} W"),
                ("Max Power Limit", f"{g['power_limit_w']:.2f} W"),
            ],
        ),
        (
            "Clocks",
            [
                ("Graphics", f"{g['clocks_sm_mhz']} MHz"),
                ("SM", f"{g['clocks_sm_mhz']} MHz"),
                ("Memory", f"{g['clocks_mem_mhz']} MHz"),
                ("Video", "765 MHz"),
            ],
        ),
        (
            "Max Clocks",
            [
                ("Graphics", f"{g['clocks_max_sm_mhz']} MHz"),
                ("SM", f"{g['clocks_max_sm_mhz']} MHz"),
                ("Memory", f"{g['clocks_max_mem_mhz']} MHz"),
                ("Video", f"{g['clocks_max_video_mhz']} MHz"),
            ],
        ),
        ("Processes", "None"),
    ]


def _render(nodes: list[Node], depth: int, out: list[str]) -> None:
    indent = "    " * depth
    for key, value in nodes:
        if isinstance(value, list):
            out.append(indent + key)
            _render(value, depth + 1, out)
        else:
            out.append(f"{indent + key:<42}: {value}")


def full_query(gpus: list[Gpu], display: str | None) -> str:
    wanted: set[str] | None = None
    if display is not None:
        wanted = set()
        for kind in display.split(","):
            kind = kind.strip().upper()
            if kind not in DISPLAY_SECTIONS:
                raise SmiExit(
                    f'"{kind}" is not a valid display type.\n'
                    "Please run 'nvidia-smi -h' for help.\n",
                    EXIT_INVALID,
                )
            wanted |= DISPLAY_SECTIONS[kind]
    hardware = load_hardware()
    out = ["", "==============NVSMI LOG==============", ""]
    _render(
        [
            ("Timestamp", time.strftime("%a %b %e %H:%M:%S %Y")),
            ("Driver Version", VERSION),
            ("CUDA Version", CUDA_VERSION),
        ],
        0,
        out,
    )
    out.append("")
    _render([("Attached GPUs", len(hardware.get("gpus", gpus)))], 0, out)
    for gpu in gpus:
        nodes = _gpu_nodes(gpu)
        if wanted is not None:
            nodes = [node for node in nodes if node[0] in wanted]
        out.append(f"GPU {gpu['pci_bus_id']}")
        _render(nodes, 1, out)
        out.append("")
    return "\n".join(out) + "\n"


LEGEND_ITEMS = (
    ("X", "Self"),
    (
        "SYS",
        "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes"
        " (e.g., QPI/UPI)",
    ),
    (
        "NODE",
        "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges"
        " within a NUMA node",
    ),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    (
        "PXB",
        "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    ),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)
LEGEND = "\nLegend:\n\n" + "".join(f"  {key:<4} = {text}\n" for key, text in LEGEND_ITEMS)


def _link(a: dict[str, Any], b: dict[str, Any], nvswitch: bool, sys_pair: set[int]) -> str:
    """The link `topo -m` prints between two devices (GPUs or NICs) of the lab's board."""
    if a is b:
        return " X "
    gpus = "index" in a and "index" in b
    if gpus and {a["index"], b["index"]} == sys_pair:
        return "SYS"  # the `topo` fault
    if gpus and nvswitch and a["nvlinks"] and b["nvlinks"]:
        return f"NV{min(a['nvlinks'], b['nvlinks'])}"
    if a["pcie_switch"] == b["pcie_switch"]:
        return "PIX"  # behind one PCIe switch
    if a["numa_node"] == b["numa_node"]:
        return "NODE"
    return "SYS"


def topology(gpus: list[Gpu]) -> str:
    """`nvidia-smi topo -m`: the matrix with tabs as the real tool prints it, GPU rows with
    their affinities (and the empty field the real tool pads before GPU NUMA ID), NIC rows,
    the Legend and the NIC Legend."""
    hardware = load_hardware()
    nvswitch = bool(hardware.get("nvswitch"))
    sys_pair = set(hardware.get("topo_sys_pair") or ())
    devices: list[tuple[str, dict[str, Any]]] = [
        (f"GPU{g['index']}", {**g, "pcie_switch": g.get("pcie_switch", g["index"] // 2)})
        for g in gpus
    ]
    nics = list(hardware.get("nics") or [])
    devices += [(f"NIC{j}", nic) for j, nic in enumerate(nics)]
    header = "\t" + "\t".join(label for label, _ in devices)
    lines = [header + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for label, a in devices:
        cells = "\t".join(_link(a, b, nvswitch, sys_pair) for _, b in devices)
        if "index" in a:
            lines.append(f"{label}\t{cells}\t{a['cpu_affinity']}\t{a['numa_node']}\t\tN/A")
        else:
            lines.append(f"{label}\t{cells}")
    out = "\n".join(lines) + "\n" + LEGEND
    if nics:
        out += "\nNIC Legend:\n\n" + "".join(
            f"  NIC{j}: {nic['name']}\n" for j, nic in enumerate(nics)
        )
    return out


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


def version_text() -> str:
    return (
        f"NVIDIA-SMI version  : {VERSION}\n"
        f"NVML version        : {NVML_VERSION}\n"
        f"DRIVER version      : {VERSION}\n"
        f"CUDA Version        : {CUDA_VERSION}\n"
    )


HELP = """NVIDIA System Management Interface -- v{version} (gpunode lab emulation)

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -q,   --query               Display GPU or Unit info.
    -i,   --id=                 Target a specific GPU (index, UUID or PCI bus id).
    -d,   --display=            Display only selected information: MEMORY, UTILIZATION, ECC,
                                TEMPERATURE, POWER, CLOCK, COMPUTE, PIDS, PERFORMANCE,
                                PAGE_RETIREMENT, ROW_REMAPPER.
    --query-gpu=                Information about GPU (see the real tool's --help-query-gpu).
    --query-remapped-rows=      Information about remapped rows.
    --query-compute-apps=       Information about currently active compute processes.
    --format=                   csv[,noheader][,nounits]
    -pm,  --persistence-mode=   Set persistence mode: 0/DISABLED, 1/ENABLED
    topo -m                     Display the GPU topology matrix.
"""

INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"


def parse(argv: list[str]) -> dict[str, str | None]:
    """The real tool's option style: `--opt=value`, `--opt value`, `-i 0`."""
    takes_value = {
        "-i": "id",
        "--id": "id",
        "-d": "display",
        "--display": "display",
        "--query-gpu": "query_gpu",
        "--query-remapped-rows": "query_remapped_rows",
        "--query-compute-apps": "query_compute_apps",
        "--format": "format",
        "-pm": "persistence",
        "--persistence-mode": "persistence",
    }
    flags = {
        "-h": "help",
        "--help": "help",
        "--version": "version",
        "-L": "list",
        "--list-gpus": "list",
        "-q": "query",
        "--query": "query",
    }
    opts: dict[str, str | None] = {}
    args = list(argv)
    if args[:1] == ["topo"]:
        if len(args) >= 2 and args[1] in ("-m", "--matrix"):
            return {"topo": "1"}
        raise SmiExit(INVALID, EXIT_INVALID)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in takes_value:
            if not eq:
                if not args:
                    raise SmiExit(f'Option "{name}" requires an argument.\n{INVALID}', EXIT_INVALID)
                value = args.pop(0)
            opts[takes_value[name]] = value
        elif arg in flags:
            opts[flags[arg]] = "1"
        else:
            raise SmiExit(INVALID, EXIT_INVALID)
    return opts


def run(argv: list[str]) -> str:
    opts = parse(argv)
    if "help" in opts:
        return HELP.format(version=VERSION)
    loaded_version()
    if "version" in opts:
        return version_text()
    gpus = select(load_gpus(), opts.get("id"))
    if "topo" in opts:
        return topology(gpus)
    if opts.get("persistence") is not None:
        return set_persistence(gpus, str(opts["persistence"]))
    if opts.get("query_gpu") is not None:
        return query(gpus, str(opts["query_gpu"]), opts.get("format"), None)
    if opts.get("query_remapped_rows") is not None:
        return query(
            gpus, str(opts["query_remapped_rows"]), opts.get("format"), REMAPPED_ROWS_FIELDS
        )
    if opts.get("query_compute_apps") is not None:
        return query_compute_apps(str(opts["query_compute_apps"]), opts.get("format"))
    if "list" in opts:
        return list_gpus(gpus)
    if "query" in opts:
        return full_query(gpus, opts.get("display"))
    if "display" in opts or "format" in opts:
        raise SmiExit(INVALID, EXIT_INVALID)
    return summary_table(gpus)


def main(argv: list[str]) -> int:
    if VERSION.startswith("@"):
        sys.stderr.write("nvidia-smi: this stand-in was not built (its version is unset)\n")
        return 255
    try:
        sys.stdout.write(run(argv))
    except SmiExit as stop:
        sys.stdout.write(stop.message)
        return stop.code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
