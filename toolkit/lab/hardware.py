"""The emulated GPUs of one lab node: ``/var/lib/gpunode-lab/hardware.json``.

The lab writes this file into every node; the stand-in ``nvidia-smi`` (shipped by the
stand-in ``nvidia-smi`` package, stdlib only) reads it back. The JSON layout is
therefore a contract between this module and ``toolkit/lab/standins/smi/``:
``NodeHardware.model_dump(mode="json")`` is exactly what the script reads, and
``schema_version`` changes whenever a field's meaning does.

GPU models are the GPU catalogue's boards with the figures only emulation needs
(``toolkit/lab/gpu_models.py``, ``GPU_MODELS``, their sources next to them).
Faults are injected here as values (a GPU left out, ECC counters, a downgraded link), so
that every reader of the node (``nvidia-smi``, the roles, the acceptance checks) sees one
consistent story.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolkit.errors import ConfigError
from toolkit.lab.faults import (
    AER_FAULT_CORRECTABLE,
    AER_FAULT_NONFATAL,
    DCGM_FAILING_PLUGIN,
    DEGRADED_PCIE_GEN,
    DEGRADED_PCIE_WIDTH,
    ECC_FAULT_CORRECTED,
    ECC_FAULT_UNCORRECTED,
    FAULTS,
    IDLE_PCIE_GEN,
    KERNEL_LOG_FAULTS,
    LINK_FLAP_DOWNS,
    REMAP_FAILURE_ROWS,
    XID63_MESSAGE,
    XID154_MESSAGE,
    XID_MESSAGE,
)
from toolkit.lab.gpu_models import GPU_MODELS, GpuModel

# 2: the GPU and host maximum link generation, the idle link; 3: `system`; 4: PCIe switches,
# NICs and the `topo` fault's GPU pair (what `nvidia-smi topo -m` shows); 5: each GPU's
# `recovery_action`; 6: each GPU's `dcgm_failing_plugin` (what the stand-in dcgmi reads); 7:
# each GPU's PCIe AER counters (the lab writes them as sysfs-shaped files, `aer_files`); 8:
# each NIC's `link_downed` (its RDMA port, written as sysfs-shaped files, `rdma_files`)
SCHEMA_VERSION = 8

FaultName = Literal[
    "missing-gpu",
    "ecc",
    "remapped",
    "remap-failure",
    "xid",
    "old-xid",
    "xid154",
    "pcie",
    "pcie-idle",
    "slow-net",
    "slow-data",
    "keyring",
    "swapped-gpu",
    "topo",
    "runfile-driver",
    "dcgm-fail",
    "aer",
    "remap-rising",
    "returned-gpu",
    "link-flap",
    "xid63",
    "no-rdma-passthrough",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Gpu(_Strict):
    """One emulated GPU, with every value ``nvidia-smi`` reports for it."""

    index: int = Field(ge=0)
    minor_number: int = Field(ge=0)
    name: str
    brand: str
    architecture: str
    uuid: str = Field(pattern=r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    serial: str = Field(pattern=r"^[0-9]{13}$")
    pci_bus_id: str = Field(pattern=r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
    pci_device_id: str
    pci_subsystem_id: str
    vbios_version: str
    board_part_number: str
    numa_node: int = Field(ge=0)
    cpu_affinity: str
    memory_total_mib: int = Field(gt=0)
    memory_reserved_mib: int = Field(ge=0)
    memory_used_mib: int = Field(ge=0)
    temperature_c: int
    shutdown_temp_c: int
    slowdown_temp_c: int
    power_draw_w: float = Field(ge=0)
    power_limit_w: float = Field(gt=0)
    power_min_limit_w: float = Field(gt=0)
    clocks_sm_mhz: int = Field(gt=0)
    clocks_max_sm_mhz: int = Field(gt=0)
    clocks_mem_mhz: int = Field(gt=0)
    clocks_max_mem_mhz: int = Field(gt=0)
    clocks_max_video_mhz: int = Field(gt=0)
    pcie_gen_current: int = Field(ge=1, le=6)
    pcie_gen_max: int = Field(ge=1, le=6)
    pcie_width_current: int = Field(ge=1, le=32)
    pcie_width_max: int = Field(ge=1, le=32)
    # `pcie.link.gen.gpumax` (the card) and `hostmax` (its root port); `gen.max` is the lower.
    pcie_gen_gpu_max: int = Field(ge=1, le=6)
    pcie_gen_host_max: int = Field(ge=1, le=6)
    # The PCIe switch of the GPU's slot: each pair of slots shares one, with one NIC on it.
    pcie_switch: int = Field(ge=0)
    # The generation the link drops to while no work runs on the GPU (None: it stays up).
    # `pcie_gen_current` is the link under load; the stand-in nvidia-smi reports the idle one
    # unless the GPU is busy (see toolkit/lab/standins/nvidia_smi.py, `busy`).
    pcie_gen_idle: int | None = Field(default=None, ge=1, le=6)
    compute_cap: str = Field(pattern=r"^[0-9]+\.[0-9]+$")
    nvlinks: int = Field(ge=0)
    ecc_enabled: bool
    ecc_corrected_volatile: int = Field(ge=0)
    ecc_corrected_aggregate: int = Field(ge=0)
    ecc_uncorrected_volatile: int = Field(ge=0)
    ecc_uncorrected_aggregate: int = Field(ge=0)
    remapped_rows_correctable: int = Field(ge=0)
    remapped_rows_uncorrectable: int = Field(ge=0)
    remapped_rows_pending: bool
    remapped_rows_failure: bool
    row_remap_banks: int = Field(ge=0)
    # nvidia-smi -q "GPU Recovery Action" (None, Reset, Reboot, Drain P2P, Drain and Reset;
    # NVIDIA GPU Memory Error Management, Error Recovery and Response Flags).
    recovery_action: Literal["None", "Reset", "Reboot", "Drain P2P", "Drain and Reset"] = "None"
    # The DCGM plugin this GPU fails in `dcgmi diag` (the `dcgm-fail` fault); None: all pass.
    dcgm_failing_plugin: Literal["memory"] | None = None
    # Bitmask of `clocks_event_reasons` (NVML `nvmlClocksEventReasons`); 0 = not throttled.
    throttle_reasons_active: int = Field(ge=0)
    # The AER totals of the GPU's PCIe function since boot (TOTAL_ERR_COR, _NONFATAL, _FATAL).
    aer_correctable: int = Field(default=0, ge=0)
    aer_nonfatal: int = Field(default=0, ge=0)
    aer_fatal: int = Field(default=0, ge=0)
    utilization_gpu_pct: int = Field(ge=0, le=100)
    utilization_mem_pct: int = Field(ge=0, le=100)

    @model_validator(mode="after")
    def _coherent(self) -> Gpu:
        if self.pcie_gen_current > self.pcie_gen_max:
            raise ValueError("pcie_gen_current must not exceed pcie_gen_max")
        if self.pcie_width_current > self.pcie_width_max:
            raise ValueError("pcie_width_current must not exceed pcie_width_max")
        if self.pcie_gen_max != min(self.pcie_gen_gpu_max, self.pcie_gen_host_max):
            raise ValueError("pcie_gen_max must be the lower of the GPU's and the host's maximum")
        if self.ecc_uncorrected_aggregate < self.ecc_uncorrected_volatile:
            raise ValueError("ecc_uncorrected_aggregate must be >= ecc_uncorrected_volatile")
        if self.ecc_corrected_aggregate < self.ecc_corrected_volatile:
            raise ValueError("ecc_corrected_aggregate must be >= ecc_corrected_volatile")
        if self.memory_used_mib + self.memory_reserved_mib > self.memory_total_mib:
            raise ValueError("memory_used_mib + memory_reserved_mib exceed memory_total_mib")
        return self


class System(_Strict):
    """The machine's DMI strings (what /sys/class/dmi/id shows on a real server)."""

    vendor: str
    product_name: str
    product_serial: str
    board_serial: str


