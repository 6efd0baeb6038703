"""The faults the lab can inject into a node, and the values each one leaves.

One owner for a fault's name, its description (``gpunode lab fault --help``, ``lab up
--fault``) and the figures it writes: the emulated GPUs (``toolkit.lab.hardware``), the kernel
log (``toolkit.lab.lab``) and the stand-ins read them. Each figure cites where it comes from.
"""

from __future__ import annotations

# Faults the lab can inject. `slow-net` is traffic shaping on the node's interface (done by
# the lab's container code), so it is accepted here but leaves no trace in the GPU file.
FAULTS: dict[str, str] = {
    "missing-gpu": "one GPU is absent from the bus (the node reports count - 1 GPUs)",
    "ecc": "one GPU has uncorrectable ECC errors and a pending row remap",
    "remapped": (
        "one GPU had an uncorrectable ECC error long ago, remapped and reset since: lifetime "
        "counts above 0, nothing since the driver loaded, nothing pending (a node stays ready)"
    ),
    "remap-failure": (
        "one GPU's row remapping failed (a bank out of spare rows): NVIDIA's RMA condition"
    ),
    "xid": "one GPU has an XID event in the kernel log",
    "old-xid": (
        "one GPU has an XID event in the kernel log from before the acceptance window "
        "(logged when the fault is set or at boot; acceptance later must not count it)"
    ),
    "xid154": (
        "one GPU logs XID 154 (its recovery action changed to GPU Reset Required) and "
        "nvidia-smi reports its recovery action as Reset"
    ),
    "pcie": "one GPU's PCIe link trained at Gen3 x8: its root port caps it below the card's max",
    "pcie-idle": "every GPU lowers its PCIe link to Gen1 while idle and runs at its max under load",
    "slow-net": "the node's network interface is shaped to a slow link (real traffic shaping)",
    "slow-data": "reads of the node's data disks are throttled (blkio), as on a failing disk or a "
    "congested network file system",
    "keyring": "NVIDIA's repositories are already there (cuda-keyring's list, a deb822 source)",
    "swapped-gpu": (
        "one GPU board was replaced (a repair of the board the `ecc` fault fails): same slot, "
        "another serial and UUID"
    ),
    "returned-gpu": (
        "the board the `ecc` fault fails, taken out by the `swapped-gpu` repair, is back in "
        "another slot (its serial and UUID, its lifetime ECC count and remapped row), the "
        "replacement staying in its own slot: the same broken part back after an RMA"
    ),
    "runfile-driver": (
        "an NVIDIA driver installed by the .run installer: its files (installer, uninstaller, "
        "log, kernel module, libraries), no package; clearing the fault runs its uninstaller"
    ),
    "topo": (
        "one pair of GPUs on the same NUMA node reads SYS in `nvidia-smi topo -m` (their "
        "NVLinks, if any, down): the path crosses the sockets"
    ),
    "dcgm-fail": (
        "one GPU fails DCGM's memory plugin (`dcgmi diag`: faulty memory elements found), "
        "every other plugin and GPU passes"
    ),
    "remap-rising": (
        "one GPU remaps one more row (a correctable error) at every restart of the node by the "
        "lab (`gpunode lab restart`): its remapped rows rise boot after boot, each run passing"
    ),
    "aer": (
        "one GPU's PCIe link logs uncorrectable non-fatal AER errors (and correctable ones) "
        "from the moment the fault is set: its AER counters move"
    ),
    "link-flap": (
        "one compute NIC's link went down and came back up a few times and settled: its port "
        "is ACTIVE, LinkUp again and its link_downed counter moved"
    ),
    # Listed last to keep the order of the faults above; it belongs with `xid` and `xid154`.
    "xid63": (
        "one GPU logs XID 63 (a row remapping recorded), which NVIDIA's Xid catalog says to "
        "ignore: the XID is shown with its action and the node stays ready"
    ),
    "no-rdma-passthrough": (
        "the node's container runtime (a runc wrapper) strips the RDMA devices (/dev/infiniband) "
        "from each container it was asked to pass them to: the host has them, the ranks do not "
        "see them, and acceptance must call it a harness problem naming them, never the node"
    ),
}
# The `ecc` fault's counts (uncorrectable, corrected); `remapped` and `returned-gpu` keep them as
# the board's lifetime history.
ECC_FAULT_UNCORRECTED = 2
ECC_FAULT_CORRECTED = 14
# The `aer` fault's counts: a link that starts to fail logs both kinds (Linux,
# Documentation/PCI/pcieaer-howto.rst); any uncorrectable one since the last check is enough
# to fail `pcie.aer`.
AER_FAULT_NONFATAL = 2
AER_FAULT_CORRECTABLE = 41
# The `link-flap` fault's link downs on one port: Linux, Documentation/ABI/stable/
# sysfs-class-infiniband, ports/<port>/counters/link_downed, "Total number of times the Port
# Training state machine has failed the link error recovery process and downed the link" (the
# PortCounters LinkDownedCounter of the InfiniBand Architecture Specification). A flap that
# settled leaves the port ACTIVE, LinkUp: the counter is the only trace.
LINK_FLAP_DOWNS = 3
# The plugin the `dcgm-fail` fault fails (the stand-in dcgmi, toolkit/lab/standins/dcgmi.py).
DCGM_FAILING_PLUGIN = "memory"

