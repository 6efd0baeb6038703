#!/usr/bin/python3
"""gpunode lab: the node's runc, a wrapper of the real one that edits each container's OCI
spec as a GPU server's container runtime would, then runs the real runc.

- A container that asks for GPUs (Docker's `--gpus`, which puts NVIDIA's prestart hook in the
  spec) gets the node's NVIDIA device files, as the real hook gives them
  (nvidia-container-runtime-hook -> `nvidia-container-cli configure`: /dev/nvidiactl and a
  /dev/nvidia<minor> per visible GPU, NVIDIA_VISIBLE_DEVICES `all` or a list of indices, each
  allowed in the container's device cgroup; NVIDIA Container Toolkit docs, "Specialized
  Configurations with Docker", Environment variables). The lab's hook stand-in cannot make
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


def visible_gpus(spec: dict) -> set[int] | None:
    """The GPU minors a container asks for: None for all, a set of indices, or an empty set
    (no NVIDIA hook in the spec, or NVIDIA_VISIBLE_DEVICES none, void or unset)."""
    hooks = (spec.get("hooks") or {}).get("prestart") or []
    if not any(NVIDIA_HOOK in str(h.get("path", "")) for h in hooks):
        return set()
    env = dict(
        item.split("=", 1) for item in (spec.get("process") or {}).get("env") or [] if "=" in item
    )
    value = env.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if value == "all":
        return None
    return {int(v) for v in value.split(",") if v.strip().isdigit()}


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


def edit_spec(bundle: str, strip: bool, dev: str = "/dev") -> None:
    """Add the NVIDIA devices a GPU container asks for; take /dev/infiniband out (``strip``)."""
    path = os.path.join(bundle, "config.json")
    with open(path, encoding="utf-8") as handle:
        spec = json.load(handle)
    linux = spec.setdefault("linux", {})
    devices = linux.get("devices") or []
    kept = [d for d in devices if not (strip and str(d.get("path", "")).startswith(DEV_DIR + "/"))]
    have = {d.get("path") for d in kept}
    added = [d for d in gpu_devices(visible_gpus(spec), dev) if d["path"] not in have]
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
        edit_spec(bundle, strip)
    os.execv(real, [real, *argv])
    return 1  # not reached


def main(argv: list[str]) -> int:
    if os.path.basename(sys.argv[0]) == "runc":
        return runc(argv)
    sys.stderr.write("gpunode-lab-runc: run as runc (the lab node's runtime wrapper)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