class Nic(_Strict):
    """One RDMA NIC, as ``nvidia-smi topo -m`` lists it (a ConnectX port: ``mlx5_<n>``)."""

    name: str = Field(pattern=r"^mlx5_[0-9]+$")
    pcie_switch: int = Field(ge=0)
    numa_node: int = Field(ge=0)
    # Its port's counters/link_downed: how often its link went down (the `link-flap` fault).
    link_downed: int = Field(default=0, ge=0)


class XidEvent(_Strict):
    """A kernel-log XID event (the lab injects `kernel_line` into the node's journal)."""

    gpu_index: int = Field(ge=0)
    pci_bus_id: str
    xid: int = Field(gt=0)
    kernel_line: str
    fault: Literal["xid", "old-xid", "xid154", "xid63"] = "xid"


class NodeHardware(_Strict):
    """Everything the GPU emulation of one node reports.

    Build it with :meth:`for_node`; write :meth:`to_json` to
    ``/var/lib/gpunode-lab/hardware.json`` in the node.
    """

    schema_version: int = SCHEMA_VERSION
    model: str
    gpu_count_installed: int = Field(ge=0, description="GPUs in the chassis, faults aside.")
    nvswitch: bool
    faults: tuple[FaultName, ...]
    system: System
    gpus: tuple[Gpu, ...]
    xid_events: tuple[XidEvent, ...] = ()
    missing_pci_bus_ids: tuple[str, ...] = ()
    nics: tuple[Nic, ...] = ()
    # The `topo` fault: the indices of the two GPUs whose link reads SYS.
    topo_sys_pair: tuple[int, int] | None = None

    @model_validator(mode="after")
    def _coherent(self) -> NodeHardware:
        indices = [gpu.index for gpu in self.gpus]
        if indices != list(range(len(self.gpus))):
            raise ValueError("gpus must be indexed 0..n-1 in order")
        for attr in ("uuid", "serial", "pci_bus_id"):
            values = [getattr(gpu, attr) for gpu in self.gpus]
            if len(set(values)) != len(values):
                raise ValueError(f"gpus: {attr} must be unique within a node")
        return self

    @classmethod
    def for_node(
        cls,
        model: str,
        count: int,
        nvswitch: bool,
        faults: Iterable[str] = (),
        *,
        seed: str = "gpunode",
        index: int = 0,
        boots: int = 0,
    ) -> NodeHardware:
        """Describe the GPUs of one lab node.

        Args:
            model: A key of ``GPU_MODELS`` (``H100``, ``H200``, ``A100``, ``L40S``, ``B200``,
                ``GB200``), case insensitive.
            count: GPUs in the chassis (1 to the model's ``board_gpus``), before any
                ``missing-gpu`` fault.
            nvswitch: Whether the GPUs sit on an NVSwitch fabric (SXM models only).
            faults: Names from ``FAULTS`` to inject.
            seed: Distinguishes labs: UUIDs and serials derive from ``(seed, index)``.
            index: The node's index in its lab.
            boots: How many times the lab restarted the node (the `remap-rising` fault).

        Returns:
            The node's hardware; equal inputs give an equal result.

        Raises:
            ConfigError: An unknown model or fault, a count out of range, or NVSwitch on a
                PCIe model.
        """
        gpu_model = GPU_MODELS.get(model.upper())
        if gpu_model is None:
            raise ConfigError(
                f"lab GPU model {model!r} is not known; choose one of {', '.join(GPU_MODELS)}"
            )
        if not 1 <= count <= gpu_model.board_gpus:
            raise ConfigError(
                f"lab GPUs per node must be between 1 and {gpu_model.board_gpus}, got {count} "
                f"(a full {gpu_model.key} board has {gpu_model.board_gpus})"
            )
        if nvswitch and gpu_model.nvlinks == 0:
            raise ConfigError(
                f"lab GPU model {gpu_model.key} is a {gpu_model.form_factor} card without "
                "NVLink; it cannot sit on an NVSwitch fabric (set nvswitch off)"
            )
        fault_list = sorted(set(faults))
        for fault in fault_list:
            if fault not in FAULTS:
                raise ConfigError(
                    f"lab fault {fault!r} is not known; choose from {', '.join(FAULTS)}"
                )
        if "missing-gpu" in fault_list and count < 2:
            raise ConfigError("lab fault 'missing-gpu' needs at least 2 GPUs per node")

        gpus = [_make_gpu(gpu_model, i, count, seed, index) for i in range(count)]
        # One NIC per PCIe switch, on the NUMA node of the switch's slots; a GPU that falls
        # off the bus leaves its NIC behind.
        nics = [
            {"name": f"mlx5_{switch}", "pcie_switch": switch, "numa_node": gpus[slot]["numa_node"]}
            for switch, slot in {g["pcie_switch"]: g["index"] for g in reversed(gpus)}.items()
        ]
        nics.sort(key=lambda n: n["pcie_switch"])
        missing: list[str] = []
        if "missing-gpu" in fault_list:
            gone = _pick(seed, index, "missing-gpu", count)
            missing.append(gpus[gone]["pci_bus_id"])
            del gpus[gone]
            # Indices and minor numbers close up, as they do when a GPU falls off the bus.
            for i, gpu in enumerate(gpus):
                gpu["index"] = i
                gpu["minor_number"] = i
        present = len(gpus)
        if "swapped-gpu" in fault_list or "returned-gpu" in fault_list:
            # The repair replaces the board that the `ecc` fault fails, so that a lab can play
            # "fails, is replaced, comes back": `ecc`, then `swapped-gpu`, then `returned-gpu`.
            slot = _pick(seed, index, "ecc", present)
            failed = dict(gpus[slot])
            board = _make_gpu(gpu_model, slot, count, f"{seed}/swapped-gpu", index)
            gpus[slot].update(uuid=board["uuid"], serial=board["serial"])
            if "returned-gpu" in fault_list:
                if present < 2:
                    raise ConfigError("lab fault 'returned-gpu' needs at least 2 GPUs present")
                others = [i for i in range(present) if i != slot]
                back = others[_pick(seed, index, "returned-gpu", len(others))]
                # The board keeps its InfoROM: the lifetime ECC count and the row the repair's
                # reset activated (as the `remapped` fault), nothing since the driver loaded.
                gpus[back].update(
                    uuid=failed["uuid"],
                    serial=failed["serial"],
                    ecc_uncorrected_aggregate=ECC_FAULT_UNCORRECTED,
                    ecc_corrected_aggregate=ECC_FAULT_CORRECTED,
                    remapped_rows_uncorrectable=1,
                )
        if "ecc" in fault_list:
            gpu = gpus[_pick(seed, index, "ecc", present)]
            gpu.update(
                ecc_uncorrected_volatile=ECC_FAULT_UNCORRECTED,
                ecc_uncorrected_aggregate=ECC_FAULT_UNCORRECTED,
                ecc_corrected_volatile=ECC_FAULT_CORRECTED,
                ecc_corrected_aggregate=ECC_FAULT_CORRECTED,
                remapped_rows_uncorrectable=1,
                remapped_rows_pending=True,
            )
        if "remapped" in fault_list:
            # Long ago: the remap was activated by a reset, and the driver has been reloaded
            # since, so nothing counts in the volatile (since the driver loaded) counters.
            gpu = gpus[_pick(seed, index, "remapped", present)]
            gpu.update(
                ecc_uncorrected_aggregate=ECC_FAULT_UNCORRECTED,
                ecc_corrected_aggregate=ECC_FAULT_CORRECTED,
                remapped_rows_uncorrectable=1,
            )
        if "remap-failure" in fault_list:
            gpu = gpus[_pick(seed, index, "remap-failure", present)]
            gpu.update(
                ecc_uncorrected_aggregate=REMAP_FAILURE_ROWS,
                remapped_rows_uncorrectable=REMAP_FAILURE_ROWS,
                remapped_rows_failure=True,
            )
        if "xid154" in fault_list:
            gpus[_pick(seed, index, "xid154", present)]["recovery_action"] = "Reset"
        if "pcie" in fault_list:
            gpu = gpus[_pick(seed, index, "pcie", present)]
            gen = min(DEGRADED_PCIE_GEN, gpu["pcie_gen_max"])
            width = min(DEGRADED_PCIE_WIDTH, gpu["pcie_width_max"])
            gpu.update(
                pcie_gen_current=gen,
                pcie_gen_max=gen,
                pcie_gen_host_max=gen,
                pcie_width_current=width,
                pcie_width_max=width,
            )
        if "dcgm-fail" in fault_list:
            gpus[_pick(seed, index, "dcgm-fail", present)]["dcgm_failing_plugin"] = (
                DCGM_FAILING_PLUGIN
            )
        if "remap-rising" in fault_list:
            # A row remapped for a correctable error is activated at the next reset, so each
            # boot shows one more (NVIDIA GPU Memory Error Management, "Row Remapping").
            gpu = gpus[_pick(seed, index, "remap-rising", present)]
            rows = gpu["remapped_rows_correctable"] + 1 + boots
            gpu.update(
                remapped_rows_correctable=rows,
                ecc_corrected_aggregate=max(gpu["ecc_corrected_aggregate"], rows),
            )
        if "aer" in fault_list:
            gpus[_pick(seed, index, "aer", present)].update(
                aer_nonfatal=AER_FAULT_NONFATAL, aer_correctable=AER_FAULT_CORRECTABLE
            )
        if "link-flap" in fault_list:
            nics[_pick(seed, index, "link-flap", len(nics))]["link_downed"] = LINK_FLAP_DOWNS
        if "pcie-idle" in fault_list:
            for gpu in gpus:
                gpu["pcie_gen_idle"] = IDLE_PCIE_GEN
        sys_pair = _topo_pair(gpus, seed, index) if "topo" in fault_list else None
        events: list[dict[str, Any]] = []
        for fault in ("old-xid", "xid", "xid154", "xid63"):
            if fault not in fault_list:
                continue
            gpu = gpus[_pick(seed, index, fault, present)]
            bus = gpu["pci_bus_id"]
            short_bus = bus[4:14].lower()  # "0000:18:00" as the kernel prints it
            code = KERNEL_LOG_FAULTS[fault]
            text = {"xid154": XID154_MESSAGE, "xid63": "pid=2417, " + XID63_MESSAGE}.get(
                fault, "pid=2417, name=python3, " + XID_MESSAGE.format(index=gpu["index"])
            )
            events.append(
                {
                    "gpu_index": gpu["index"],
                    "pci_bus_id": bus,
                    "xid": code,
                    "fault": fault,
                    "kernel_line": f"NVRM: Xid (PCI:{short_bus}): {code}, {text}",
                }
            )
        try:
            return cls.model_validate(
                {
                    "schema_version": SCHEMA_VERSION,
                    "model": gpu_model.key,
                    "gpu_count_installed": count,
                    "nvswitch": nvswitch,
                    "faults": tuple(fault_list),
                    "system": _system(gpu_model, seed, index),
                    "gpus": tuple(Gpu.model_validate(gpu) for gpu in gpus),
                    "xid_events": tuple(XidEvent.model_validate(e) for e in events),
                    "missing_pci_bus_ids": tuple(missing),
                    "nics": tuple(Nic.model_validate(n) for n in nics),
                    "topo_sys_pair": sys_pair,
                }
            )
        except ValidationError as err:  # a bug in the tables above, not user input
            raise ConfigError(f"lab hardware for {gpu_model.key} is inconsistent: {err}") from err

    @classmethod
    def from_json(cls, text: str) -> NodeHardware:
        """Read a hardware file back (strict: unknown keys and wrong types are errors).

        Raises:
            ConfigError: The text is not a valid hardware file.
        """
        try:
            return cls.model_validate_json(text)
        except ValidationError as err:
            raise ConfigError(f"lab hardware file is invalid: {err}") from err

    def to_json(self) -> str:
        """The file's text: stable key order, indented, newline-terminated."""
        return self.model_dump_json(indent=2) + "\n"

    def kernel_messages(self, faults: Iterable[str] | None = None) -> list[str]:
        """Kernel-log lines the lab injects into the node's journal (identifier ``kernel``),
        all of them or those of the named faults."""
        wanted = None if faults is None else set(faults)
        return [
            event.kernel_line
            for event in self.xid_events
            if wanted is None or event.fault in wanted
        ]


