"""The host-to-container contract (design.md): what the ranks' container must be given so that
NCCL reaches the fabric, what the ranks see inside it, and the two compared.

On the host (``run``): the RDMA device files (:func:`rdma_device_files`) beside the RDMA
devices of sysfs (``facts.read_rdma``), the GPU device files, and whether GPUDirect RDMA has
its kernel side (:func:`gpudirect_kernel`). The ``docker run`` options that pass them are
:func:`fabric_options`. Inside the container (``framework``, before the all-reduce): the same
files, the locked-memory limit and ``CAP_IPC_LOCK`` (:func:`container_view`), held against the
host's by :func:`compare`, which names every device or option missing. A mismatch is the test
setup's fault (a harness problem), never the node's.
"""

from __future__ import annotations

import os
import re
import resource
import stat
from typing import Any

from toolkit.facts import nvidia

# The verbs devices NCCL's IB transport opens (through libibverbs; rdma_cm through librdmacm):
# /dev/infiniband/uverbs<N>, one per RDMA device, and /dev/infiniband/rdma_cm, one per host
# (Linux Documentation/infiniband/user_verbs.rst, "Device files"; rdma-core
# Documentation/librdmacm.md, "Device files"). A container sees them only when given them
# (`--device`, as NVIDIA's GPUDirect RDMA containers are: NVIDIA GPU Operator docs,
# "GPUDirect RDMA and GPUDirect Storage"; Mellanox/k8s-rdma-shared-dev-plugin passes the same
# two kinds). umad/issm (subnet management) are not what NCCL needs and are not passed.
RDMA_DEV_DIR = "/dev/infiniband"
RDMA_DEV_NAME = re.compile(r"^(uverbs[0-9]+|rdma_cm)$")
# The GPUs' device files (/dev/nvidia<minor>; the NVIDIA Container Toolkit's `--gpus` passes
# one per GPU at the same path, with nvidiactl and nvidia-uvm beside them).
GPU_DEV_DIR = "/dev"
GPU_DEV_NAME = re.compile(r"^nvidia[0-9]+$")
# CAP_IPC_LOCK is capability 14 (linux/capability.h); a process's effective set is the CapEff
# line of /proc/self/status (proc(5)). ib_umem_get pins registered memory against
# RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK (Linux drivers/infiniband/core/umem.c), so
# NCCL's verbs need either the capability or an unlimited memlock limit (`--cap-add=IPC_LOCK`,
# `--ulimit memlock=-1`).
CAP_IPC_LOCK = 14
IPC_LOCK_OPTION = "--cap-add=IPC_LOCK"
MEMLOCK_OPTION = "--ulimit=memlock=-1"
# GPUDirect RDMA's kernel side is one of two (NVIDIA GPU Operator docs, "GPUDirect RDMA and
# GPUDirect Storage": DMA-BUF from the Linux kernel, recommended, or the legacy nvidia-peermem
# module of the GPU driver; DMA-BUF needs the open GPU kernel module and Linux 5.12 or later).
# A loaded module has its directory under /sys/module (sysfs-module ABI).
PEERMEM_MODULE = "/sys/module/nvidia_peermem"
DMABUF_MIN_KERNEL = (5, 12)
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"


def char_devices(directory: str, pattern: re.Pattern[str]) -> list[dict[str, Any]]:
    """The character devices in ``directory`` whose name matches, sorted, each with its
    numbers (``{"path", "major", "minor"}``); none when the folder is absent."""
    out = []
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    for name in names:
        if not pattern.match(name):
            continue
        path = os.path.join(directory, name)
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode):
            out.append(
                {"path": path, "major": os.major(info.st_rdev), "minor": os.minor(info.st_rdev)}
            )
    return out


def rdma_device_files(dev_dir: str = RDMA_DEV_DIR) -> list[dict[str, Any]]:
    """The verbs devices and rdma_cm present (:data:`RDMA_DEV_NAME`)."""
    return char_devices(dev_dir, RDMA_DEV_NAME)


def gpu_device_files(dev_dir: str = GPU_DEV_DIR) -> list[dict[str, Any]]:
    """The GPUs' /dev/nvidia<N> files present."""
    return char_devices(dev_dir, GPU_DEV_NAME)


def kernel_at_least(release: str, wanted: tuple[int, int]) -> bool | None:
    """Whether a kernel release (``6.1.0-18-amd64``) is at least ``wanted``; None if unread."""
    match = re.match(r"^(\d+)\.(\d+)", release)
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2))) >= wanted


