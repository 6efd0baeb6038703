"""``--query-gpu``, ``--query-remapped-rows`` and ``--query-compute-apps``: the fields and CSV."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .state import (
    EXIT_INVALID,
    NA,
    Driver,
    Gpu,
    SmiExit,
    enabled,
    free_mib,
    hbm,
    link_gen,
    persistence_enabled,
)

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
    add("persistence_mode", None, lambda g: enabled(persistence_enabled(g)))
    add("accounting.mode", None, lambda g: "Disabled")
    add("display_mode", None, lambda g: "Disabled")
    add("display_active", None, lambda g: "Disabled")
    add("compute_mode", None, lambda g: "Default")
    add("compute_cap", None, lambda g: g["compute_cap"])
    add("mig.mode.current", None, lambda g: "Disabled" if hbm(g) else None)
    add("mig.mode.pending", None, lambda g: "Disabled" if hbm(g) else None)
    add("pstate", None, lambda g: "P0")
    add("fan.speed", "%", lambda g: None)
    add("memory.total", "MiB", lambda g: g["memory_total_mib"])
    add("memory.reserved", "MiB", lambda g: g["memory_reserved_mib"])
    add("memory.used", "MiB", lambda g: g["memory_used_mib"])
    add("memory.free", "MiB", free_mib)
    add("utilization.gpu", "%", lambda g: g["utilization_gpu_pct"])
    add("utilization.memory", "%", lambda g: g["utilization_mem_pct"])
    add("temperature.gpu", None, lambda g: g["temperature_c"])
    add("temperature.memory", None, lambda g: g["temperature_c"] + 9 if hbm(g) else None)
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
    add("ecc.mode.current", None, lambda g: enabled(g["ecc_enabled"]))
    add("ecc.mode.pending", None, lambda g: enabled(g["ecc_enabled"]))
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


def query(
    gpus: list[Gpu], fields_arg: str, fmt: str | None, allowed: set[str] | None, driver: Driver
) -> str:
    """`--query-gpu` and `--query-remapped-rows` (``allowed``: the fields the latter takes)."""
    names = [name.strip() for name in fields_arg.split(",") if name.strip()]
    context = {
        "driver_version": driver.version,
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