# Linux, Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats: the counters of each
# file, one "<name> <count>" a line, ending with the file's total.
AER_COUNTERS = {
    "aer_dev_correctable": (
        ("Receiver Error", "Bad TLP", "Bad DLLP", "RELAY_NUM Rollover", "Replay Timer Timeout",
         "Advisory Non-Fatal", "Corrected Internal Error", "Header Log Overflow"),
        "TOTAL_ERR_COR",
        "aer_correctable",
    ),
    "aer_dev_nonfatal": (
        ("Undefined", "Data Link Protocol", "Surprise Down Error", "Poisoned TLP",
         "Flow Control Protocol", "Completion Timeout", "Completer Abort",
         "Unexpected Completion", "Receiver Overflow", "Malformed TLP", "ECRC",
         "Unsupported Request", "ACS Violation", "Uncorrectable Internal Error",
         "MC Blocked TLP", "AtomicOp Egress Blocked", "TLP Prefix Blocked Error"),
        "TOTAL_ERR_NONFATAL",
        "aer_nonfatal",
    ),
    "aer_dev_fatal": (
        ("Undefined", "Data Link Protocol", "Surprise Down Error", "Poisoned TLP",
         "Flow Control Protocol", "Completion Timeout", "Completer Abort",
         "Unexpected Completion", "Receiver Overflow", "Malformed TLP", "ECRC",
         "Unsupported Request", "ACS Violation", "Uncorrectable Internal Error",
         "MC Blocked TLP", "AtomicOp Egress Blocked", "TLP Prefix Blocked Error"),
        "TOTAL_ERR_FATAL",
        "aer_fatal",
    ),
}  # fmt: skip