def gpudirect_kernel(
    peermem_dir: str = PEERMEM_MODULE,
    kernel_release: str | None = None,
    driver_version_text: str | None = None,
) -> dict[str, Any]:
    """GPUDirect RDMA's kernel side on this host: nvidia_peermem loaded, or DMA-BUF possible
    (the open GPU kernel module on Linux >= 5.12); ``missing`` names what is lacking, None when
    one of the two is there."""
    release = kernel_release if kernel_release is not None else os.uname().release
    if driver_version_text is None:
        try:
            with open(DRIVER_VERSION_FILE, encoding="utf-8", errors="replace") as handle:
                driver_version_text = handle.read()
        except OSError:
            driver_version_text = ""
    open_module = nvidia.parse_proc_driver_version(driver_version_text)[1]
    new_kernel = kernel_at_least(release, DMABUF_MIN_KERNEL)
    peermem = os.path.isdir(peermem_dir)
    dmabuf = bool(open_module) and bool(new_kernel)
    missing = None
    if not peermem and not dmabuf:
        lacks = []
        if not open_module:
            lacks.append(
                "the open GPU kernel module"
                if open_module is False
                else "a loaded NVIDIA driver (no /proc/driver/nvidia/version)"
            )
        if not new_kernel:
            lacks.append(f"Linux >= {DMABUF_MIN_KERNEL[0]}.{DMABUF_MIN_KERNEL[1]} (runs {release})")
        missing = "nvidia_peermem is not loaded, and DMA-BUF needs " + " and ".join(lacks)
    return {
        "nvidia_peermem": peermem,
        "dmabuf": dmabuf,
        "open_module": open_module,
        "kernel": release,
        "missing": missing,
    }


def host_fabric(rdma: dict[str, Any] | None, dev_dir: str = RDMA_DEV_DIR) -> dict[str, Any]:
    """What the host has for the ranks: its RDMA devices (sysfs, ``facts.read_rdma``), their
    device files, the GPUs' device files and GPUDirect RDMA's kernel side."""
    devices = sorted((rdma or {}).get("pci") or {})
    files = rdma_device_files(dev_dir)
    return {
        "rdma_devices": devices,
        "rdma_files": files,
        "gpu_files": gpu_device_files(),
        "gpudirect": gpudirect_kernel() if devices or files else None,
    }


def fabric_options(rdma_files: list[dict[str, Any]] | list[str]) -> list[str]:
    """``docker run`` options that give the ranks the host's RDMA devices: each device file
    at its own path and ``IPC_LOCK``; none on a host without them."""
    paths = [f if isinstance(f, str) else str(f["path"]) for f in rdma_files]
    if not paths:
        return []
    return [IPC_LOCK_OPTION, *(f"--device={path}" for path in paths)]


def has_capability(number: int, status_path: str = "/proc/self/status") -> bool | None:
    """Whether this process's effective set holds capability ``number``; None if unread."""
    try:
        with open(status_path, encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> number & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def container_view(dev_dir: str = RDMA_DEV_DIR) -> dict[str, Any]:
    """What the ranks see inside the container: RDMA and GPU device files, the memlock
    limit (None: unlimited) and whether they hold CAP_IPC_LOCK."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return {
        "rdma_files": rdma_device_files(dev_dir),
        "gpu_files": gpu_device_files(),
        "memlock_bytes": None if soft == resource.RLIM_INFINITY else soft,
        "ipc_lock": has_capability(CAP_IPC_LOCK),
    }


def compare(host: dict[str, Any], seen: dict[str, Any]) -> dict[str, Any]:
    """The host's devices held against what the ranks see: ``ok`` and each thing ``missing``
    (a device file by its path and numbers, or an option), in a line a person can act on."""
    missing: list[str] = []
    inside = {(f["path"], f["major"], f["minor"]) for f in seen.get("rdma_files") or []}
    inside |= {(f["path"], f["major"], f["minor"]) for f in seen.get("gpu_files") or []}
    for kind in ("rdma_files", "gpu_files"):
        for f in host.get(kind) or []:
            if (f["path"], f["major"], f["minor"]) not in inside:
                missing.append(f"{f['path']} ({f['major']}:{f['minor']}, --device)")
    if host.get("rdma_files") and not seen.get("ipc_lock") and seen.get("memlock_bytes"):
        missing.append(
            f"IPC_LOCK ({IPC_LOCK_OPTION}) or an unlimited memlock limit ({MEMLOCK_OPTION}): "
            f"the ranks may lock {seen['memlock_bytes']} bytes"
        )
    return {"ok": not missing, "missing": missing}


def fabric_error(check: dict[str, Any]) -> str:
    """The harness error a mismatch stops the all-reduce with."""
    return "harness: the ranks' container lacks " + "; ".join(check["missing"])
