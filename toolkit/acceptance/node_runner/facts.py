"""The node's facts, read without the framework: GPU inventory and health (nvidia-smi), driver
and package versions, XID events from the kernel log, the machine's identity, the node's state
file, the GPU topology and the DCGM diagnostic. Raw facts only: the controller judges them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import stat
import time
from datetime import datetime, timezone
from typing import Any

from toolkit.facts import dpkg, nvidia

from .common import sh

DEFAULT_KERNEL_LOG_COMMAND = "journalctl -k -b -o short-monotonic --no-pager"


# The most of `nvidia-smi -q` kept in the result: an 8-GPU H100 report is about 80 KB
# (tests/data/real/nvidia-smi-q.h100-sxm-8.565.57.01.txt); a longer one is cut, never dropped.
SMI_Q_MAX_CHARS = 1 << 20


XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[^)]*)\): (?P<xid>\d+)(?:, (?P<rest>.*))?")


# Kernel log time stamps: seconds since boot (`journalctl -o short-monotonic`, dmesg) or a
# wall-clock time (`journalctl -o short-iso`).
MONOTONIC_RE = re.compile(r"^\s*\[\s*(?P<s>\d+\.\d+)\]")


BOOT_MARKER_RE = re.compile(r"^-- (?:Boot [0-9a-f]{32}|Reboot) --\s*$")


ISO_RE = re.compile(r"^\s*(?P<t>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)")


# The system's identity (Linux drivers/firmware/dmi-id.c: one value and a newline per file;
# the serials are readable by root only). The inventory may name another folder
# (`gpunode_dmi_dir`, passed in the spec as `dmi_dir`).
DMI_DIR = "/sys/class/dmi/id"


DMI_FIELDS = ("sys_vendor", "product_name", "product_serial", "board_serial")


# lsblk(8) with -J: model and serial come from udev's database (ID_MODEL, ID_SERIAL_SHORT).
LSBLK_IDENTITY = ["lsblk", "-J", "-d", "-o", "NAME,MAJ:MIN,TYPE,MODEL,SERIAL"]


NET_DIR = "/sys/class/net"


ARPHRD_LOOPBACK = "772"  # /sys/class/net/<if>/type of a loopback (linux/if_arp.h)


def query_gpus(smi: str) -> dict[str, Any]:
    """GPU inventory and health from nvidia-smi."""
    out: dict[str, Any] = {
        "ok": False,
        "error": None,
        "count": 0,
        "list": [],
        "unsupported_fields": [],
        "memory_error": None,
    }
    rc, stdout, stderr = sh(nvidia.query_gpu(smi, nvidia.INVENTORY_FIELDS))
    if rc != 0:
        out["error"] = (stdout + stderr).strip() or f"nvidia-smi exited {rc}"
        return out
    gpus = nvidia.parse_smi_csv(stdout, nvidia.INVENTORY_FIELDS)
    health: dict[str, dict[str, str | None]] = {}
    fields = ("pci.bus_id", *nvidia.HEALTH_FIELDS)
    rc, stdout, _ = sh(nvidia.query_gpu(smi, fields))
    if rc == 0:
        for row in nvidia.parse_smi_csv(stdout, fields):
            health[str(row["pci.bus_id"])] = row
    else:
        # One unknown field fails the whole query: read the fields one at a time.
        for field in nvidia.HEALTH_FIELDS:
            value_by_bus = None
            for name in (field, nvidia.FIELD_ALIASES.get(field)):
                if name is None:
                    continue
                rc, stdout, _ = sh(nvidia.query_gpu(smi, ("pci.bus_id", name)))
                if rc == 0:
                    value_by_bus = nvidia.parse_smi_csv(stdout, ("pci.bus_id", field))
                    break
            if value_by_bus is None:
                out["unsupported_fields"].append(field)
                continue
            for row in value_by_bus:
                health.setdefault(str(row["pci.bus_id"]), {})[field] = row[field]
    listed: list[dict[str, Any]] = []
    for gpu in gpus:
        h = health.get(str(gpu["pci.bus_id"]), {})
        listed.append(
            {
                "index": nvidia.smi_int(gpu["index"]),
                "name": gpu["name"],
                "uuid": gpu["uuid"],
                "bus_id": gpu["pci.bus_id"],
                "driver_version": gpu["driver_version"],
                "serial": gpu["serial"],
                "vbios_version": gpu["vbios_version"],
                "pcie_gen_current": nvidia.smi_int(h.get("pcie.link.gen.current")),
                "pcie_gen_max": nvidia.smi_int(h.get("pcie.link.gen.max")),
                "pcie_width_current": nvidia.smi_int(h.get("pcie.link.width.current")),
                "pcie_width_max": nvidia.smi_int(h.get("pcie.link.width.max")),
                "pcie_gen_gpu_max": nvidia.smi_int(h.get("pcie.link.gen.gpumax")),
                "pcie_gen_host_max": nvidia.smi_int(h.get("pcie.link.gen.hostmax")),
                "throttle_active": nvidia.smi_int(h.get("clocks_throttle_reasons.active")),
            }
        )
    # The memory-error counters (toolkit.facts.nvidia.memory_health; missing ones stay None).
    rc, stdout, stderr = sh(nvidia.query_report(smi), timeout=120)
    memory = nvidia.parse_smi_q(stdout) if rc == 0 else {}
    # The report itself, as the GPU gave it at acceptance: an RMA asks for it as it was when
    # the failure was seen (toolkit/report/evidence.py), not after a reset cleared its
    # volatile counters or with the node down.
    out["smi_q"] = stdout[:SMI_Q_MAX_CHARS] if rc == 0 else None
    if rc != 0:
        out["memory_error"] = (stdout + stderr).strip()[-300:] or f"nvidia-smi -q exited {rc}"
    for gpu in listed:
        gpu.update(nvidia.memory_health(memory.get(str(gpu["bus_id"]), {})))
    out.update(ok=True, count=len(listed), list=listed)
    return out


def query_versions(smi: str | None, packages: list[str]) -> dict[str, Any]:
    """Loaded and installed driver versions and installed package versions."""
    out: dict[str, Any] = {
        "driver_loaded": None,
        "driver_proc": None,
        "nvml_error": None,
        "nvml_library": None,
        "packages": {},
    }
    if smi:
        rc, stdout, stderr = sh(nvidia.query_driver(smi))
        loaded = nvidia.parse_nvidia_smi_driver(stdout, stderr, rc)
        out["driver_loaded"] = loaded.version
        if rc != 0:
            out["nvml_error"] = (stdout + stderr).strip() or f"nvidia-smi exited {rc}"
            out["nvml_library"] = loaded.library_version
        elif loaded.version is None:
            out["nvml_error"] = loaded.detail  # no GPU, or GPUs on different drivers
    proc = read_text("/proc/driver/nvidia/version")
    if proc is not None:
        out["driver_proc"] = nvidia.parse_proc_driver_version(proc)[0]
    if packages:
        _rc, stdout, _ = sh(["dpkg-query", "-W", f"-f={dpkg.DPKG_FORMAT}", *packages])
        installed = dpkg.parse_dpkg_query(stdout)
        out["packages"] = {name: installed.get(name) for name in packages}
    return out


def read_kernel_log(command: str) -> dict[str, Any]:
    """XID events from the kernel log (the inventory's command, then dmesg), with their times
    and boots."""
    out: dict[str, Any] = {
        "command": command,
        "ok": False,
        "error": None,
        "boot_time": None,
        "xid_events": [],
    }
    rc, stdout, stderr = sh(command, timeout=60)
    if rc != 0:
        first_error = (stderr or stdout).strip()[-300:] or f"exit {rc}"
        rc, stdout, stderr = sh(["dmesg"], timeout=60)
        if rc != 0:
            out["error"] = f"{command}: {first_error}; dmesg: {(stderr or stdout).strip()[-300:]}"
            return out
        out["command"] = "dmesg"
    boot = boot_time()
    out["ok"] = True
    out["boot_time"] = iso(boot) if boot is not None else None
    out["xid_events"] = parse_xids(stdout, boot, this_boot_only(out["command"]))
    return out


def this_boot_only(command: str) -> bool:
    """Whether a kernel-log command prints this boot's messages only.

    ``dmesg`` reads the kernel's ring buffer, which starts empty at every boot. journalctl(1):
    ``-b``/``--boot`` without an argument (or ``0``) is the current boot, and ``-k``/``--dmesg``
    "implies -b"; another boot (``-b -1``, ``-b all``, a boot id) or other journal files
    (``--file``, ``-D``, ``-m``) may reach earlier boots.
    """
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    if not argv:
        return False
    name = os.path.basename(argv[0])
    if name == "dmesg":
        return True
    if name != "journalctl":
        return False
    current = False
    for i, arg in enumerate(argv[1:], start=1):
        if arg in {"--file", "-D", "--directory", "-m", "--merge"} or arg.startswith(
            ("--file=", "--directory=")
        ):
            return False
        if arg in {"-b", "--boot"}:
            nxt = argv[i + 1] if i + 1 < len(argv) else ""
            if nxt and not nxt.startswith("-") and nxt != "0":
                return False
            if nxt.startswith("-") and nxt[1:].isdigit():
                return False  # -b -1: an earlier boot
            current = True
        elif arg.startswith("--boot=") or (arg.startswith("-b") and len(arg) > 2):
            value = arg.split("=", 1)[1] if arg.startswith("--boot=") else arg[2:]
            if value not in {"", "0"}:
                return False
            current = True
        elif arg in {"-k", "--dmesg"} or (
            arg.startswith("-") and not arg.startswith("--") and "k" in arg[1:]
        ):
            current = True
    return current


def boot_time() -> float | None:
    """The boot's wall-clock time (now less /proc/uptime): monotonic stamps count from it."""
    try:
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - uptime


def iso(epoch: float) -> str:
    """A Unix time as ISO 8601 UTC."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def line_time(line: str, boot: float | None) -> str | None:
    """The wall-clock time of one kernel log line, or None when it carries none."""
    m = MONOTONIC_RE.match(line)
    if m:
        return iso(boot + float(m.group("s"))) if boot is not None else None
    m = ISO_RE.match(line)
    if m:
        text = m.group("t").replace(",", ".")
        # Python before 3.11 wants the offset as +hh:mm.
        text = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", text.replace("Z", "+00:00"))
        try:
            stamp = datetime.fromisoformat(text)
        except ValueError:
            return None
        if stamp.tzinfo is None:
            stamp = stamp.astimezone()
        return iso(stamp.timestamp())
    return None


def parse_xids(
    text: str, boot: float | None = None, this_boot: bool = False
) -> list[dict[str, Any]]:
    """Every ``NVRM: Xid (PCI:...): N, ...`` line, with its wall-clock time when known and
    its boot: ``this``, ``previous`` or None (unknown).

    journalctl prints ``-- Boot <id> --`` (older systemd: ``-- Reboot --``) where one boot's
    messages end and the next one's begin (systemd, src/journal/journalctl.c, unless
    ``--quiet``/``--merge``): lines before the last such marker are from earlier boots, and
    their monotonic stamps count from those boots, not this one. Without a marker every line
    is from this boot when the command reads this boot only (``this_boot``).
    """
    lines = text.splitlines()
    last_marker = max(
        (i for i, line in enumerate(lines) if BOOT_MARKER_RE.match(line)), default=None
    )
    events = []
    for i, line in enumerate(lines):
        m = XID_RE.search(line)
        if not m:
            continue
        if last_marker is not None:
            which: str | None = "this" if i > last_marker else "previous"
        else:
            which = "this" if this_boot else None
        events.append(
            {
                "bus_id": m.group("bus"),
                "xid": int(m.group("xid")),
                # A monotonic stamp counts from its own boot: only this boot's can be dated.
                "time": line_time(line, None if which == "previous" else boot),
                "boot": which,
                "line": line.strip()[-300:],
            }
        )
    return events


def read_text(path: str) -> str | None:
    """A small sysfs-style file's value (stripped), or None when absent or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def query_identity(dmi_dir: str = DMI_DIR, by_id_dir: str = "/dev/disk/by-id") -> dict[str, Any]:
    """What identifies this machine: DMI strings, disks (lsblk and /dev/disk/by-id), NIC MACs.

    Raw facts only: ``toolkit.cert`` joins the disk listing with the by-id names.
    """
    out: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "dmi": {name: read_text(os.path.join(dmi_dir, name)) for name in DMI_FIELDS},
        "lsblk": None,
        "lsblk_error": None,
        "by_id": [],
        "nics": [],
    }
    rc, stdout, stderr = sh(LSBLK_IDENTITY)
    if rc == 0:
        try:
            out["lsblk"] = json.loads(stdout)
        except ValueError as err:
            out["lsblk_error"] = f"lsblk printed no JSON: {err}"
    else:
        out["lsblk_error"] = (stderr or stdout).strip() or f"lsblk exited {rc}"
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(by_id_dir)):
            link = os.path.join(by_id_dir, name)
            try:
                info = os.stat(link)
            except OSError:
                continue
            if stat.S_ISBLK(info.st_mode):
                out["by_id"].append(
                    {
                        "name": name,
                        "maj_min": f"{os.major(info.st_rdev)}:{os.minor(info.st_rdev)}",
                        "target": os.path.basename(os.path.realpath(link)),
                    }
                )
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(NET_DIR)):
            base = os.path.join(NET_DIR, name)
            if read_text(os.path.join(base, "type")) == ARPHRD_LOOPBACK:
                continue
            if os.path.isdir(os.path.join(base, "bridge")):
                continue  # a software bridge (docker0) takes a MAC of its own choosing
            out["nics"].append(
                {
                    "name": name,
                    "mac": read_text(os.path.join(base, "address")),
                    "physical": os.path.exists(os.path.join(base, "device")),
                }
            )
    return out