def aer_files(hw: NodeHardware) -> dict[str, str]:
    """Each GPU's AER statistics as the kernel shows them, ``<PCI address>/<file>`` -> text.

    The whole count sits on the first counter of each file (correctable: Receiver Error, a
    failing link's usual first sign; uncorrectable: Completion Timeout)."""
    out = {}
    for gpu in hw.gpus:
        address = gpu.pci_bus_id[4:].lower()  # 00000000:18:00.0 -> 0000:18:00.0, as sysfs
        for filename, (names, total, attr) in AER_COUNTERS.items():
            count = int(getattr(gpu, attr))
            first = "Receiver Error" if filename == "aer_dev_correctable" else "Completion Timeout"
            lines = [f"{name} {count if name == first else 0}" for name in names]
            out[f"{address}/{filename}"] = "\n".join([*lines, f"{total} {count}"]) + "\n"
    return out


# Linux, Documentation/ABI/stable/sysfs-class-infiniband: a port's ``state`` and ``phys_state``
# read "<n>: <name>" (4: ACTIVE; 5: LinkUp), ``link_layer`` InfiniBand or Ethernet, and each of
# its PortCounters is one number under counters/.
RDMA_PORT_UP = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "link_layer": "InfiniBand"}


def rdma_files(hw: NodeHardware) -> dict[str, str]:
    """Each NIC's one RDMA port as the kernel shows it, ``<device>/ports/1/<file>`` -> text: up
    and active (a flap that settled is up again), with its link-down count."""
    out = {}
    for nic in hw.nics:
        port = f"{nic.name}/ports/1"
        out.update({f"{port}/{name}": f"{value}\n" for name, value in RDMA_PORT_UP.items()})
        out[f"{port}/counters/link_downed"] = f"{nic.link_downed}\n"
    return out


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("\0".join(str(p) for p in parts).encode()).digest()


