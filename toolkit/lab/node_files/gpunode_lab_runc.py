#!/usr/bin/python3
"""gpunode lab: the node's runc, a wrapper of the real one that edits each container's OCI
spec as a GPU server's container runtime would, then runs the real runc.

- A container that asks for GPUs (Docker's `--gpus`, which puts NVIDIA's prestart hook in the
  spec) gets the node's NVIDIA device files, as the real hook gives them
  (nvidia-container-runtime-hook -> `nvidia-container-cli configure`: /dev/nvidiactl and a
  /dev/nvidia<minor> per visible GPU, each allowed in the container's device cgroup;
  NVIDIA_VISIBLE_DEVICES is `all`, a list of indices or GPU UUIDs, or `none`/`void`/empty for
  no GPU: NVIDIA Container Toolkit docs, "Specialized Configurations with Docker",
  Environment variables). A GPU the node does not have fails the container's start, as the
  hook does ("nvidia-container-cli: device error: 1: unknown device":
  NVIDIA/nvidia-docker#1283, NVIDIA/enroot#207). The lab's hook stand-in cannot make
  them itself: it cannot enter a starting container's mount namespace (a lab node has no
  CAP_SYS_PTRACE), so the runtime adds them to the spec, as CDI does.
- While the node has the `no-rdma-passthrough` fault (the switch file says "strip") it takes
  /dev/infiniband out of each container's devices: a runtime that drops devices it was asked
  to pass. Docker asked for them (`--device`); the container does not get them.

Installed as /usr/local/sbin/runc, first on containerd's PATH (systemd's default service
PATH). The node's device files are made at boot (toolkit/lab/devices.py). Stdlib only.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys

STATE = "/var/lib/gpunode-lab"
HARDWARE_FILE = f"{STATE}/hardware.json"  # the node's emulated GPUs (toolkit/lab/hardware.py)
PASSTHROUGH_FILE = f"{STATE}/rdma-passthrough"
DEV_DIR = "/dev/infiniband"
GPU_DEV = re.compile(r"^nvidia([0-9]+|ctl)$")
NVIDIA_HOOK = "nvidia-container-runtime-hook"
CHAR_DEVICE = 0o020000


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


class UnknownDevice(Exception):
    """A GPU asked for that the node does not have (its index or UUID)."""


def node_gpus(path: str = HARDWARE_FILE) -> list[dict]:
    """The node's GPUs (index, UUID, minor number), as nvidia-smi lists them."""
    try:
        with open(path, encoding="utf-8") as handle:
            return list(json.load(handle).get("gpus") or [])
    except (OSError, ValueError):
        return []


def visible_gpus(spec: dict, gpus: list[dict]) -> set[int] | None:
    """The minor numbers of the GPUs a container asks for: None for all, else a set, empty
    without NVIDIA's hook in the spec or with NVIDIA_VISIBLE_DEVICES none, void or unset.

    Raises:
        UnknownDevice: An index or UUID that is not one of ``gpus``.
    """
    hooks = (spec.get("hooks") or {}).get("prestart") or []
    if not any(NVIDIA_HOOK in str(h.get("path", "")) for h in hooks):
        return set()
    env = dict(
        item.split("=", 1) for item in (spec.get("process") or {}).get("env") or [] if "=" in item
    )
    value = env.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if value == "all":
        return None
    if value in ("", "none", "void"):
        return set()
    minors = {str(g.get("index")): g.get("minor_number") for g in gpus}
    minors.update({str(g.get("uuid")): g.get("minor_number") for g in gpus})
    wanted: set[int] = set()
    for item in (v.strip() for v in value.split(",")):
        minor = minors.get(item)
        if not isinstance(minor, int):
            raise UnknownDevice(item)
        wanted.add(minor)
    return wanted


def gpu_devices(wanted: set[int] | None, dev: str = "/dev") -> list[dict]:
    """The node's NVIDIA device files a container gets: nvidiactl with any GPU, and each
    wanted /dev/nvidia<minor> (OCI spec ``linux.devices`` entries)."""
    if wanted is not None and not wanted:
        return []
    found = []
    for name in sorted(os.listdir(dev)):
        match = GPU_DEV.match(name)
        if not match:
            continue
        if match.group(1) != "ctl" and wanted is not None and int(match.group(1)) not in wanted:
            continue
        info = os.stat(os.path.join(dev, name))
        if not stat.S_ISCHR(info.st_mode):
            continue
        found.append(
            {
                "path": f"/dev/{name}",
                "type": "c",
                "major": os.major(info.st_rdev),
                "minor": os.minor(info.st_rdev),
                "fileMode": CHAR_DEVICE | 0o666,
                "uid": 0,
                "gid": 0,
            }
        )
    return found if any(d["path"] != "/dev/nvidiactl" for d in found) else []


def edit_spec(bundle: str, strip: bool, dev: str = "/dev", hardware: str = HARDWARE_FILE) -> None:
    """Add the NVIDIA devices a GPU container asks for; take /dev/infiniband out (``strip``).

    Raises:
        UnknownDevice: The container asks for a GPU the node does not have.
    """
    path = os.path.join(bundle, "config.json")
    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    linux = spec.setdefault("linux", {})
    devices = linux.get("devices") or []
    kept = [d for d in devices if not (strip and str(d.get("path", "")).startswith(DEV_DIR + "/"))]
    have = {d.get("path") for d in kept}
    wanted = visible_gpus(spec, node_gpus(hardware))
    added = [d for d in gpu_devices(wanted, dev) if d["path"] not in have]
    if len(kept) == len(devices) and not added:
        return
    linux["devices"] = kept + added
    if added:
        rules = linux.setdefault("resources", {}).setdefault("devices", [])
        rules += [
            {"allow": True, "type": "c", "major": d["major"], "minor": d["minor"], "access": "rwm"}
            for d in added
        ]
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    os.replace(path + ".tmp", path)


def runc(argv: list[str]) -> int:
    real = real_runc()
    if real is None:
        sys.stderr.write("gpunode-lab-runc: no runc found on PATH\n")
        return 1
    bundle = bundle_of(argv)
    if bundle:
        try:
            with open(PASSTHROUGH_FILE, encoding="utf-8") as handle:
                strip = handle.read().strip() == "strip"
        except OSError:
            strip = False
        try:
            edit_spec(bundle, strip)
        except UnknownDevice as err:
            sys.stderr.write(f"nvidia-container-cli: device error: {err}: unknown device\n")
            return 1
    os.execv(real, [real, *argv])
    return 1  # not reached


def main(argv: list[str]) -> int:
    if os.path.basename(sys.argv[0]) == "runc":
        return runc(argv)
    sys.stderr.write("gpunode-lab-runc: run as runc (the lab node's runtime wrapper)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
