"""The GPU products a lab node can emulate: ``GPU_MODELS``.

Each is a board of the GPU catalogue (``toolkit/stack/gpus.yml``: model, name, PCI device id,
memory, each with its source) with the figures only emulation needs (clocks, power,
temperatures, bus numbers ...), their sources next to them. What the lab cannot be is said
where it matters: a GB200 compute tray is a Grace (arm64) system whose GPUs sit one per PCI
domain, and the lab emulates it on this amd64 host with its GPUs on domain 0.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from toolkit.stack import catalog as gpu_catalog
from toolkit.stack.matrix import matrix


class GpuModel(BaseModel):
    """Static facts of one GPU product, as ``nvidia-smi`` reports them."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    key: str
    name: str  # `nvidia-smi --query-gpu=name`
    brand: str
    architecture: str
    form_factor: Literal["SXM", "PCIe"]
    memory_total_mib: int
    memory_reserved_mib: int
    power_limit_w: float
    power_min_limit_w: float
    power_idle_w: float
    clocks_max_sm_mhz: int
    clocks_max_mem_mhz: int
    clocks_idle_sm_mhz: int
    clocks_max_video_mhz: int
    pcie_gen_max: int
    pcie_width_max: int
    compute_cap: str
    nvlinks: int  # NVLinks per GPU: `topo -m` prints NV<n> between GPUs behind an NVSwitch
    pci_device_id: str
    pci_subsystem_id: str
    vbios_version: str
    board_part_number: str
    # PCI bus numbers of a full board's GPUs (8 on an HGX board, 4 on a GB200 compute tray)
    bus_ids: tuple[int, ...]
    idle_temp_c: int
    shutdown_temp_c: int
    slowdown_temp_c: int
    row_remap_banks: int
    source: str
    # GPUs on a full board: an 8-GPU HGX baseboard, a 4-GPU GB200 compute tray (two superchips
    # of one Grace and two Blackwell GPUs each). A lab node has at most this many.
    board_gpus: int = 8
    # The CPUs near each socket's GPUs (`topo -m` "CPU Affinity"): a two-socket x86 host's
    # threads by default, a GB200 tray's two 72-core Graces (sglang issue #11208: 0-71, 72-143).
    cpu_affinity: tuple[str, str] = ("0-55,112-167", "56-111,168-223")
    # What the lab cannot be for this model, which `lab up` says before it builds (None: nothing
    # beyond what every lab node is not).
    lab_gap: str | None = None

    @model_validator(mode="after")
    def _one_bus_per_gpu(self) -> GpuModel:
        if len(self.bus_ids) != self.board_gpus:
            raise ValueError(f"{self.key}: {self.board_gpus} GPUs need as many bus ids")
        return self


def _emulated(model: str, board: str, **emulation: Any) -> GpuModel:
    """A board the lab emulates: what the GPU catalogue (toolkit/stack/gpus.yml) says of it
    (model, name, architecture, compute capability, PCI device id, memory) and the figures
    only emulation needs (``emulation``, with their source)."""
    info = gpu_catalog.gpu(model)
    facts = info.board(board)
    return GpuModel(
        key=info.model,
        name=facts.name,
        # `nvidia-smi -q` "Product Architecture": the architecture's name (matrix.yml).
        architecture=matrix().architectures[info.architecture].name,
        compute_cap=info.compute_capability,
        # `--query-gpu=pci.device_id`: device and vendor id (10DE) as one hex number.
        pci_device_id=f"0x{facts.pci_device_id.upper()}10DE",
        memory_total_mib=facts.memory_total_mib,
        **emulation,
    )


