#!/usr/bin/python3
"""gpunode lab: the `no-rdma-passthrough` fault's wrapper of the real runc.

Installed as /usr/local/sbin/runc while a node has the fault, it strips /dev/infiniband from
the devices of each container's OCI spec before the real runc creates the container. The
node itself keeps the devices (toolkit/lab/devices.py makes them at boot): this models a
container runtime that drops the devices it was asked to pass. Docker asked for them
(`--device`, in the OCI spec's linux.devices); the container does not get them.
containerd's runc shim finds `runc` on its PATH, where /usr/local/sbin comes first (systemd's
default service PATH). The switch is /var/lib/gpunode-lab/rdma-passthrough ("strip" or
empty). Stdlib only.
"""

from __future__ import annotations

import json
import os
import sys

STATE = "/var/lib/gpunode-lab"
PASSTHROUGH_FILE = f"{STATE}/rdma-passthrough"
DEV_DIR = "/dev/infiniband"


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
    sys.stderr.write("gpunode-lab-rdma: run as runc (the no-rdma-passthrough fault's wrapper)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