def read_state(path: str) -> dict[str, Any] | None:
    """The node's state file (its path comes in the spec: toolkit.node.nodestate owns it)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


# Linux, Documentation/ABI/stable/sysfs-class-infiniband: /sys/class/infiniband/<device>/
# ports/<port>/{state,phys_state,link_layer} (link_layer: InfiniBand or Ethernet, RoCE's), the
# port's PortCounters under counters/ (``counters/link_downed``), and ``device``, the link to
# the device's PCI function (its name is the PCI address, 0000:17:00.0). The lab points it
# elsewhere (`gpunode_rdma_dir`, passed in the spec as `rdma_dir`).
RDMA_DIR = "/sys/class/infiniband"
RDMA_PORT_FILES = ("state", "phys_state", "link_layer", "counters/link_downed")


def read_rdma(rdma_dir: str = RDMA_DIR) -> dict[str, Any]:
    """Every RDMA port's state and counter files under ``rdma_dir`` (``mlx5_0/1`` -> its
    files, by their path under the port), and each device's PCI address (None where the
    device has no PCI function link)."""
    ports: dict[str, dict[str, str | None]] = {}
    pci: dict[str, str | None] = {}
    try:
        devices = sorted(os.listdir(rdma_dir))
    except OSError as err:
        return {"dir": rdma_dir, "error": str(err), "ports": ports, "pci": pci}
    for device in devices:
        link = os.path.join(rdma_dir, device, "device")
        pci[device] = os.path.basename(os.path.realpath(link)) if os.path.islink(link) else None
        base = os.path.join(rdma_dir, device, "ports")
        try:
            numbers = sorted(os.listdir(base))
        except OSError:
            continue
        for port in numbers:
            ports[f"{device}/{port}"] = {
                name: read_text(os.path.join(base, port, name)) for name in RDMA_PORT_FILES
            }
    return {"dir": rdma_dir, "error": None, "ports": ports, "pci": pci}


def query_topology(smi: str | None, rdma_dir: str | None = None) -> dict[str, Any]:
    """`nvidia-smi topo -m` as printed: the controller parses and judges the matrix
    (toolkit/acceptance/topology.py), as it does nccl-tests output; with the RDMA devices'
    ports (``rdma_dir``), whose link layer tells compute NICs from the others."""
    started = time.perf_counter()
    rc, stdout, stderr = (
        sh(nvidia.query_topology(smi)) if smi else (127, "", "nvidia-smi not found")
    )
    error = None if rc == 0 else (stderr or stdout).strip() or f"exited {rc}"
    out: dict[str, Any] = {"raw_output": stdout, "error": error}
    if rdma_dir:
        out["rdma"] = read_rdma(rdma_dir)
    out["duration_s"] = round(time.perf_counter() - started, 3)
    return out


# `dcgmi diag -r <level> -j` (datacenter-gpu-manager, NVIDIA's CUDA repository; DCGM user
# guide, "Installation"): the controller parses and judges the JSON
# (toolkit/acceptance/dcgm.py). dcgmi exits non-zero when a plugin fails (and prints the
# document all the same), so the text is kept whatever the exit code.
DCGM_MAX_BYTES = 4 << 20


def query_dcgm(level: int | None, timeout_s: float) -> dict[str, Any] | None:
    """Run the diagnostic at the profile's level; None when the profile does not ask."""
    if not level:
        return None
    started = time.perf_counter()
    dcgmi = shutil.which("dcgmi")
    if not dcgmi:
        return {"level": level, "raw_output": "", "rc": 127, "error": "dcgmi not found"}
    rc, stdout, stderr = sh([dcgmi, "diag", "-r", str(int(level)), "-j"], timeout=timeout_s)
    error = None
    if rc == 124 and not stdout:
        error = stderr.strip()
    elif not stdout.strip():
        error = (stderr or "").strip()[:2000] or f"exited {rc} with no output"
    return {
        "level": level,
        "raw_output": stdout[: DCGM_MAX_BYTES + 1],
        "rc": rc,
        "error": error,
        "duration_s": round(time.perf_counter() - started, 3),
    }