GPU_MODELS: dict[str, GpuModel] = {
    model.key: model
    for model in (
        _emulated(
            "H100",
            "NVIDIA H100 80GB HBM3",
            brand="NVIDIA",
            form_factor="SXM",
            memory_reserved_mib=553,
            power_limit_w=700.0,
            power_min_limit_w=200.0,
            power_idle_w=69.76,
            clocks_max_sm_mhz=1980,
            clocks_max_mem_mhz=2619,
            clocks_idle_sm_mhz=345,
            clocks_max_video_mhz=1545,
            pcie_gen_max=5,
            pcie_width_max=16,
            nvlinks=18,
            pci_subsystem_id="0x16C110DE",
            vbios_version="96.00.99.00.01",
            board_part_number="692-2G520-0200-000",
            bus_ids=(0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB),
            idle_temp_c=33,
            shutdown_temp_c=92,
            slowdown_temp_c=89,
            row_remap_banks=2560,
            source="NVIDIA H100 datasheet; nvidia-smi -q captures of HGX H100 8-GPU servers",
        ),
        _emulated(
            "H200",
            "NVIDIA H200",
            brand="NVIDIA",
            form_factor="SXM",
            memory_reserved_mib=553,
            power_limit_w=700.0,
            power_min_limit_w=200.0,
            power_idle_w=76.21,
            clocks_max_sm_mhz=1980,
            clocks_max_mem_mhz=3201,
            clocks_idle_sm_mhz=345,
            clocks_max_video_mhz=1545,
            pcie_gen_max=5,
            pcie_width_max=16,
            nvlinks=18,
            pci_subsystem_id="0x18BE10DE",
            vbios_version="96.00.A5.00.01",
            board_part_number="692-2G520-0280-000",
            bus_ids=(0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB),
            idle_temp_c=31,
            shutdown_temp_c=92,
            slowdown_temp_c=89,
            row_remap_banks=2560,
            source="NVIDIA H200 datasheet; nvidia-smi captures of HGX H200 8-GPU servers",
        ),
        _emulated(
            "A100",
            "NVIDIA A100-SXM4-80GB",
            brand="NVIDIA",
            form_factor="SXM",
            memory_reserved_mib=0,
            power_limit_w=400.0,
            power_min_limit_w=100.0,
            power_idle_w=61.32,
            clocks_max_sm_mhz=1410,
            clocks_max_mem_mhz=1593,
            clocks_idle_sm_mhz=210,
            clocks_max_video_mhz=1290,
            pcie_gen_max=4,
            pcie_width_max=16,
            nvlinks=12,
            pci_subsystem_id="0x147F10DE",
            vbios_version="92.00.36.00.02",
            board_part_number="692-2G506-0210-002",
            bus_ids=(0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD),
            idle_temp_c=30,
            shutdown_temp_c=92,
            slowdown_temp_c=89,
            row_remap_banks=640,
            source="NVIDIA A100 datasheet; nvidia-smi captures of DGX A100 / HGX A100 8-GPU",
        ),
        _emulated(
            "L40S",
            "NVIDIA L40S",
            brand="NVIDIA",
            form_factor="PCIe",
            memory_reserved_mib=441,
            power_limit_w=350.0,
            power_min_limit_w=100.0,
            power_idle_w=32.45,
            clocks_max_sm_mhz=2520,
            clocks_max_mem_mhz=9001,
            clocks_idle_sm_mhz=210,
            clocks_max_video_mhz=1965,
            pcie_gen_max=4,
            pcie_width_max=16,
            nvlinks=0,
            pci_subsystem_id="0x185110DE",
            vbios_version="95.02.5D.00.01",
            board_part_number="900-2G133-0080-000",
            bus_ids=(0x01, 0x21, 0x41, 0x61, 0x81, 0xA1, 0xC1, 0xE1),
            idle_temp_c=29,
            shutdown_temp_c=95,
            slowdown_temp_c=92,
            row_remap_banks=192,
            source="NVIDIA L40S datasheet (PCIe Gen4 x16, 48 GB GDDR6 with ECC, 350 W)",
        ),
        # HGX B200: 8 GPUs on fifth-generation NVLink through the fourth-generation NVSwitch
        # (NVIDIA's Fabric Manager guide; gpus.yml `nvlsm`). Sourced: name, device id and
        # memory (gpus.yml), 1000 W cap and a 33 C idle (NVIDIA/TensorRT-LLM issue #10278,
        # driver 580.95.05), subsystem 10de:1999 (a public `lspci -nnk` of an HGX B200), the
        # 3996 MHz memory clock (`--query-gpu=clocks.max.mem`, pytorch/ao pull request #4002),
        # 18 NVLinks (`topo -m` prints NV18 between every pair: vllm-project/vllm issue #16336,
        # unslothai/unsloth issue #3872). The rest (SM and video clocks, minimum power, VBIOS,
        # part number, bus numbers, thermal limits, remap banks) are the lab's own values,
        # in the range of the Hopper boards above, not read from a B200.
        _emulated(
            "B200",
            "NVIDIA B200",
            brand="NVIDIA",
            form_factor="SXM",
            memory_reserved_mib=0,
            power_limit_w=1000.0,
            power_min_limit_w=200.0,
            power_idle_w=140.0,
            clocks_max_sm_mhz=1965,
            clocks_max_mem_mhz=3996,
            clocks_idle_sm_mhz=345,
            clocks_max_video_mhz=1590,
            pcie_gen_max=5,
            pcie_width_max=16,
            nvlinks=18,
            pci_subsystem_id="0x199910DE",
            vbios_version="97.00.00.00.01",
            board_part_number="692-2G525-0200-000",
            bus_ids=(0x05, 0x06, 0x18, 0x2A, 0x85, 0x86, 0x98, 0xAA),
            idle_temp_c=33,
            shutdown_temp_c=92,
            slowdown_temp_c=89,
            row_remap_banks=2560,
            source=(
                "gpus.yml (pci.ids, nvidia-smi of 8x B200, driver 580.95.05); "
                "NVIDIA/TensorRT-LLM #10278; pytorch/ao #4002; vllm #16336 (topo -m NV18); "
                "other figures are the lab's own"
            ),
        ),
        # GB200 compute tray: 4 Blackwell GPUs on two Grace CPUs, in a multi-node NVLink domain
        # (NVL72) whose NVSwitches sit in switch trays, managed by IMEX, not by Fabric Manager
        # on the node (matrix.yml `fabric: imex`). Sourced: name, device id (pci.ids 2941
        # "GB100 [HGX GB200]") and memory (gpus.yml), 1200 W cap and a 27 C idle (public
        # nvidia-smi of GB200 trays, driver 580.126.20), 18 NVLinks (`topo -m` NV18 between
        # the tray's 4 GPUs, sgl-project/sglang issue #11208). The rest are the lab's own.
        _emulated(
            "GB200",
            "NVIDIA GB200",
            brand="NVIDIA",
            form_factor="SXM",
            memory_reserved_mib=0,
            power_limit_w=1200.0,
            power_min_limit_w=200.0,
            power_idle_w=156.0,
            clocks_max_sm_mhz=2062,
            clocks_max_mem_mhz=3996,
            clocks_idle_sm_mhz=345,
            clocks_max_video_mhz=1590,
            pcie_gen_max=5,
            pcie_width_max=16,
            nvlinks=18,
            pci_subsystem_id="0x20FE10DE",
            vbios_version="97.00.00.00.02",
            board_part_number="699-2G548-0200-000",
            bus_ids=(0x01, 0x02, 0x03, 0x04),
            idle_temp_c=27,
            shutdown_temp_c=92,
            slowdown_temp_c=89,
            row_remap_banks=2560,
            board_gpus=4,
            cpu_affinity=("0-71", "72-143"),
            lab_gap=(
                "a GB200 tray is a Grace (arm64) system: its packages come from NVIDIA's sbsa "
                "repository and its GPUs sit one per PCI domain (00000008:01:00.0, "
                "00000009:01:00.0 ...); the lab node is an amd64 container that installs the "
                "x86_64 packages of the same names and versions, with its GPUs on domain 0 and "
                "no NVLink switch tray or second node of the IMEX domain behind it"
            ),
            source=(
                "gpus.yml (pci.ids, public nvidia-smi of GB200 trays, driver 580.126.20); "
                "sglang #11208 (topo -m NV18); other figures are the lab's own"
            ),
        ),
    )
}
