"""The character devices of a lab node's emulated hardware: the GPUs' ``/dev/nvidia<minor>``
and ``/dev/nvidiactl``, and the compute NICs' ``/dev/infiniband/uverbs<n>`` and ``rdma_cm``.

A real node's NVIDIA driver gives every GPU it found a character device of major 195 with the
GPU's minor number, and the control device ``/dev/nvidiactl`` minor 255 (NVIDIA's CUDA
Installation Guide for Linux, "Device Node Verification": ``mknod -m 666 /dev/nvidia$i c 195
$i`` for each GPU and ``mknod -m 666 /dev/nvidiactl c 195 255``; nvidia-modprobe(1) makes the
same files when the driver's user-space components ask for them). Minors close up when a GPU
falls off the bus, as the hardware file's ``minor_number`` does (``missing-gpu``).

Slurm's GRES plugin needs these files on the node: slurmd stats every ``File=`` of gres.conf,
waits 20 s for one that is missing and then exits (SchedMD/slurm src/common/gres.c,
``_my_stat``: "fatal: can't stat gres.conf file"). The lab writes the list of its node's
devices (:data:`LIST_FILE`) with the other hardware files; a oneshot unit that runs at every
boot (:data:`UNIT`), before slurmd, creates them in the node's ``/dev`` (a tmpfs that starts
empty when the container starts). The node may create character devices of major 195 and never
open them (``nodes.DEVICE_RULES``): nothing in a lab node has a driver behind them.
"""

from __future__ import annotations

from importlib import resources

from docker.models.containers import Container

from toolkit.lab import nodes, paths
from toolkit.lab.hardware import NodeHardware

NVIDIA_MAJOR = 195  # NVIDIA's character devices (CUDA Installation Guide, Device Node Verification)
NVIDIACTL_MINOR = 255
DEVICE_MODE = 0o666  # mknod -m 666 in NVIDIA's script; crw-rw-rw- for /dev/infiniband too
LIST_FILE = f"{paths.NODE_STATE_DIR}/char-devices"
SCRIPT_PATH = "/usr/local/sbin/gpunode-lab-devices"
UNIT_NAME = "gpunode-lab-devices.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
UNIT = """\
[Unit]
Description=gpunode lab: device files of the emulated GPUs (as the NVIDIA driver makes them)
DefaultDependencies=no
After=systemd-tmpfiles-setup-dev.service
Before=sysinit.target slurmd.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/gpunode-lab-devices

[Install]
WantedBy=sysinit.target
"""


# The verbs devices of the compute NICs, /dev/infiniband's character devices (the `--device`s a
# container needs for NCCL's IB transport). ib_uverbs registers major 231 (IB_UVERBS_MAJOR) and
# numbers its devices from minor 192 (IB_UVERBS_BASE_MINOR), one per RDMA device in probe order
# (Linux drivers/infiniband/core/uverbs_main.c); rdma_cm is a misc device (major 10) with a
# dynamic minor (drivers/infiniband/core/ucma.c, MISC_DYNAMIC_MINOR), 58 on a real host with
# four ConnectX ports (`ls -l /dev/infiniband/{rdma_cm,uverbs*}`: rdma_cm 10, 58; uverbs0-3
# 231, 192-195; all crw-rw-rw-, rapidsai/ucx-py docs/source/install.rst; another real host
# shows 10, 57, Mellanox/k8s-rdma-shared-dev-plugin issue #64). They give the host-to-container
# contract (design.md) real device files to pass on every lab acceptance run; the lab's kernel
# has no RDMA driver behind them, so opening one fails and listing or passing one works.
RDMA_DEV_DIR = "/dev/infiniband"
UVERBS_MAJOR = 231
UVERBS_BASE_MINOR = 192
RDMA_CM_MAJOR = 10
RDMA_CM_MINOR = 58


def gpu_device_paths(count: int) -> str:
    """gres.conf's ``File=`` for ``count`` GPUs of minors 0..count-1 (a Slurm hostlist
    expression, gres.conf(5)). Pure."""
    if count < 1:
        raise ValueError("a node with GPUs has at least one")
    return "/dev/nvidia0" if count == 1 else f"/dev/nvidia[0-{count - 1}]"


def gpu_devices(hw: NodeHardware) -> list[tuple[str, int, int]]:
    """The node's NVIDIA character devices: (path, major, minor), one per GPU on the bus and
    the control device; none for a node without GPUs. Pure."""
    if not hw.gpus:
        return []
    devices = [(f"/dev/nvidia{g.minor_number}", NVIDIA_MAJOR, g.minor_number) for g in hw.gpus]
    return [*devices, ("/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR)]


def rdma_devices(hw: NodeHardware) -> list[tuple[str, int, int]]:
    """The node's /dev/infiniband character devices: (path, major, minor), one ``uverbs<n>``
    per compute NIC and ``rdma_cm``; none on a node without RDMA NICs. Pure."""
    if not hw.nics:
        return []
    verbs = [
        (f"{RDMA_DEV_DIR}/uverbs{i}", UVERBS_MAJOR, UVERBS_BASE_MINOR + i)
        for i in range(len(hw.nics))
    ]
    return [*verbs, (f"{RDMA_DEV_DIR}/rdma_cm", RDMA_CM_MAJOR, RDMA_CM_MINOR)]


def render_list(hw: NodeHardware) -> str:
    """The :data:`LIST_FILE` the boot unit reads: ``<path> <major> <minor> <octal mode>`` a
    line. Pure."""
    return "".join(
        f"{path} {major} {minor} {DEVICE_MODE:o}\n"
        for path, major, minor in [*gpu_devices(hw), *rdma_devices(hw)]
    )


def script() -> bytes:
    """The boot unit's script (node_files/gpunode-lab-devices.sh)."""
    node_files = resources.files("toolkit.lab").joinpath("node_files")
    return node_files.joinpath("gpunode-lab-devices.sh").read_bytes()


def node_files(hw: NodeHardware) -> dict[str, nodes.NodeFile]:
    """The device list and the boot unit that makes its files (a changed list, a missing GPU
    say, shows at the next boot, as a real driver's files do)."""
    return {
        LIST_FILE: nodes.NodeFile(render_list(hw).encode()),
        SCRIPT_PATH: nodes.NodeFile(script(), 0o755),
        UNIT_PATH: nodes.NodeFile(UNIT.encode()),
    }


def make(container: Container, hw: NodeHardware) -> None:
    """Enable the device unit and make the device files now (later boots run the unit); a
    node up from before the unit existed gets it here."""
    nodes.put_files(container, node_files(hw))
    nodes.exec_in(container, ["systemctl", "daemon-reload"])
    nodes.exec_in(container, ["systemctl", "enable", "--quiet", UNIT_NAME])
    nodes.exec_in(container, ["systemctl", "restart", UNIT_NAME])
