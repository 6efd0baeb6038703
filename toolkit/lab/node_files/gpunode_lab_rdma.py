#!/usr/bin/python3
"""gpunode lab: the RDMA character devices of a node's emulated compute NICs.

    gpunode-lab-rdma devices   create /dev/infiniband/<name> from the lab's file (at every
                               boot, after gpunode-lab-udev: a node's /dev starts empty)
    runc                       (installed as /usr/local/sbin/runc while the node has the
                               `no-rdma-passthrough` fault) a wrapper of the real runc that
                               strips /dev/infiniband from the devices of each container's
                               OCI spec before runc creates it

The lab writes /var/lib/gpunode-lab/rdma-devices, one device a line, `<name> <major> <minor>`,
with the numbers a real host shows (toolkit/lab/rdma.py, rdma_device_files): the same
files a real node's udev creates, so `docker run --device=/dev/infiniband/uverbs0` really
passes a character device into the ranks' container. The lab's kernel has no RDMA driver
behind them: opening one fails, listing and passing them works, which is what the host-to-
container contract needs (design.md).

The wrapper models a container runtime that drops the devices it was asked to pass: Docker
asked for them (`--device`, in the OCI spec's linux.devices), the container does not get them.
containerd's runc shim finds `runc` on its PATH, where /usr/local/sbin comes first (systemd's
default service PATH). Stdlib only.
"""

from __future__ import annotations

import json
import os
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


def real_runc() -> str | None:
    """The first other `runc` on PATH (this wrapper excluded)."""
    me = os.path.realpath(sys.argv[0])
    for folder in os.environ.get("PATH", "/usr/sbin:/usr/bin").split(os.pathsep):
        candidate = os.path.join(folder, "runc")
        if os.path.realpath(candidate) != me and os.access(candidate, os.X_OK):
            return candidate
    return None


def bundle_of(argv: list[str]) -> str | None:
    """The bundle of a `runc create` or `runc run` (``--bundle DIR``, ``-b DIR``), else None."""
    if not {"create", "run"} & set(argv):
        return None
    for i, arg in enumerate(argv):
        if arg in ("--bundle", "-b") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--bundle="):
            return arg.split("=", 1)[1]
    return None


def strip_spec(bundle: str) -> None:
    """Take the /dev/infiniband devices out of the bundle's OCI spec."""
    path = os.path.join(bundle, "config.json")
    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    devices = spec.get("linux", {}).get("devices") or []
    kept = [d for d in devices if not str(d.get("path", "")).startswith(DEV_DIR + "/")]
    if len(kept) == len(devices):
        return
    spec["linux"]["devices"] = kept
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    os.replace(path + ".tmp", path)


def runc(argv: list[str]) -> int:
    real = real_runc()
    if real is None:
        sys.stderr.write("gpunode-lab-rdma: no runc found on PATH\n")
        return 1
    bundle = bundle_of(argv)
    if bundle:
        try:
            with open(PASSTHROUGH_FILE, encoding="utf-8") as handle:
                on = handle.read().strip() == "strip"
        except OSError:
            on = False
        if on:
            strip_spec(bundle)
    os.execv(real, [real, *argv])
    return 1  # not reached


def main(argv: list[str]) -> int:
    if os.path.basename(sys.argv[0]) == "runc":
        return runc(argv)
    command = argv[0] if argv else "devices"
    if command == "devices":
        return devices()
    sys.stderr.write("usage: gpunode-lab-rdma [devices]   (as runc: the fault's wrapper)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
