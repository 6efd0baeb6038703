"""NVIDIA devices on the PCI bus, from ``lspci -nn``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from toolkit.facts.probe import Fact

NVIDIA_VENDOR = "10de"
# PCI class codes (PCI SIG class code list): VGA 0300, 3D controller 0302, other bridge 0680.
GPU_CLASSES = {"0300", "0302"}
NVSWITCH_CLASS = "0680"


@dataclass(frozen=True)
class PciDevice:
    """One NVIDIA PCI device from ``lspci -nn``."""

    slot: str
    pci_class: str
    device_id: str
    description: str


_LSPCI = re.compile(
    r"^(?P<slot>\S+)\s+(?P<cls_name>[^\[]*)\[(?P<cls>[0-9a-f]{4})\]:\s+(?P<desc>.*?)"
    r"\s*\[(?P<vendor>[0-9a-f]{4}):(?P<device>[0-9a-f]{4})\]",
    re.IGNORECASE,
)


def parse_lspci(text: str) -> list[PciDevice]:
    """NVIDIA devices in ``lspci -nn`` output (other vendors are left out)."""
    devices = []
    for line in text.splitlines():
        match = _LSPCI.match(line.strip())
        if match and match["vendor"].lower() == NVIDIA_VENDOR:
            devices.append(
                PciDevice(
                    slot=match["slot"],
                    pci_class=match["cls"].lower(),
                    device_id=match["device"].lower(),
                    description=match["desc"].strip(),
                )
            )
    return devices


def lspci_gpus(devices: Iterable[PciDevice]) -> list[PciDevice]:
    """The GPUs among NVIDIA PCI devices (display and 3D controllers)."""
    return [d for d in devices if d.pci_class in GPU_CLASSES]


def lspci_nvswitches(devices: Iterable[PciDevice]) -> list[PciDevice]:
    """The NVSwitches among NVIDIA PCI devices (NVIDIA bridges)."""
    return [d for d in devices if d.pci_class == NVSWITCH_CLASS]


# None when lspci failed or is not installed (the GPU count is then unknown, not zero).
LSPCI = Fact("lspci", ("lspci", "-nn"), lambda rc, text: parse_lspci(text) if rc == 0 else None)