def _pick(seed: str, node: int, fault: str, count: int) -> int:
    """Which GPU a fault hits: deterministic per (lab, node, fault), spread across GPUs."""
    return int.from_bytes(_digest(seed, node, fault)[:4], "big") % count


def _topo_pair(gpus: list[dict[str, Any]], seed: str, node: int) -> tuple[int, int]:
    """The two GPUs of the `topo` fault: on one NUMA node, so that SYS is wrong for them.

    Raises:
        ConfigError: No NUMA node holds two GPUs.
    """
    by_numa: dict[int, list[int]] = {}
    for gpu in gpus:
        by_numa.setdefault(gpu["numa_node"], []).append(gpu["index"])
    groups = [members for _numa, members in sorted(by_numa.items()) if len(members) >= 2]
    if not groups:
        raise ConfigError("lab fault 'topo' needs two GPUs on one NUMA node (3 GPUs or more)")
    members = groups[_pick(seed, node, "topo", len(groups))]
    first = _pick(seed, node, "topo/a", len(members))
    second = (first + 1 + _pick(seed, node, "topo/b", len(members) - 1)) % len(members)
    a, b = sorted((members[first], members[second]))
    return a, b


def _system(model: GpuModel, seed: str, node: int) -> dict[str, str]:
    """A lab node's DMI strings: stable per (lab, node), honest about being emulated."""
    tag = _digest(seed, node, "system").hex().upper()
    return {
        "vendor": "gpunode lab",
        "product_name": f"Emulated {model.key} server",
        "product_serial": f"LAB{tag[:9]}",
        "board_serial": f"LABB{tag[9:18]}",
    }