# The link a `pcie` fault leaves: a real downtrained slot (a riser or retimer problem); the
# root port's maximum is what `pcie.link.gen.hostmax` reports and `gen.max` follows it.
DEGRADED_PCIE_GEN = 3
DEGRADED_PCIE_WIDTH = 8
# The link an idle GPU drops to (`pcie-idle`): nvidia-smi --help-query-gpu says of
# pcie.link.gen.current "These may be reduced when the GPU is not in use", and idle H100/A100
# nodes show Gen1 (2.5 GT/s) at full width in public `nvidia-smi -q`/`lspci -vv` captures.
IDLE_PCIE_GEN = 1

# XID 119: "GSP RPC timeout", one of the XIDs that health checkers (Azure NHC's
# `check_gpu_xid`, NVIDIA's XID catalogue https://docs.nvidia.com/deploy/xid-errors/) treat as
# a node fault. The message is the driver's own wording.
XID_CODE = 119
XID_MESSAGE = (
    "Timeout after 6s of waiting for RPC response from GPU{index} GSP! "
    "Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4)."
)
# XID 154 (`xid154`): NVIDIA's Xid catalog gives its text as "GPU recovery action changed from
# 0x0 (None) to 0x2 (Node Reboot Required)", the values being None, Drain P2P, Drain and
# Reset, GPU Reset Required and Node Reboot Required; nvidia-smi -q then reports "GPU
# Recovery Action : Reset" (public captures of R565+ drivers, tests/data/real/SOURCES.md).
XID154_MESSAGE = "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
# XID 63 (`xid63`): "ECC page retirement or row remapping recording event", immediate action
# IGNORE in NVIDIA's Xid catalog (toolkit/acceptance/xids.yml). The text is the driver's, from a
# public kernel log (stas00/ml-engineering, compute/accelerator/nvidia/debug.md: "NVRM: Xid
# (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to
# activate."). The event alone: the GPU's counters are the `remapped` and `ecc` faults' business.
XID63_MESSAGE = "Row Remapper: New row marked for remapping, reset gpu to activate."
# Faults whose event the lab writes into the node's kernel log, and the XID each one logs.
KERNEL_LOG_FAULTS: dict[str, int] = {
    "xid": XID_CODE,
    "old-xid": XID_CODE,
    "xid154": 154,
    "xid63": 63,
}
# The `remap-failure` fault: a bank with 8 rows remapped for uncorrectable errors is one of
# the row-remapping failure conditions of NVIDIA's RMA policy (NVIDIA GPU Memory Error
# Management, "RMA Policy Thresholds for Row-Remapping", as quoted in awslabs/
# awsome-distributed-ai PR #1190).
REMAP_FAILURE_ROWS = 8
