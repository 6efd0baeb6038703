"""``nvidia-smi topo -m``: the link matrix of the lab's board, the Legend and the NIC Legend."""

from __future__ import annotations

from typing import Any

from .state import Gpu, load_hardware

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