def _make_gpu(model: GpuModel, i: int, count: int, seed: str, node: int) -> dict[str, Any]:
    digest = _digest(seed, node, model.key, i)
    gpu_uuid = uuid.UUID(bytes=digest[:16])
    # Serials on NVIDIA data-centre boards are 13 decimal digits starting with 1.
    serial = "1" + str(int.from_bytes(digest[16:24], "big") % 10**12).zfill(12)
    # Fewer GPUs than a full board spread over its slots; a full board uses every bus id in the
    # table (for_node caps the count at the board's, and a board lists one bus id per GPU).
    bus = model.bus_ids[i * len(model.bus_ids) // count]
    # Two sockets: the first half of the GPUs on NUMA node 0, the second on node 1; within a
    # socket each pair of slots shares a PCIe switch.
    half = max(1, count // 2)
    numa = 0 if i < half else 1
    switch = (i - numa * half) // 2 + numa * ((half + 1) // 2)
    return {
        "index": i,
        "minor_number": i,
        "name": model.name,
        "brand": model.brand,
        "architecture": model.architecture,
        "uuid": f"GPU-{gpu_uuid}",
        "serial": serial,
        "pci_bus_id": f"00000000:{bus:02X}:00.0",
        "pci_device_id": model.pci_device_id,
        "pci_subsystem_id": model.pci_subsystem_id,
        "vbios_version": model.vbios_version,
        "board_part_number": model.board_part_number,
        "numa_node": numa,
        "cpu_affinity": model.cpu_affinity[numa],
        "pcie_switch": switch,
        "memory_total_mib": model.memory_total_mib,
        "memory_reserved_mib": model.memory_reserved_mib,
        "memory_used_mib": 0,
        "temperature_c": model.idle_temp_c + (i % 3),
        "shutdown_temp_c": model.shutdown_temp_c,
        "slowdown_temp_c": model.slowdown_temp_c,
        "power_draw_w": round(model.power_idle_w + 0.37 * (i % 4), 2),
        "power_limit_w": model.power_limit_w,
        "power_min_limit_w": model.power_min_limit_w,
        "clocks_sm_mhz": model.clocks_idle_sm_mhz,
        "clocks_max_sm_mhz": model.clocks_max_sm_mhz,
        "clocks_mem_mhz": model.clocks_max_mem_mhz,
        "clocks_max_mem_mhz": model.clocks_max_mem_mhz,
        "clocks_max_video_mhz": model.clocks_max_video_mhz,
        "pcie_gen_current": model.pcie_gen_max,
        "pcie_gen_max": model.pcie_gen_max,
        "pcie_width_current": model.pcie_width_max,
        "pcie_width_max": model.pcie_width_max,
        "pcie_gen_gpu_max": model.pcie_gen_max,
        "pcie_gen_host_max": model.pcie_gen_max,
        "pcie_gen_idle": None,
        "compute_cap": model.compute_cap,
        "nvlinks": model.nvlinks,
        "ecc_enabled": True,
        "ecc_corrected_volatile": 0,
        "ecc_corrected_aggregate": 0,
        "ecc_uncorrected_volatile": 0,
        "ecc_uncorrected_aggregate": 0,
        "remapped_rows_correctable": 0,
        "remapped_rows_uncorrectable": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failure": False,
        "row_remap_banks": model.row_remap_banks,
        "throttle_reasons_active": 0,
        "utilization_gpu_pct": 0,
        "utilization_mem_pct": 0,
    }
