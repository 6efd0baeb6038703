"""The emulated compute NICs' /dev/infiniband character devices, beside their sysfs ports
(``hardware.rdma_files``): what the ranks' container is given on a lab node, with the real
device numbers, so the host-to-container contract (design.md) is exercised on every lab
acceptance run. The node creates them at boot (``node_files/gpunode_lab_rdma.py``).
"""

from __future__ import annotations

from toolkit.lab.hardware import NodeHardware

# The verbs devices of the compute NICs, /dev/infiniband's character devices (the `--device`s a
# container needs for NCCL's IB transport). ib_uverbs registers major 231 (IB_UVERBS_MAJOR) and
# numbers its devices from minor 192 (IB_UVERBS_BASE_MINOR), one per RDMA device in probe order
# (Linux drivers/infiniband/core/uverbs_main.c); rdma_cm is a misc device (major 10) with a
# dynamic minor (drivers/infiniband/core/ucma.c, MISC_DYNAMIC_MINOR), 58 on a real host with
# four ConnectX ports (`ls -l /dev/infiniband/{rdma_cm,uverbs*}`: rdma_cm 10, 58; uverbs0-3
# 231, 192-195; all crw-rw-rw-, rapidsai/ucx-py docs/source/install.rst; another real host
# shows 10, 57, Mellanox/k8s-rdma-shared-dev-plugin issue #64).
UVERBS_MAJOR = 231
UVERBS_BASE_MINOR = 192
RDMA_CM_MAJOR = 10
RDMA_CM_MINOR = 58


def rdma_device_files(hw: NodeHardware) -> dict[str, tuple[int, int]]:
    """The node's /dev/infiniband character devices, name -> (major, minor): one
    ``uverbs<n>`` per NIC and ``rdma_cm``; none on a node without RDMA NICs."""
    if not hw.nics:
        return {}
    out = {f"uverbs{i}": (UVERBS_MAJOR, UVERBS_BASE_MINOR + i) for i in range(len(hw.nics))}
    out["rdma_cm"] = (RDMA_CM_MAJOR, RDMA_CM_MINOR)
    return out
