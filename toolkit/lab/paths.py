"""Where the lab keeps its state and its caches on the control machine.

Layout under the lab home (``$GPUNODE_LAB_HOME``, default ``~/.cache/gpunode/lab``)::

    <home>/<name>/          one lab: state.json, SSH key, known_hosts, host keys, disk images
    <home>/_cache/          shared by every lab: the node-image build cache (downloaded .debs),
                            the package repository build and the wheels served to nodes

Lab names never start with ``_`` (see ``toolkit.lab.spec``), so they cannot collide with the
cache directory. ``gpunode lab down`` removes ``<home>/<name>/``; the cache is kept, like the
node image, because every lab reuses it.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "GPUNODE_LAB_HOME"
LABEL = "gpunode.lab"  # label key on every container and network a lab creates: value = lab name
IMAGE_LABEL = "gpunode.lab.image"  # label key on node images: value = recipe hash
NODE_STATE_DIR = "/var/lib/gpunode-lab"  # inside each node: files the lab writes
HARDWARE_FILE = f"{NODE_STATE_DIR}/hardware.json"
# DCGM's command-line tool, where NVIDIA's datacenter-gpu-manager packages put it.
DCGMI = "/usr/bin/dcgmi"
# The node's DMI strings, in /sys/class/dmi/id's shape (one file per attribute, the value and a
# newline: Linux drivers/firmware/dmi-id.c). A container sees the host's sysfs, so the lab
# inventory points `gpunode_dmi_dir` here.
DMI_DIR = f"{NODE_STATE_DIR}/dmi"
# The emulated GPUs' PCIe AER statistics, shaped as /sys/bus/pci/devices (`gpunode_pci_dir`).
PCI_DIR = f"{NODE_STATE_DIR}/pci"
# The emulated compute NICs' RDMA ports (state and counters), shaped as /sys/class/infiniband
# (`gpunode_rdma_dir`).
RDMA_DIR = f"{NODE_STATE_DIR}/infiniband"
# Where a node shows the kernel modules its stand-in modprobe loaded (toolkit/lab/kmods.py;
# `fabric_manager_module_dir`): a tmpfs, so they go with the node's boot.
MODULE_DIR = "/run/gpunode-lab/module"


def labs_root() -> Path:
    """The directory that holds every lab and the shared cache."""
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return Path.home() / ".cache" / "gpunode" / "lab"


def lab_dir(name: str) -> Path:
    """The state directory of one lab."""
    return labs_root() / name


def cache_dir() -> Path:
    """The cache shared by all labs (node image debs, repository, wheels), created if missing.

    Everything below it is written by root-only builds (debootstrap, the repository's key), so
    it is created private to its owner.
    """
    path = labs_root() / "_cache"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path
