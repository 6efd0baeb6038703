#!/usr/bin/python3
"""gpunode lab: the RDMA character devices of a node's emulated compute NICs.

    gpunode-lab-rdma devices   create /dev/infiniband/<name> from the lab's file (at every
                               boot, after gpunode-lab-udev: a node's /dev starts empty)
    gpunode-lab-rdma strip     the `no-rdma-passthrough` fault, as an OCI prestart hook step
                               (the container's state on stdin): remove /dev/infiniband from
                               the container that runc has just prepared

The lab writes /var/lib/gpunode-lab/rdma-devices, one device a line, `<name> <major> <minor>`,
with the numbers a real host shows (toolkit/lab/hardware.py, rdma_device_files): the same
files a real node's udev creates, so `docker run --device=/dev/infiniband/uverbs0` really
passes a character device into the ranks' container. The lab's kernel has no RDMA driver
behind them: opening one fails, listing and passing them works, which is what the host-to-
container contract needs (design.md).

`strip` models a runtime that drops the devices it was asked to pass: at prestart runc has
created the container's /dev (its own tmpfs, in the container's mount namespace) and not yet
pivoted into the root file system, as nvidia-container-cli sees it when it mounts the
driver's files in. Stdlib only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

STATE = "/var/lib/gpunode-lab"
DEVICES_FILE = f"{STATE}/rdma-devices"
PASSTHROUGH_FILE = f"{STATE}/rdma-passthrough"
DEV_DIR = "/dev/infiniband"
MODE = 0o666  # crw-rw-rw-, as the verbs devices and rdma_cm are on a real host


def devices() -> int:
    try:
        with open(DEVICES_FILE, encoding="utf-8") as handle:
            lines = [line.split() for line in handle if line.strip() and line[0] != "#"]
    except OSError:
        return 0
    if lines:
        os.makedirs(DEV_DIR, exist_ok=True)
    for name, major, minor in lines:
        path = os.path.join(DEV_DIR, name)
        if os.path.lexists(path):
            os.unlink(path)
        os.mknod(path, MODE | 0o020000, os.makedev(int(major), int(minor)))
        os.chmod(path, MODE)  # mknod applies the umask
    return 0


def strip() -> int:
    state = json.load(sys.stdin)
    try:
        with open(PASSTHROUGH_FILE, encoding="utf-8") as handle:
            if handle.read().strip() != "strip":
                return 0
    except OSError:
        return 0
    bundle = str(state.get("bundle") or "")
    with open(os.path.join(bundle, "config.json"), encoding="utf-8") as handle:
        root = str(json.load(handle)["root"]["path"])
    rootfs = root if os.path.isabs(root) else os.path.join(bundle, root)
    target = os.path.join(rootfs, DEV_DIR.lstrip("/"))
    pid = str(int(state["pid"]))
    return subprocess.run(["nsenter", "-t", pid, "-m", "--", "rm", "-rf", target]).returncode


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "devices"
    if command == "devices":
        return devices()
    if command == "strip":
        return strip()
    sys.stderr.write("usage: gpunode-lab-rdma [devices|strip]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
