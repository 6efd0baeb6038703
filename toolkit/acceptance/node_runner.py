#!/usr/bin/env python3
"""gpunode's node-side acceptance runner: one file, the standard library plus optional torch.

It is copied to a node and run there; it never imports ``toolkit``. It measures and collects
facts and writes one JSON result; the verdict is given on the control machine
(``toolkit.acceptance.verdict``), which also parses nccl-tests output.

Subcommands:

- ``run --spec SPEC.json --out RESULT.json``: every check of one node (GPU inventory,
  versions, health, a local all-reduce over the node's GPUs or CPU ranks, GEMM, memory and
  host-device bandwidth per GPU, ``/data`` throughput, and the training-shaped checks: random
  reads from many files, a checkpoint round trip, a data-parallel loop fed by a DataLoader,
  scaling from 1 to all GPUs).
- ``allreduce --nnodes N --node-rank I --nproc P --master-addr A --master-port PORT ...``:
  the ranks of one node of a multi-node all-reduce (torch.distributed; ``nccl`` on GPUs,
  ``gloo`` on the CPU); with ``--p2p`` two single-rank nodes also time each direction; with
  ``--train-from SPEC.json`` the ranks then run the training loop at 1, 2, 4 ... all ranks
  of all nodes (scaling across nodes), each node reading its own data path.
- ``worker``: one rank (internal; started by the two above); with ``--train SPEC.json`` it
  also restores the checkpoint (rank 0) and runs the loop at every scaling point.
- ``framework --spec SPEC.json --out RESULT.json``: only the checks that need the framework
  (versions, all-reduce, GPU speed, ``/data``); ``run`` starts it inside the training image
  when the spec names one (``container.image``), else runs it in its own Python.
- ``nccl-probe``: which libnccl the framework in this Python loads (file, version, pip wheel
  or system package), as JSON; ``gpunode image inspect`` and the acceptance check use it.

Exit codes: 0 the result was written (whatever it says), 2 bad arguments, 3 it could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

SCHEMA = 1
DEFAULT_KERNEL_LOG_COMMAND = "journalctl -k -b -o short-monotonic --no-pager"
NCCL_TESTS_CANDIDATES = (
    "all_reduce_perf",
    "/opt/nccl-tests/build/all_reduce_perf",
    "/usr/local/bin/all_reduce_perf",
)

# `nvidia-smi --help-query-gpu`: the fields read per GPU. Health fields are read in a second
# query so that a driver lacking one of them still reports the inventory.
INVENTORY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "driver_version",
    # The board's identity, for the handover certificate (toolkit/cert/).
    "serial",
    "vbios_version",
)
HEALTH_FIELDS = (
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "clocks_throttle_reasons.active",
    # The GPU's own and the root port's maximum generation (newer drivers only; `gen.max` is
    # the lower of the two). The current link "may be reduced when the GPU is not in use"
    # (nvidia-smi --help-query-gpu), so only the maximum and a sample under load are judged.
    "pcie.link.gen.gpumax",
    "pcie.link.gen.hostmax",
)
# The link sampled while the host-to-device copies run.
LINK_FIELDS = ("pcie.link.gen.current", "pcie.link.width.current")
# Newer drivers call the throttle bitmask "clocks_event_reasons".
FIELD_ALIASES = {"clocks_throttle_reasons.active": "clocks_event_reasons.active"}
# The memory-error counters come from `nvidia-smi -q` (one report, every generation): its
# "ECC Errors" section names the uncorrectable counters per generation (Volta and older:
# "Double Bit" > "Total"; Ampere: "SRAM/DRAM Uncorrectable"; Hopper: "SRAM Uncorrectable
# Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable"), "Retired Pages" (page
# retirement, Volta and older), "Remapped Rows" (row remapping, Ampere and newer) and
# "GPU Recovery Action" (newer drivers) are read as they are; see the captures in
# tests/data/real/ (tests/data/real/SOURCES.md). A value the GPU does not report ("N/A", a
# missing line) is None: "not reported", never a failure.
SMI_Q_ABSENT = {
    "n/a",
    "not supported",
    "unknown error",
    "requested functionality has been deprecated",
}
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
PROC_VERSION_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(?P<v>\d+\.\d+(?:\.\d+)?)")
NVML_LIB_RE = re.compile(r"NVML library version:\s*(?P<v>[\d.]+)")


def now_iso() -> str:
    """The current UTC time, ISO 8601."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def sh(
    argv: list[str] | str, timeout: float = 60.0, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run a command (``env``: its whole environment, None: this one's); never raise for a
    missing binary or a timeout."""
    try:
        proc = subprocess.run(
            argv,
            shell=isinstance(argv, str),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except FileNotFoundError as err:
        return 127, "", str(err)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout:.0f}s"
    return proc.returncode, proc.stdout, proc.stderr


def smi_value(text: str) -> str | None:
    """One nvidia-smi CSV value; the ``[N/A]``/``[Not Supported]`` spellings become None."""
    value = text.strip()
    if not value or value.strip("[]").lower() in {"n/a", "not supported", "unknown error"}:
        return None
    return value


def smi_int(text: str | None) -> int | None:
    """An integer nvidia-smi value (hex bitmasks included), or None."""
    if text is None:
        return None
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(float(text))
    except ValueError:
        return None


def parse_smi_csv(text: str, fields: tuple[str, ...]) -> list[dict[str, str | None]]:
    """Rows of ``--format=csv,noheader,nounits`` output, keyed by field."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [smi_value(v) for v in line.split(",")]
        if len(values) != len(fields):
            continue
        rows.append(dict(zip(fields, values, strict=False)))
    return rows


def parse_smi_q(text: str) -> dict[str, dict[str, Any]]:
    """``nvidia-smi -q`` as one tree per GPU, keyed by its bus id (``00000000:18:00.0``).

    A line ``Key : value`` is a leaf; a line without a colon opens a section holding the
    lines indented below it (four spaces a level).
    """
    gpus: dict[str, dict[str, Any]] = {}
    stack: list[tuple[int, dict[str, Any]]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        if depth == 0:
            stack = []
            if line.startswith("GPU "):
                tree: dict[str, Any] = {}
                gpus[line[4:].strip()] = tree
                stack = [(0, tree)]
            continue
        if not stack:
            continue
        while len(stack) > 1 and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1]
        key, colon, value = line.partition(":")
        if colon:
            parent[key.strip()] = value.strip()
        else:
            child: dict[str, Any] = {}
            parent[key.strip()] = child
            stack.append((depth, child))
    return gpus


def _q_value(value: Any) -> str | None:
    """A ``-q`` leaf, or None when the GPU does not report it."""
    if not isinstance(value, str) or value.strip("[]").lower() in SMI_Q_ABSENT or not value:
        return None
    return value


def _q_count(value: Any) -> int | None:
    text = _q_value(value)
    return int(text) if text is not None and text.isdigit() else None


def _q_flag(value: Any) -> bool | None:
    text = (_q_value(value) or "").lower()
    return {"yes": True, "no": False}.get(text)


def _q_uncorrectable(ecc: Any, span: str) -> int | None:
    """The uncorrectable ECC errors of ``Volatile`` or ``Aggregate``: the sum of every
    uncorrectable counter (nvidia-smi's ``ecc.errors.uncorrected.<span>.total``)."""
    counters = ecc.get(span) if isinstance(ecc, dict) else None
    if not isinstance(counters, dict):
        return None
    double_bit = counters.get("Double Bit")  # Volta and older
    if isinstance(double_bit, dict):
        values = [double_bit.get("Total")]
    else:
        values = [v for k, v in counters.items() if "Uncorrectable" in k]
    numbers = [_q_count(v) for v in values]
    if not numbers or any(n is None for n in numbers):
        return None
    return sum(n for n in numbers if n is not None)


def memory_health(gpu: dict[str, Any]) -> dict[str, Any]:
    """One GPU's memory-error counters from its ``-q`` tree (None: not reported)."""
    ecc = gpu.get("ECC Errors")
    pages = gpu.get("Retired Pages")
    pending_pages = None
    if isinstance(pages, dict):
        # "Pending Page Blacklist" in the captures (tests/data/real/); read by its prefix.
        pending_pages = next(
            (_q_flag(v) for k, v in pages.items() if k.startswith("Pending")), None
        )
    rows = gpu.get("Remapped Rows")
    remapped = None
    if isinstance(rows, dict):
        remapped = {
            "correctable": _q_count(rows.get("Correctable Error")),
            "uncorrectable": _q_count(rows.get("Uncorrectable Error")),
            "pending": _q_flag(rows.get("Pending")),
            "failure": _q_flag(rows.get("Remapping Failure Occurred")),
        }
    return {
        "ecc_uncorrected_volatile": _q_uncorrectable(ecc, "Volatile"),
        "ecc_uncorrected_aggregate": _q_uncorrectable(ecc, "Aggregate"),
        "retired_pages_pending": pending_pages,
        "remapped_rows": remapped,
        "recovery_action": _q_value(gpu.get("GPU Recovery Action")),
    }


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
    rc, stdout, stderr = sh(
        [smi, f"--query-gpu={','.join(INVENTORY_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    if rc != 0:
        out["error"] = (stdout + stderr).strip() or f"nvidia-smi exited {rc}"
        return out
    gpus = parse_smi_csv(stdout, INVENTORY_FIELDS)
    health: dict[str, dict[str, str | None]] = {}
    fields = list(HEALTH_FIELDS)
    rc, stdout, _ = sh(
        [smi, f"--query-gpu=pci.bus_id,{','.join(fields)}", "--format=csv,noheader,nounits"]
    )
    if rc == 0:
        for row in parse_smi_csv(stdout, ("pci.bus_id", *fields)):
            health[str(row["pci.bus_id"])] = row
    else:
        # One unknown field fails the whole query: read the fields one at a time.
        for field in HEALTH_FIELDS:
            value_by_bus = None
            for name in (field, FIELD_ALIASES.get(field)):
                if name is None:
                    continue
                rc, stdout, _ = sh(
                    [smi, f"--query-gpu=pci.bus_id,{name}", "--format=csv,noheader,nounits"]
                )
                if rc == 0:
                    value_by_bus = parse_smi_csv(stdout, ("pci.bus_id", field))
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
                "index": smi_int(gpu["index"]),
                "name": gpu["name"],
                "uuid": gpu["uuid"],
                "bus_id": gpu["pci.bus_id"],
                "driver_version": gpu["driver_version"],
                "serial": gpu["serial"],
                "vbios_version": gpu["vbios_version"],
                "pcie_gen_current": smi_int(h.get("pcie.link.gen.current")),
                "pcie_gen_max": smi_int(h.get("pcie.link.gen.max")),
                "pcie_width_current": smi_int(h.get("pcie.link.width.current")),
                "pcie_width_max": smi_int(h.get("pcie.link.width.max")),
                "pcie_gen_gpu_max": smi_int(h.get("pcie.link.gen.gpumax")),
                "pcie_gen_host_max": smi_int(h.get("pcie.link.gen.hostmax")),
                "throttle_active": smi_int(h.get("clocks_throttle_reasons.active")),
            }
        )
    # The memory-error counters: see SMI_Q_ABSENT's comment (missing ones stay None).
    rc, stdout, stderr = sh([smi, "-q"], timeout=120)
    memory = parse_smi_q(stdout) if rc == 0 else {}
    if rc != 0:
        out["memory_error"] = (stdout + stderr).strip()[-300:] or f"nvidia-smi -q exited {rc}"
    for gpu in listed:
        gpu.update(memory_health(memory.get(str(gpu["bus_id"]), {})))
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
        rc, stdout, stderr = sh([smi, "--query-gpu=driver_version", "--format=csv,noheader"])
        text = (stdout + stderr).strip()
        if rc == 0:
            values = {v.strip() for v in stdout.splitlines() if v.strip()}
            out["driver_loaded"] = sorted(values)[0] if len(values) == 1 else sorted(values)
        else:
            out["nvml_error"] = text or f"nvidia-smi exited {rc}"
            m = NVML_LIB_RE.search(text)
            if m:
                out["nvml_library"] = m.group("v")
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            m = PROC_VERSION_RE.search(handle.read())
            out["driver_proc"] = m.group("v") if m else None
    except OSError:
        pass
    if packages:
        rc, stdout, _ = sh(
            ["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n", *packages]
        )
        installed = {}
        for line in stdout.splitlines():
            parts = line.split("\t")
            # Status-Abbrev: desired action (i install, h hold, ...) then the status; only
            # the status says whether it is installed ("ii" and, for held packages, "hi").
            if len(parts) == 3 and parts[2][1:2] == "i":
                installed[parts[0]] = parts[1]
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
    """The node's state file (its path comes in the spec: toolkit.nodestate owns it)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def data_throughput(path: str, size: int) -> dict[str, Any]:
    """Sequential write then read of one file under ``path`` (MB/s, 10^6 bytes)."""
    out: dict[str, Any] = {
        "path": path,
        "size_bytes": size,
        "write_mbps": None,
        "read_mbps": None,
        "error": None,
    }
    if not os.path.isdir(path):
        out["error"] = f"{path} does not exist"
        return out
    target = os.path.join(path, f".gpunode-accept-{os.getpid()}")
    chunk = os.urandom(1 << 20) * 4  # 4 MiB; random so compression cannot flatter
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            start = time.perf_counter()
            written = 0
            while written < size:
                written += os.write(fd, chunk[: min(len(chunk), size - written)])
            os.fsync(fd)
            out["write_mbps"] = written / (time.perf_counter() - start) / 1e6
        finally:
            os.close(fd)
        fd = os.open(target, os.O_RDONLY)
        try:
            # Drop this file's pages so the read comes from the disk, not the page cache.
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            start = time.perf_counter()
            read = 0
            while True:
                block = os.read(fd, 4 << 20)
                if not block:
                    break
                read += len(block)
            out["read_mbps"] = read / (time.perf_counter() - start) / 1e6
        finally:
            os.close(fd)
    except OSError as err:
        out["error"] = f"{target}: {err.strerror or err}"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(target)
    return out


# ---------------------------------------------------------------------------------------------
# all-reduce through torch.distributed


def import_torch() -> Any:
    """torch, or None when it is not installed."""
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return torch


def busbw_factor(ranks: int) -> float:
    """all_reduce bus bandwidth factor 2(n-1)/n (nccl-tests' PERFORMANCE.md)."""
    return 2.0 * (ranks - 1) / ranks if ranks > 0 else 0.0


def pattern_value(rank: int, index_mod: int) -> float:
    """The value rank ``rank`` puts at element ``i`` (``index_mod = i % 7``): small integers,
    so every partial sum is exact in float32 and the reduced value can be checked exactly."""
    return float((rank + 1) * (index_mod + 1))


PATTERN_CHUNK = 1 << 24  # elements per step of the pattern (128 MiB of int64 indices)
P2P_MAX_BYTES = 256 << 20


def fill_pattern(torch: Any, buf: Any, scale: float) -> None:
    """Element i becomes ``scale * (i % 7 + 1)`` (see :func:`pattern_value`)."""
    n = buf.numel()
    for start in range(0, n, PATTERN_CHUNK):
        end = min(n, start + PATTERN_CHUNK)
        idx = torch.arange(start, end, device=buf.device, dtype=torch.int64) % 7
        buf[start:end].copy_((idx + 1).to(buf.dtype) * scale)


def check_pattern(torch: Any, buf: Any, scale: float) -> tuple[int, float]:
    """Elements that differ from ``scale * (i % 7 + 1)``, and the largest difference."""
    n = buf.numel()
    wrong = 0
    max_err = 0.0
    for start in range(0, n, PATTERN_CHUNK):
        end = min(n, start + PATTERN_CHUNK)
        idx = torch.arange(start, end, device=buf.device, dtype=torch.int64) % 7
        expected = (idx + 1).to(buf.dtype) * scale
        diff = (buf[start:end] - expected).abs()
        wrong += int((diff != 0).sum().item())
        max_err = max(max_err, float(diff.max().item()))
    return wrong, max_err


def worker(args: argparse.Namespace) -> int:
    """One rank: time the all-reduce per size, check the reduced values, time p2p if asked."""
    torch = import_torch()
    if torch is None:
        print("torch is not installed", file=sys.stderr)
        return 3
    import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    from datetime import timedelta

    dist.init_process_group(
        backend=backend, rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout)
    )

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize(device)

    rows = []
    factor = busbw_factor(world)
    expected_scale = world * (world + 1) / 2.0
    for size in args.sizes:
        count = max(1, size // 4)
        scratch = torch.zeros(count, dtype=torch.float32, device=device)
        elapsed = timed_allreduce(torch, dist, scratch, args.iters, args.warmup, device)
        # Correctness on a pattern whose sum is known exactly, written into the same buffer
        # chunk by chunk: a 16 GiB message must not need three more 16 GiB tensors.
        fill_pattern(torch, scratch, float(rank + 1))
        dist.all_reduce(scratch)
        wrong, max_err = check_pattern(torch, scratch, expected_scale)
        # The slowest rank's time is the collective's time.
        t = torch.tensor([elapsed], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        w = torch.tensor([wrong], dtype=torch.int64, device=device)
        dist.all_reduce(w)
        elapsed = float(t.item())
        algbw = count * 4 / elapsed / 1e9
        rows.append(
            {
                "size_bytes": count * 4,
                "time_us": elapsed * 1e6,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * factor,
                "wrong": int(w.item()),
                "max_abs_error": max_err,
                "correct": int(w.item()) == 0,
            }
        )
        del scratch
    p2p = None
    if args.p2p and world == 2:
        p2p = {}
        size = min(args.sizes[-1], P2P_MAX_BYTES)
        buf = torch.zeros(max(1, size // 4), dtype=torch.float32, device=device)
        for src in (0, 1):
            dist.barrier()
            sync()
            start = time.perf_counter()
            for _ in range(args.iters):
                if rank == src:
                    dist.send(buf, dst=1 - src)
                else:
                    dist.recv(buf, src=src)
            sync()
            # A send may return before the bytes arrive: the receiver's clock counts.
            t = torch.tensor(
                [time.perf_counter() - start if rank != src else 0.0],
                dtype=torch.float64,
                device=device,
            )
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            p2p[f"{src}->{1 - src}"] = buf.numel() * 4 * args.iters / float(t.item()) / 1e9
    train = None
    if args.train:
        with open(args.train, encoding="utf-8") as handle:
            train_spec = json.load(handle)
        started = time.perf_counter()
        try:
            per_node = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
            train = train_phase(
                torch, dist, rank, world, per_node, device, train_spec, shutil.which("nvidia-smi")
            )
        except Exception as err:
            train = {"checkpoint": None, "loop": None, "scaling": None}
            train["error"] = f"rank {rank}: {type(err).__name__}: {err}"[:600]
        if train is not None:
            train["duration_s"] = time.perf_counter() - started
    dist.destroy_process_group()
    if rank == 0 and args.out:
        result = {
            "engine": f"torch-{backend}",
            "backend": backend,
            "ranks": world,
            "device": "cuda" if use_cuda else "cpu",
            "rows": rows,
            "p2p_gbps": p2p,
            "error": None,
            "torch": torch.__version__,
            "nccl": nccl_probe(torch),
            "train": train,
        }
        write_json(args.out, result)
    return 0


def timed_allreduce(
    torch: Any, dist: Any, buf: Any, iters: int, warmup: int, device: Any, group: Any = None
) -> float:
    """This rank's seconds per all-reduce of ``buf`` over ``group`` (after ``warmup``)."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        dist.all_reduce(buf, group=group)
    sync()
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf, group=group)
    sync()
    return (time.perf_counter() - start) / iters


# The NCCL a framework loads is a shared library file; its version is what that file says, not
# what torch was built against: torch.cuda.nccl.version() reports the latter
# (pytorch/pytorch#116977). A CUDA build of torch preloads `libnccl.so.*` from the
# `nvidia-nccl-cu*` wheel (`<sys.path entry>/nvidia/nccl/lib/`, torch/__init__.py
# `_preload_cuda_deps("nccl", "libnccl.so.*")`) before the loader's own search path, where a
# system `libnccl2` lives (`/usr/lib/<triplet>/libnccl.so.2`).
NCCL_SONAME = "libnccl.so.2"
NCCL_WHEEL_DIR = ("nvidia", "nccl", "lib")
NCCL_FILE_VERSION_RE = re.compile(r"libnccl\.so\.(?P<v>\d+\.\d+\.\d+)$")


def decode_nccl_version(code: int) -> str:
    """ncclGetVersion's integer: ``major*10000 + minor*100 + patch`` from 2.9 (nccl.h's
    NCCL_VERSION_CODE), ``major*1000 + minor*100 + patch`` before."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def mapped_nccl(maps_text: str) -> list[str]:
    """Paths of libnccl files mapped into a process (the text of /proc/<pid>/maps)."""
    found: list[str] = []
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        is_nccl = len(parts) == 6 and os.path.basename(parts[5]).startswith("libnccl.so")
        if is_nccl and parts[5] not in found:
            found.append(parts[5])
    return found


def nccl_candidates(search_path: list[str], ldconfig_text: str) -> list[str]:
    """Every libnccl the framework could load, in the order it looks: the wheel's (in
    sys.path order), then the loader's cache (the text of ``ldconfig -p``)."""
    found: list[str] = []
    for entry in search_path:
        lib_dir = os.path.join(entry or ".", *NCCL_WHEEL_DIR)
        try:
            names = sorted(n for n in os.listdir(lib_dir) if n.startswith("libnccl.so"))
        except OSError:
            continue
        if names:
            found.append(os.path.join(lib_dir, names[0]))
    for line in ldconfig_text.splitlines():
        name, _, target = line.strip().partition(" => ")
        if name.split(" ", 1)[0] == NCCL_SONAME and target:
            found.append(target.strip())
    # The loader's default directories, searched after its cache (ld.so(8)).
    triplet = f"{os.uname().machine}-linux-gnu"
    for lib_dir in (f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib64", "/usr/lib64"):
        path = os.path.join(lib_dir, NCCL_SONAME)
        if os.path.lexists(path) and os.path.realpath(path) not in map(os.path.realpath, found):
            found.append(path)
    return found


def nccl_source(path: str) -> dict[str, Any]:
    """Where a libnccl file comes from: a pip wheel (its distribution and version) or a
    system package (dpkg's owner and version), else unknown."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    if len(parts) > 4 and tuple(parts[-4:-1]) == NCCL_WHEEL_DIR:
        site = os.sep.join(parts[:-4])
        for name in sorted(os.listdir(site)):
            if name.startswith("nvidia_nccl_cu") and name.endswith(".dist-info"):
                dist, version = name[: -len(".dist-info")].rsplit("-", 1)
                return {
                    "kind": "pip-wheel",
                    "package": dist.replace("_", "-"),
                    "package_version": version,
                }
        return {"kind": "pip-wheel", "package": None, "package_version": None}
    for candidate in (path, real):
        rc, stdout, _ = sh(["dpkg-query", "-S", candidate])
        if rc == 0 and ":" in stdout:
            package = stdout.split(":", 1)[0].strip()
            rc, version, _ = sh(["dpkg-query", "-W", "-f=${Version}", package])
            return {
                "kind": "system-package",
                "package": package,
                "package_version": version.strip() if rc == 0 else None,
            }
    return {"kind": "unknown", "package": None, "package_version": None}


def nccl_file_version(path: str) -> str | None:
    """The version of a libnccl file: ncclGetVersion() when the library loads, else the
    ``libnccl.so.X.Y.Z`` name the symlink chain ends in."""
    import ctypes

    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(code)) == 0 and code.value > 0:
            return decode_nccl_version(code.value)
    except (OSError, AttributeError):
        pass
    m = NCCL_FILE_VERSION_RE.search(os.path.realpath(path))
    return m.group("v") if m else None


def nccl_probe(torch: Any = None) -> dict[str, Any]:
    """The NCCL the framework in this Python really loads: which file, its version, where
    it comes from, and whether it was mapped into this process or found the way the framework
    would find it (a CPU build of torch maps none)."""
    out: dict[str, Any] = {
        "version": None,
        "path": None,
        "how": None,
        "source": None,
        "framework": getattr(torch, "__version__", None),
        "framework_built_with": None,
    }
    if torch is not None:
        # What the framework was compiled against: shown, never judged (pytorch#116977).
        try:
            v = torch.cuda.nccl.version()
            out["framework_built_with"] = (
                ".".join(str(x) for x in v) if isinstance(v, tuple) else decode_nccl_version(int(v))
            )
        except Exception:
            pass
    try:
        with open("/proc/self/maps", encoding="utf-8") as handle:
            mapped = mapped_nccl(handle.read())
    except OSError:
        mapped = []
    _rc, ldconfig, _ = sh(["ldconfig", "-p"])
    candidates = nccl_candidates(list(sys.path), ldconfig)
    if mapped:
        out.update(path=mapped[0], how="mapped")
    elif candidates:
        out.update(path=candidates[0], how="resolved")
    else:
        return out
    out["version"] = nccl_file_version(out["path"])
    out["source"] = nccl_source(out["path"])
    # The other NCCLs in this environment (a system libnccl2 beside the wheel's): shown, so
    # "two NCCLs in one image" is visible; their version is read from names, never loaded.
    out["others"] = []
    for path in candidates:
        if os.path.realpath(path) != os.path.realpath(out["path"]):
            source = nccl_source(path)
            m = NCCL_FILE_VERSION_RE.search(os.path.realpath(path))
            version = m.group("v") if m else source.get("package_version")
            out["others"].append({"path": path, "version": version, "source": source})
    return out


# NCCL's log of an all-reduce on GPUs says which transports it really used (network plugin,
# GPUDirect RDMA, NVLS, P2P): NCCL_DEBUG=INFO prints it (docs.nvidia.com/deeplearning/nccl,
# user guide, "Logging"); the controller reads it (toolkit/acceptance/nccllog.py). A site's
# own NCCL_DEBUG is kept. At most this much of it travels back in the result.
NCCL_LOG_MAX_BYTES = 4 << 20


def nccl_debug_env(base: dict[str, str]) -> dict[str, str]:
    """``base`` with ``NCCL_DEBUG=INFO`` unless it sets NCCL_DEBUG itself."""
    return {"NCCL_DEBUG": "INFO", **base}


def launch_ranks(
    nnodes: int,
    node_rank: int,
    nproc: int,
    master_addr: str,
    master_port: int,
    sizes: list[int],
    iters: int,
    warmup: int,
    device: str,
    timeout: float,
    out: str | None,
    p2p: bool = False,
    train: str | None = None,
) -> dict[str, Any]:
    """Start this node's ranks as processes and wait for them (``train``: the spec file of
    the training-shaped checks the ranks run after the all-reduce, see :func:`train_phase`).

    Returns:
        On node 0 the result of rank 0; elsewhere ``{"error": None}``; on any failure a
        result with ``error`` set and no rows.
    """
    world = nnodes * nproc
    procs = []
    tmp_out = out or ""
    base_env = dict(
        nccl_debug_env(dict(os.environ)) if device == "cuda" else os.environ,
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        WORLD_SIZE=str(world),
        # torchrun's name for the ranks of one node: the scaling points say how many nodes
        # they span.
        LOCAL_WORLD_SIZE=str(nproc),
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
    )
    for local in range(nproc):
        env = dict(base_env, RANK=str(node_rank * nproc + local), LOCAL_RANK=str(local))
        argv = [
            sys.executable,
            os.path.abspath(__file__),
            "worker",
            "--device",
            device,
            "--iters",
            str(iters),
            "--warmup",
            str(warmup),
            "--timeout",
            str(int(timeout)),
            "--sizes",
            *[str(s) for s in sizes],
        ]
        if p2p:
            argv.append("--p2p")
        if train:
            argv += ["--train", train]
        if local == 0 and node_rank == 0 and tmp_out:
            argv += ["--out", tmp_out]
        procs.append(
            subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    deadline = time.monotonic() + timeout + 30
    errors = []
    outputs = []
    for local, proc in enumerate(procs):
        try:
            output, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            output, _ = proc.communicate()
            errors.append(f"rank {node_rank * nproc + local}: timed out; {output.strip()[-400:]}")
            continue
        outputs.append(output)
        if proc.returncode != 0:
            errors.append(
                f"rank {node_rank * nproc + local}: exit {proc.returncode}: {output.strip()[-600:]}"
            )
    # The ranks' NCCL log (their output: NCCL prints to stdout); gloo on CPU ranks has none.
    nccl_log = "".join(outputs)[:NCCL_LOG_MAX_BYTES] if device == "cuda" else None
    base = {
        "engine": f"torch-{'nccl' if device == 'cuda' else 'gloo'}",
        "ranks": world,
        "device": device,
        "rows": [],
        "p2p_gbps": None,
    }
    if nccl_log is not None:
        base["nccl_log"] = nccl_log
    if errors:
        return {**base, "error": "; ".join(errors)}
    if node_rank == 0 and tmp_out:
        try:
            with open(tmp_out, encoding="utf-8") as handle:
                loaded = json.load(handle)
        except (OSError, ValueError) as err:
            return {**base, "error": f"rank 0 wrote no result: {err}"}
        if nccl_log is not None and isinstance(loaded, dict):
            loaded["nccl_log"] = nccl_log
        return loaded
    return {**base, "error": None}


def free_port() -> int:
    """A free TCP port on this host for a node-local rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_nccl_tests() -> str | None:
    """The all_reduce_perf binary, if installed."""
    for candidate in NCCL_TESTS_CANDIDATES:
        found = (
            shutil.which(candidate)
            if "/" not in candidate
            else (candidate if os.access(candidate, os.X_OK) else None)
        )
        if found:
            return found
    return None


def run_nccl_tests(
    binary: str, ngpus: int, sizes: list[int], iters: int, warmup: int, factor: int, timeout: float
) -> dict[str, Any]:
    """all_reduce_perf over the node's GPUs; the text is parsed on the control machine."""
    argv = [
        binary,
        "-b",
        str(min(sizes)),
        "-e",
        str(max(sizes)),
        "-f",
        str(factor),
        "-g",
        str(ngpus),
        "-c",
        "1",
        "-n",
        str(iters),
        "-w",
        str(warmup),
    ]
    rc, stdout, stderr = sh(argv, timeout=timeout, env=nccl_debug_env(dict(os.environ)))
    return {
        "engine": "nccl-tests",
        "ranks": ngpus,
        "device": "cuda",
        "command": argv,
        "exit_code": rc,
        "raw_output": stdout + stderr,
        "rows": [],
        "p2p_gbps": None,
        "error": None if rc == 0 else f"all_reduce_perf exited {rc}",
    }


# ---------------------------------------------------------------------------------------------
# Training-shaped checks: /data under a data loader's read pattern, a checkpoint round trip,
# the data-loader wait and GPU utilisation of a short DDP loop, and scaling from 1 to all GPUs.
#
# Process model: the framework process writes the data set and the checkpoint and runs the
# random reads; the ranks it launches for the all-reduce (fresh processes) then restore the
# checkpoint (rank 0) and run the loop at every scaling point, so that torch is imported once
# per rank for all of it.

# Reads for O_DIRECT must be aligned to the logical block size: 4 KiB covers every disk.
DIRECT_ALIGN = 4096
# Upper bounds (ms) of the latency histogram's buckets; a last bucket holds the rest.
LATENCY_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0)
# nvidia-smi --help-query-gpu, utilization.gpu: "Percent of time over the past sample period
# during which one or more kernels was executing on the GPU"; sampled every 100 ms.
UTIL_QUERY = ("index", "utilization.gpu")
UTIL_INTERVAL_MS = 100
# The loop's model input: each sample's bytes are reduced to this many floats on the worker.
TRAIN_FEATURES = 1024


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0-100), or None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n q / 100), at least the first
    return ordered[int(rank) - 1]


def latency_histogram(values_ms: list[float]) -> list[dict[str, Any]]:
    """Counts per bucket: ``{"le_ms": bound, "count": n}``; the last bucket's bound is None."""
    counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
    for value in values_ms:
        index = next((i for i, b in enumerate(LATENCY_BUCKETS_MS) if value <= b), -1)
        counts[index] += 1
    bounds: list[float | None] = [*LATENCY_BUCKETS_MS, None]
    return [{"le_ms": b, "count": c} for b, c in zip(bounds, counts, strict=True)]


def drop_cache(fd: int) -> None:
    """Ask the kernel to drop a file's clean cached pages (posix_fadvise DONTNEED)."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def fsync_dir(path: str) -> None:
    """fsync a directory, so the names of new files in it survive a crash too."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dataset(path: str, files: int, file_bytes: int) -> dict[str, Any]:
    """``files`` files of ``file_bytes`` random bytes under ``path``, flushed to the disk and
    dropped from the page cache, so that reading them measures the disk."""
    out: dict[str, Any] = {"dir": path, "files": [], "file_bytes": file_bytes, "write_s": None}
    os.makedirs(path, exist_ok=True)
    block = os.urandom(file_bytes)  # random: neither compression nor dedup can flatter
    start = time.perf_counter()
    for index in range(files):
        name = os.path.join(path, f"sample-{index:06d}.bin")
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(index.to_bytes(8, "little") + block[8:])
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            drop_cache(fd)
        finally:
            os.close(fd)
        out["files"].append(name)
    fsync_dir(path)
    out["write_s"] = time.perf_counter() - start
    return out


def read_plan(
    files: int, file_bytes: int, reads: int, min_read: int, max_read: int, seed: int = 0
) -> list[tuple[int, int, int]]:
    """(file index, offset, size) of each random read: sizes log-uniform between ``min_read``
    and ``max_read`` and offsets at random, both multiples of 4 KiB (O_DIRECT's alignment)."""
    import math
    import random

    rng = random.Random(seed)
    top = min(max_read, file_bytes)
    plan = []
    for _ in range(reads):
        size = int(2 ** rng.uniform(math.log2(min_read), math.log2(top)))
        size = max(DIRECT_ALIGN, size // DIRECT_ALIGN * DIRECT_ALIGN)
        slots = (file_bytes - size) // DIRECT_ALIGN
        plan.append((rng.randrange(files), rng.randint(0, slots) * DIRECT_ALIGN, size))
    return plan


def direct_io_works(path: str) -> bool:
    """Whether the file system under ``path`` accepts O_DIRECT reads (tmpfs does not)."""
    import mmap

    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, DIRECT_ALIGN)
        os.preadv(fd, [buf], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def random_reads(
    paths: list[str],
    file_bytes: int,
    reads: int,
    workers: int,
    min_read: int,
    max_read: int,
    seed: int = 0,
) -> dict[str, Any]:
    """Random reads of 4 KiB-1 MiB from many files by parallel workers, the page cache out
    of the way: each read opens its file, reads, closes (as a data loader does per sample).

    O_DIRECT where the file system takes it: every read then reaches the device, whatever
    else has the file cached. Elsewhere each read first drops the file's cached pages
    (posix_fadvise DONTNEED) and turns readahead off (POSIX_FADV_RANDOM), which is advisory
    only; ``cache`` says which of the two ran.
    """
    import mmap
    from concurrent.futures import ThreadPoolExecutor

    out: dict[str, Any] = {
        "cache": None,
        "reads": reads,
        "workers": workers,
        "files": len(paths),
        "min_read_bytes": min_read,
        "max_read_bytes": min(max_read, file_bytes),
        "bytes": 0,
        "wall_s": None,
        "files_per_s": None,
        "mbps": None,
        "p50_ms": None,
        "p99_ms": None,
        "max_ms": None,
        "histogram": [],
        "error": None,
    }
    if not paths:
        out["error"] = "no files to read"
        return out
    direct = direct_io_works(paths[0])
    out["cache"] = "o_direct" if direct else "fadvise"
    plan = read_plan(len(paths), file_bytes, reads, min_read, max_read, seed)
    flags = os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if direct else 0)
    local = threading.local()

    def one(item: tuple[int, int, int]) -> tuple[float, int]:
        index, offset, size = item
        if not hasattr(local, "buf"):
            local.buf = mmap.mmap(-1, max(max_read, DIRECT_ALIGN))  # page aligned
        start = time.perf_counter()
        fd = os.open(paths[index], flags)
        try:
            if not direct and hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            got = os.preadv(fd, [memoryview(local.buf)[:size]], offset)
        finally:
            os.close(fd)
        return (time.perf_counter() - start) * 1000.0, got

    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            done = list(pool.map(one, plan))
        wall = time.perf_counter() - start
    except OSError as err:
        out["error"] = f"{err.filename or 'read'}: {err.strerror or err}"
        return out
    latencies = [ms for ms, _ in done]
    out["bytes"] = sum(n for _, n in done)
    short = sum(1 for (_, _, size), (_, n) in zip(plan, done, strict=True) if n != size)
    if short:
        out["error"] = f"{short} reads returned fewer bytes than asked"
    out.update(
        wall_s=wall,
        files_per_s=len(done) / wall if wall > 0 else None,
        mbps=out["bytes"] / wall / 1e6 if wall > 0 else None,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        max_ms=max(latencies),
        histogram=latency_histogram(latencies),
    )
    return out


def checkpoint_state(torch: Any, nbytes: int, seed: int = 0) -> dict[str, Any]:
    """A model's state of about ``nbytes``: eight float32 weight matrices of random values
    (a fixed seed) and an int64 step counter, named as a ``state_dict`` names them."""
    generator = torch.Generator().manual_seed(seed)
    layers = 8
    cols = 1024
    rows = max(1, nbytes // 4 // layers // cols)
    state = {
        f"layers.{i}.weight": torch.randn(rows, cols, generator=generator) for i in range(layers)
    }
    state["step"] = torch.tensor([seed + 1], dtype=torch.int64)
    return state


def tensor_sha256(tensor: Any) -> str:
    """sha256 of a CPU tensor's bytes, read in place (no numpy needed)."""
    import ctypes
    import hashlib

    flat = tensor.detach().contiguous()
    return hashlib.sha256(
        ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())
    ).hexdigest()


def checkpoint_write(torch: Any, path: str, nbytes: int, seed: int = 0) -> dict[str, Any]:
    """Write a model state to ``path`` the way a training job checkpoints it (``torch.save``),
    flushed (fsync of the file and of its directory) and dropped from the page cache so that
    a restore reads the disk. Returns the manifest (per-tensor dtype, shape, sha256) a
    restore is compared against, and the write time."""
    out: dict[str, Any] = {
        "path": path,
        "bytes": None,
        "tensors": 0,
        "manifest": {},
        "write_s": None,
        "write_mbps": None,
        "error": None,
    }
    try:
        state = checkpoint_state(torch, nbytes, seed)
        out["manifest"] = {
            name: {"dtype": str(t.dtype), "shape": list(t.shape), "sha256": tensor_sha256(t)}
            for name, t in state.items()
        }
        out["tensors"] = len(state)
        start = time.perf_counter()
        with open(path, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        fsync_dir(os.path.dirname(os.path.abspath(path)))
        elapsed = time.perf_counter() - start
        size = os.path.getsize(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            drop_cache(fd)
        finally:
            os.close(fd)
        out.update(bytes=size, write_s=elapsed, write_mbps=size / elapsed / 1e6)
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {err}"
    return out


def checkpoint_restore(torch: Any, path: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Load a checkpoint written by :func:`checkpoint_write` and compare it with its manifest
    exactly: every tensor present, same dtype and shape, same bytes (sha256)."""
    out: dict[str, Any] = {
        "restore_s": None,
        "restore_mbps": None,
        "identical": False,
        "mismatched": [],
        "missing": [],
        "unexpected": [],
        "error": None,
    }
    try:
        start = time.perf_counter()
        state = torch.load(path, map_location="cpu", weights_only=True)
        elapsed = time.perf_counter() - start
        size = os.path.getsize(path)
        out.update(restore_s=elapsed, restore_mbps=size / elapsed / 1e6)
    except Exception as err:
        out["error"] = f"the checkpoint does not load: {type(err).__name__}: {err}"[:600]
        return out
    if not isinstance(state, dict):
        out["error"] = f"the checkpoint holds a {type(state).__name__}, not a state dict"
        return out
    out["missing"] = sorted(set(manifest) - set(state))
    out["unexpected"] = sorted(set(state) - set(manifest))
    for name in sorted(set(manifest) & set(state)):
        tensor, want = state[name], manifest[name]
        if (
            str(tensor.dtype) != want["dtype"]
            or list(tensor.shape) != want["shape"]
            or tensor_sha256(tensor) != want["sha256"]
        ):
            out["mismatched"].append(name)
    out["identical"] = not (out["missing"] or out["unexpected"] or out["mismatched"])
    return out


class FileSamples:
    """A map-style data set for ``torch.utils.data.DataLoader``: sample ``i`` is the first
    ``sample_bytes`` of file ``i % len(paths)``, read after dropping the file's cached pages
    (so every epoch reads the disk) and reduced to ``features`` floats on the worker."""

    def __init__(self, paths: list[str], sample_bytes: int, features: int, length: int) -> None:
        self.paths = paths
        self.sample_bytes = sample_bytes
        self.features = features
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        import torch  # type: ignore[import-not-found,unused-ignore]

        fd = os.open(self.paths[index % len(self.paths)], os.O_RDONLY)
        try:
            drop_cache(fd)
            data = bytearray()
            while len(data) < self.sample_bytes:
                block = os.read(fd, self.sample_bytes - len(data))
                if not block:
                    break
                data += block
        finally:
            os.close(fd)
        usable = len(data) // self.features * self.features
        raw = torch.frombuffer(data, dtype=torch.uint8)[:usable]
        x = raw.to(torch.float32).view(self.features, -1).mean(1) / 255.0
        return x, x.sum().reshape(1) / self.features


def scaling_points(world: int) -> list[int]:
    """1, 2, 4 ... up to ``world`` ranks, and ``world`` itself."""
    points = []
    k = 1
    while k < world:
        points.append(k)
        k *= 2
    return [*points, world]


def sample_utilisation(smi: str | None) -> tuple[Any, Callable[[], dict[str, Any]]]:
    """Start nvidia-smi sampling ``utilization.gpu`` every 100 ms; the returned function
    stops it and gives the mean per GPU index."""
    if smi is None:
        return None, lambda: {"measured": False, "reason": "nvidia-smi not found", "per_gpu": {}}
    proc = subprocess.Popen(
        [
            smi,
            f"--query-gpu={','.join(UTIL_QUERY)}",
            "--format=csv,noheader,nounits",
            f"--loop-ms={UTIL_INTERVAL_MS}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    def stop() -> dict[str, Any]:
        proc.terminate()
        try:
            stdout, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
        samples: dict[int, list[float]] = {}
        for row in parse_smi_csv(stdout, UTIL_QUERY):
            index, value = smi_int(row["index"]), smi_int(row["utilization.gpu"])
            if index is not None and value is not None:
                samples.setdefault(index, []).append(float(value))
        if not samples:
            return {"measured": False, "reason": "nvidia-smi gave no sample", "per_gpu": {}}
        return {
            "measured": True,
            "reason": None,
            "per_gpu": {str(i): sum(v) / len(v) for i, v in sorted(samples.items())},
            "samples": sum(len(v) for v in samples.values()),
        }

    return proc, stop


def train_loop(
    torch: Any,
    dist: Any,
    group: Any,
    ranks: int,
    rank: int,
    device: Any,
    train: dict[str, Any],
) -> dict[str, float]:
    """A short data-parallel loop over ``group`` fed by a DataLoader with workers reading
    ``/data``; the first step (workers starting) is not counted, as MLPerf Storage excludes
    it. Returns this rank's step time, data wait and samples.

    Data parallel the way DistributedDataParallel is by default: the same initial weights on
    every rank (broadcast from rank 0), and after each backward pass the gradients averaged
    over the ranks with one all-reduce, then a plain SGD step. Neither DDP nor torch.optim is
    used: their constructors import torch._dynamo, 5-8 s of CPU per rank in the training
    image (it carries no .pyc files, so every module is compiled at import), more than the
    whole loop. Without DDP's overlap of gradient buckets with the backward pass, the
    measured scaling is a lower bound.
    """
    from torch.utils.data import DataLoader  # type: ignore[import-not-found,unused-ignore]
    from torch.utils.data.distributed import DistributedSampler  # type: ignore[import-not-found,unused-ignore]

    features, hidden = TRAIN_FEATURES, int(train["hidden"])
    batch, steps = int(train["batch"]), int(train["steps"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(features, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1),
    ).to(device)
    params = list(model.parameters())
    for param in params:
        dist.broadcast(param.data, src=0, group=group)
    samples = FileSamples(
        list(train["files"]), int(train["sample_bytes"]), features, (steps + 1) * batch * ranks
    )
    sampler: Any = DistributedSampler(
        samples,  # type: ignore[arg-type]  # map-style: __len__ and __getitem__
        num_replicas=ranks,
        rank=rank,
        shuffle=True,
        seed=0,
    )
    workers = int(train["loader_workers"])
    loader: Any = DataLoader(
        samples,  # type: ignore[arg-type]
        batch_size=batch,
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=2 if workers else None,
    )

    def average_gradients() -> None:
        grads = [p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=group)
        flat /= ranks
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    wait = busy = 0.0
    it = iter(loader)
    for step in range(steps + 1):
        start = time.perf_counter()
        x, y = next(it)
        got = time.perf_counter()
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        for param in params:
            param.grad = None
        torch.nn.functional.mse_loss(model(x), y).backward()
        if ranks > 1:
            average_gradients()
        with torch.no_grad():
            for param in params:
                param.add_(param.grad, alpha=-0.01)
        sync()
        if step:
            wait += got - start
            busy += time.perf_counter() - start
    del it, loader
    return {"step_s": busy, "wait_s": wait, "samples": float(steps * batch)}


def train_phase(
    torch: Any,
    dist: Any,
    rank: int,
    world: int,
    per_node: int,
    device: Any,
    train: dict[str, Any],
    smi: str | None,
) -> dict[str, Any] | None:
    """On every rank: restore the checkpoint (rank 0, a process that did not write it), then
    the loop and the all-reduce at 1, 2, 4 ... ``world`` ranks, ``per_node`` ranks on each
    node (ranks are numbered node by node, so a point of ``k`` ranks spans the first
    ``ceil(k / per_node)`` nodes). Rank 0 returns the result."""
    out: dict[str, Any] = {"checkpoint": None, "loop": None, "scaling": None, "error": None}
    checkpoint = train.get("checkpoint")
    if rank == 0 and checkpoint:
        out["checkpoint"] = checkpoint_restore(torch, checkpoint["path"], checkpoint["manifest"])
    dist.barrier()
    points: list[dict[str, Any]] = []
    util: dict[str, Any] = {
        "measured": False,
        "reason": "the loop ran on CPU ranks (no CUDA device): there is no GPU utilisation "
        "to sample, and an emulated nvidia-smi's figure would describe no work",
        "per_gpu": {},
    }
    for k in scaling_points(world):
        point_started = time.perf_counter()
        group = None if k == world else dist.new_group(ranks=list(range(k)))
        mine = torch.zeros(3, dtype=torch.float64, device=device)
        busbw = None
        if rank < k:
            sampler = None
            if k == world and device.type == "cuda" and rank == 0:
                _proc, sampler = sample_utilisation(smi)
            figures = train_loop(torch, dist, group, k, rank, device, train)
            if sampler is not None:
                util = sampler()
            mine = torch.tensor(
                [figures["step_s"], figures["wait_s"] / max(figures["step_s"], 1e-9), 0.0],
                dtype=torch.float64,
                device=device,
            )
            # The slowest rank sets the pace; its share of waiting is the one reported.
            dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=group)
            size = int(train["allreduce_bytes"])
            if 2 <= k < world:
                buf = torch.zeros(max(1, size // 4), dtype=torch.float32, device=device)
                local = timed_allreduce(
                    torch, dist, buf, int(train["iters"]), int(train["warmup"]), device, group
                )
                slowest = torch.tensor([local], dtype=torch.float64, device=device)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
                busbw = buf.numel() * 4 / float(slowest.item()) / 1e9 * busbw_factor(k)
        dist.barrier()
        if rank == 0:
            step_s = float(mine[0].item())
            points.append(
                {
                    "ranks": k,
                    "nodes": -(-k // per_node),
                    "samples_per_s": k * int(train["steps"]) * int(train["batch"]) / step_s
                    if step_s > 0
                    else None,
                    "data_wait_share": float(mine[1].item()),
                    "allreduce_busbw_gbps": busbw,
                    "duration_s": time.perf_counter() - point_started,
                }
            )
    if rank != 0:
        return None
    base = points[0]["samples_per_s"]
    for point in points:
        rate = point["samples_per_s"]
        point["efficiency"] = (
            float(rate) / (point["ranks"] * float(base)) if rate and base else None
        )
    full = points[-1]
    out["loop"] = {
        "ranks": full["ranks"],
        "device": device.type,
        "steps": int(train["steps"]),
        "batch": int(train["batch"]),
        "sample_bytes": int(train["sample_bytes"]),
        "loader_workers": int(train["loader_workers"]),
        "nodes": full["nodes"],
        "samples_per_s": full["samples_per_s"],
        "data_wait_share": full["data_wait_share"],
        "gpu_util": util,
    }
    out["scaling"] = {
        "points": points,
        "allreduce_size_bytes": int(train["allreduce_bytes"]),
        "note": "all-reduce busbw at all ranks is the all-reduce section's row",
    }
    return out


def loop_dataset(spec: dict[str, Any], data_path: str) -> dict[str, Any]:
    """The data set the random reads and the loop read (``storage.files`` files of
    ``storage.file_bytes``) in a folder of its own under ``data_path``; ``error`` when it
    could not be written. :func:`remove_storage` removes it."""
    storage = spec["storage"]
    work = os.path.join(data_path, f".gpunode-accept-train-{os.getpid()}")
    out: dict[str, Any] = {"dir": work, "dataset": None, "reads": None, "checkpoint": None}
    try:
        dataset = make_dataset(
            os.path.join(work, "samples"), int(storage["files"]), int(storage["file_bytes"])
        )
    except OSError as err:
        out["error"] = f"{err.filename or work}: {err.strerror or err}"
        return out
    out["dataset"] = {k: v for k, v in dataset.items() if k != "files"}
    out["files"] = dataset["files"]
    out["error"] = None
    return out


def run_storage_checks(spec: dict[str, Any], torch: Any, data_path: str) -> dict[str, Any]:
    """The framework process's part: the data set, the random reads and the checkpoint
    write. The data set and checkpoint stay for the ranks; :func:`remove_storage` cleans up."""
    storage = spec["storage"]
    started = time.perf_counter()
    out = loop_dataset(spec, data_path)
    if out["error"]:
        return out
    out["reads"] = random_reads(
        out["files"],
        int(storage["file_bytes"]),
        int(storage["reads"]),
        int(storage["workers"]),
        int(storage["min_read_bytes"]),
        int(storage["max_read_bytes"]),
    )
    if torch is not None:
        out["checkpoint"] = checkpoint_write(
            torch, os.path.join(out["dir"], "checkpoint.pt"), int(storage["checkpoint_bytes"])
        )
    out["duration_s"] = time.perf_counter() - started
    return out


def remove_storage(storage: dict[str, Any] | None) -> None:
    """Remove what :func:`run_storage_checks` wrote."""
    if storage and storage.get("dir"):
        shutil.rmtree(storage["dir"], ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# per-GPU GEMM, memory bandwidth and host-to-device copies


def link_under_load(
    smi: str | None, index: int, work: Callable[[], None], settle_s: float = 0.5
) -> dict[str, Any] | None:
    """The PCIe link of GPU ``index`` sampled by nvidia-smi while ``work`` runs in a loop.

    An idle GPU lowers its link (nvidia-smi --help-query-gpu: the current link "may be reduced
    when the GPU is not in use"); under host-to-device copies it must run at its maximum.
    """
    if smi is None:
        return None
    stop = threading.Event()
    failed: list[str] = []

    def busy() -> None:
        try:
            while not stop.is_set():
                work()
        except Exception as err:  # reported with the sample, never raised from the thread
            failed.append(f"{type(err).__name__}: {err}")

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    try:
        time.sleep(settle_s)  # the link retrains within microseconds; let the copies start
        rc, stdout, _ = sh(
            [
                smi,
                "-i",
                str(index),
                f"--query-gpu={','.join(LINK_FIELDS)}",
                "--format=csv,noheader,nounits",
            ]
        )
    finally:
        stop.set()
        thread.join(timeout=60)
    rows = parse_smi_csv(stdout, LINK_FIELDS) if rc == 0 else []
    if failed or not rows:
        return {
            "gpu": index,
            "gen": None,
            "width": None,
            "error": failed[0] if failed else "no sample",
        }
    return {
        "gpu": index,
        "gen": smi_int(rows[0]["pcie.link.gen.current"]),
        "width": smi_int(rows[0]["pcie.link.width.current"]),
        "error": None,
    }


def gpu_perf(torch: Any, ngpus: int, spec: dict[str, Any], smi: str | None) -> dict[str, Any]:
    """GEMM TFLOPS (bf16), device memory bandwidth and pinned h2d bandwidth, per GPU, and the
    PCIe link sampled during the host-to-device copies."""
    out: dict[str, Any] = {
        "gemm": [],
        "mem_bw": [],
        "h2d": [],
        "pcie_under_load": [],
        "error": None,
    }
    n = int(spec.get("gemm_n", 8192))
    iters = int(spec.get("gpu_iters", 20))
    nbytes = int(spec.get("mem_bytes", 1 << 30))
    try:
        for index in range(ngpus):
            dev = torch.device("cuda", index)
            torch.cuda.set_device(dev)
            a = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
            b = torch.randn(n, n, dtype=torch.bfloat16, device=dev)
            for _ in range(3):
                torch.matmul(a, b)
            torch.cuda.synchronize(dev)
            start = time.perf_counter()
            for _ in range(iters):
                torch.matmul(a, b)
            torch.cuda.synchronize(dev)
            out["gemm"].append(
                {"gpu": index, "tflops": 2 * n**3 * iters / (time.perf_counter() - start) / 1e12}
            )
            del a, b
            src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            dst.copy_(src)
            torch.cuda.synchronize(dev)
            start = time.perf_counter()
            for _ in range(iters):
                dst.copy_(src)
            torch.cuda.synchronize(dev)
            # A device-to-device copy reads and writes every byte.
            out["mem_bw"].append(
                {"gpu": index, "gbps": 2 * nbytes * iters / (time.perf_counter() - start) / 1e9}
            )
            del dst
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            src.copy_(host, non_blocking=True)
            torch.cuda.synchronize(dev)
            start = time.perf_counter()
            for _ in range(iters):
                src.copy_(host, non_blocking=True)
            torch.cuda.synchronize(dev)
            out["h2d"].append(
                {"gpu": index, "gbps": nbytes * iters / (time.perf_counter() - start) / 1e9}
            )

            def copy(src: Any = src, host: Any = host, dev: Any = dev) -> None:
                src.copy_(host, non_blocking=True)
                torch.cuda.synchronize(dev)

            sample = link_under_load(smi, index, copy)
            if sample is not None:
                out["pcie_under_load"].append(sample)
            del src, host
            torch.cuda.empty_cache()
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {err}"
    return out


# ---------------------------------------------------------------------------------------------


def query_topology(smi: str | None) -> dict[str, Any]:
    """`nvidia-smi topo -m` as printed: the controller parses and judges the matrix
    (toolkit/acceptance/topology.py), as it does nccl-tests output."""
    started = time.perf_counter()
    rc, stdout, stderr = sh([smi, "topo", "-m"]) if smi else (127, "", "nvidia-smi not found")
    error = None if rc == 0 else (stderr or stdout).strip() or f"exited {rc}"
    return {
        "raw_output": stdout,
        "error": error,
        "duration_s": round(time.perf_counter() - started, 3),
    }


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


def run_node(spec: dict[str, Any]) -> dict[str, Any]:
    """Every single-node check; returns the result document."""
    started = time.perf_counter()
    # CUDA numbers GPUs fastest first unless told otherwise; nvidia-smi numbers them by PCI
    # bus id (CUDA C Programming Guide, "CUDA Environment Variables": CUDA_DEVICE_ORDER).
    # One order keeps the per-GPU results and the nvidia-smi samples about the same GPU.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "host": socket.gethostname(),
        "started": now_iso(),
        "errors": [],
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        result["gpus"] = query_gpus(smi)
    else:
        result["gpus"] = {
            "ok": False,
            "error": "nvidia-smi not found",
            "count": 0,
            "list": [],
            "unsupported_fields": [],
            "memory_error": None,
        }
    result["versions"] = query_versions(smi, list(spec.get("packages", [])))
    result["topology"] = query_topology(smi)
    dcgm = query_dcgm(spec.get("dcgm_diag_level"), float(spec.get("dcgm_timeout_s") or 900))
    if dcgm is not None:
        result["dcgm"] = dcgm
    result["kernel_log"] = read_kernel_log(
        spec.get("kernel_log_command") or DEFAULT_KERNEL_LOG_COMMAND
    )
    result["state"] = read_state(spec["state_file"])
    result["identity"] = query_identity(str(spec.get("dmi_dir") or DMI_DIR))
    container = spec.get("container")
    framework = run_in_container(spec, container) if container else run_framework(spec)
    result["versions"].update(framework.pop("versions", {}))
    result.update(framework)
    result["duration_s"] = time.perf_counter() - started
    return result


# The options NVIDIA's PyTorch containers are documented to need for NCCL (NGC PyTorch
# release notes, "Running PyTorch": --ipc=host --ulimit memlock=-1 --ulimit stack=67108864);
# the inventory may replace them (gpunode_accept_container_options).
DEFAULT_CONTAINER_OPTIONS = ("--ipc=host", "--ulimit=memlock=-1", "--ulimit=stack=67108864")


def container_argv(
    image: str,
    workdir: str,
    data_path: str | None = None,
    env: dict[str, str] | None = None,
    options: list[str] | tuple[str, ...] = DEFAULT_CONTAINER_OPTIONS,
) -> list[str]:
    """``docker run`` of this runner inside the training image, the way a training job runs.

    GPUs are passed as the NVIDIA Container Toolkit does it for Docker (``--gpus all``), the
    host's network serves the multi-node rendezvous, and the work folder (this runner, spec
    and results) and the data disk are mounted at the same paths.
    """
    argv = ["docker", "run", "--rm", "--network=host", "--gpus=all", *options]
    argv += ["-v", f"{workdir}:{workdir}"]
    if data_path:
        argv += ["-v", f"{data_path}:{data_path}"]
    for key, value in sorted((env or {}).items()):
        argv += ["-e", f"{key}={value}"]
    return [*argv, "--entrypoint", "python3", image, os.path.join(workdir, "node_runner.py")]


def run_in_container(spec: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The framework's checks inside the training image (``framework`` in the container)."""
    workdir = str(spec.get("workdir", "/tmp"))
    spec_path = os.path.join(workdir, "framework-spec.json")
    out_path = os.path.join(workdir, f"framework-{os.getpid()}.json")
    inner = {k: v for k, v in spec.items() if k != "container"}
    write_json(spec_path, inner)
    options = container.get("options") or DEFAULT_CONTAINER_OPTIONS
    argv = container_argv(str(container["image"]), workdir, spec.get("data_path"), None, options)
    argv += ["framework", "--spec", spec_path, "--out", out_path]
    info: dict[str, Any] = {"image": container["image"], "ok": False, "error": None}
    rc, stdout, stderr = sh(argv, timeout=float(spec.get("timeout_s", 600)) + 300)
    framework: dict[str, Any] = {}
    if rc == 0:
        try:
            with open(out_path, encoding="utf-8") as handle:
                framework = json.load(handle)
            info["ok"] = True
        except (OSError, ValueError) as err:
            info["error"] = f"no result from the container: {err}"
    else:
        info["error"] = f"docker run exited {rc}: {(stderr or stdout).strip()[-600:]}"
    if not info["ok"]:
        framework = {
            "cuda_device_count": 0,
            "allreduce": {"engine": "torch", "rows": [], "error": f"container: {info['error']}"},
            "gpu_perf": None,
            "data": None,
        }
    framework["container"] = info
    return framework


def run_framework(spec: dict[str, Any]) -> dict[str, Any]:
    """The checks that run with the framework: versions, all-reduce, GPU speed, /data."""
    # CUDA numbers GPUs fastest first unless told otherwise; nvidia-smi by PCI bus id.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    # In the training image, the NVIDIA runtime mounts nvidia-smi (the utility capability).
    smi = shutil.which("nvidia-smi")
    result: dict[str, Any] = {"versions": {}}
    torch = import_torch()
    cuda_gpus = 0
    if torch is not None:
        result["versions"]["torch"] = torch.__version__
        result["versions"]["torch_cuda"] = getattr(torch.version, "cuda", None)
        try:
            cuda_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception:
            cuda_gpus = 0
        probe = nccl_probe(torch)
        result["versions"]["nccl"] = probe
        result["versions"]["nccl_loaded"] = probe["version"]
    result["cuda_device_count"] = cuda_gpus
    sizes = [int(s) for s in spec.get("sizes", [1 << 20])]
    iters = int(spec.get("iters", 20))
    warmup = int(spec.get("warmup_iters", 5))
    timeout = float(spec.get("timeout_s", 600))
    engine = spec.get("engine", "auto")
    data_path = spec.get("data_path")
    storage = train_file = None
    if data_path and spec.get("storage") and os.path.isdir(data_path):
        storage = run_storage_checks(spec, torch, data_path)
        train_file = write_train_spec(spec, storage, sizes)
    nccl_tests = find_nccl_tests() if cuda_gpus and engine in ("auto", "nccl-tests") else None
    if nccl_tests:
        result["allreduce"] = run_nccl_tests(
            # Factor 2 from the smallest size reaches every power-of-two floor size.
            nccl_tests,
            cuda_gpus,
            sizes,
            iters,
            warmup,
            2,
            timeout,
        )
    elif engine == "nccl-tests":
        result["allreduce"] = {
            "engine": "nccl-tests",
            "rows": [],
            "error": "engine nccl-tests asked for, but all_reduce_perf or a GPU is missing",
        }
    elif torch is None:
        result["allreduce"] = {"engine": "torch", "rows": [], "error": "torch is not installed"}
    else:
        device = "cuda" if cuda_gpus else "cpu"
        nproc = cuda_gpus or int(spec.get("cpu_ranks_per_node", 2))
        out_file = os.path.join(spec.get("workdir", "/tmp"), f"allreduce-{os.getpid()}.json")
        result["allreduce"] = launch_ranks(
            1,
            0,
            nproc,
            "127.0.0.1",
            free_port(),
            sizes,
            iters,
            warmup,
            device,
            timeout,
            out_file,
            train=train_file,
        )
    train = result["allreduce"].pop("train", None) if train_file else None
    if train_file and torch is not None and nccl_tests:
        # all_reduce_perf ran the all-reduce: the ranks are launched for the loop alone.
        out_file = os.path.join(spec.get("workdir", "/tmp"), f"train-{os.getpid()}.json")
        launched = launch_ranks(
            1,
            0,
            cuda_gpus,
            "127.0.0.1",
            free_port(),
            [],
            iters,
            warmup,
            "cuda",
            timeout,
            out_file,
            train=train_file,
        )
        train = launched.get("train") or {"error": launched.get("error") or "no result"}
    elif train_file and train is None:
        train = {"error": result["allreduce"].get("error") or "the ranks ran no training loop"}
    result.update(training_results(storage, train, torch is not None))
    remove_storage(storage)
    if train_file:
        with contextlib.suppress(OSError):
            os.unlink(train_file)
    if torch is not None and cuda_gpus:
        result["gpu_perf"] = gpu_perf(torch, cuda_gpus, spec, smi)
    else:
        result["gpu_perf"] = None
    result["data"] = (
        data_throughput(data_path, int(spec.get("data_size_bytes", 1 << 30))) if data_path else None
    )
    return result


def write_train_spec(spec: dict[str, Any], storage: dict[str, Any], sizes: list[int]) -> str | None:
    """The ranks' part of the training-shaped checks, as a file for ``worker --train``."""
    if storage.get("error") or not storage.get("files"):
        return None
    train = dict(spec["train"])
    checkpoint = storage.get("checkpoint") or {}
    train.update(
        files=storage["files"],
        iters=int(spec.get("iters", 20)),
        warmup=int(spec.get("warmup_iters", 5)),
        # The scaling points' all-reduce: the largest size the all-reduce section runs.
        allreduce_bytes=int(train.get("allreduce_bytes") or max(sizes)),
        checkpoint=None
        if checkpoint.get("error") or not checkpoint.get("manifest")
        else {"path": checkpoint["path"], "manifest": checkpoint["manifest"]},
    )
    path = os.path.join(str(spec.get("workdir", "/tmp")), f"train-spec-{os.getpid()}.json")
    write_json(path, train)
    return path


def training_results(
    storage: dict[str, Any] | None, train: dict[str, Any] | None, have_torch: bool
) -> dict[str, Any]:
    """The ``storage``, ``checkpoint`` and ``train`` sections of the result."""
    if storage is None:
        return {"storage": None, "checkpoint": None, "train": None}
    reads = storage.get("reads") or {}
    written = storage.get("checkpoint")
    restored = (train or {}).get("checkpoint")
    if not have_torch:
        checkpoint: dict[str, Any] | None = {"error": "torch is not installed"}
    elif written is None or written.get("error"):
        checkpoint = {"error": (written or {}).get("error") or "no checkpoint was written"}
    else:
        checkpoint = {k: v for k, v in written.items() if k != "manifest"}
        checkpoint["fresh_process"] = True
        if restored is None:
            checkpoint["error"] = (train or {}).get("error") or "the checkpoint was not restored"
        else:
            checkpoint.update(restored)
            checkpoint["error"] = restored.get("error")
    return {
        "storage": {
            "path": storage.get("dir"),
            "dataset": storage.get("dataset"),
            "reads": reads or None,
            "duration_s": storage.get("duration_s"),
            "error": storage.get("error") or reads.get("error"),
        },
        "checkpoint": checkpoint,
        "train": train if have_torch else {"error": "torch is not installed"},
    }


def write_json(path: str, document: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a result."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the runner."""
    parser = argparse.ArgumentParser(prog="gpunode-node-runner")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("--spec", required=True)
    p_run.add_argument("--out", required=True)
    p_framework = sub.add_parser("framework", help="the framework's checks only (in an image)")
    p_framework.add_argument("--spec", required=True)
    p_framework.add_argument("--out", required=True)
    sub.add_parser("nccl-probe", help="print which NCCL the framework loads, as JSON")
    for name in ("allreduce", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--sizes", type=int, nargs="*", required=True)
        p.add_argument("--iters", type=int, default=20)
        p.add_argument("--warmup", type=int, default=5)
        p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
        p.add_argument("--timeout", type=float, default=600)
        p.add_argument("--p2p", action="store_true")
        p.add_argument("--train", help="spec file of the training-shaped checks (JSON)")
        p.add_argument("--out")
        if name == "allreduce":
            p.add_argument(
                "--train-from",
                help="the node's runner spec (JSON): write the loop's data set on its data "
                "path and run the loop at every scaling point across the nodes",
            )
            p.add_argument("--nnodes", type=int, required=True)
            p.add_argument("--node-rank", type=int, required=True)
            p.add_argument("--nproc", type=int, default=0, help="0: one per GPU, else CPU ranks")
            p.add_argument("--master-addr", required=True)
            p.add_argument("--master-port", type=int, required=True)
    args = parser.parse_args(argv)
    if args.cmd in ("run", "framework"):
        try:
            with open(args.spec, encoding="utf-8") as handle:
                spec = json.load(handle)
        except (OSError, ValueError) as err:
            print(f"cannot read spec {args.spec}: {err}", file=sys.stderr)
            return 2
        write_json(args.out, run_node(spec) if args.cmd == "run" else run_framework(spec))
        return 0
    if args.cmd == "worker":
        return worker(args)
    if args.cmd == "nccl-probe":
        print(json.dumps(nccl_probe(import_torch()), sort_keys=True))
        return 0
    torch = import_torch()
    device = args.device
    cuda_gpus = 0
    if torch is not None and device in ("auto", "cuda") and torch.cuda.is_available():
        cuda_gpus = torch.cuda.device_count()
    if device == "auto":
        device = "cuda" if cuda_gpus else "cpu"
    nproc = args.nproc or cuda_gpus or 1
    loop: dict[str, Any] = {"storage": None, "file": args.train, "error": None}
    if torch is None:
        result: dict[str, Any] = {"engine": "torch", "rows": [], "error": "torch is not installed"}
    else:
        if args.train_from:
            loop = prepare_loop(args.train_from, args.sizes)
        out_file = f"{args.out}.rank0" if args.out else None
        result = launch_ranks(
            args.nnodes,
            args.node_rank,
            nproc,
            args.master_addr,
            args.master_port,
            args.sizes,
            args.iters,
            args.warmup,
            device,
            args.timeout,
            out_file,
            p2p=args.p2p,
            train=loop["file"],
        )
        if loop["error"] and result.get("train") is None:
            result["train"] = {"error": loop["error"]}
        remove_storage(loop["storage"])
        if args.train_from and loop["file"]:
            with contextlib.suppress(OSError):
                os.unlink(loop["file"])
    if args.out:
        write_json(args.out, result)
    return 0


def prepare_loop(spec_path: str, sizes: list[int]) -> dict[str, Any]:
    """The multi-node loop's part on this node: its data set on the spec's data path and the
    ranks' train spec (no checkpoint: each node's was restored in its own run).

    Returns:
        ``storage`` (for :func:`remove_storage`), ``file`` (the train spec, None when the
        data set could not be written) and ``error``.
    """
    try:
        with open(spec_path, encoding="utf-8") as handle:
            spec = json.load(handle)
    except (OSError, ValueError) as err:
        return {"storage": None, "file": None, "error": f"cannot read spec {spec_path}: {err}"}
    data_path = spec.get("data_path")
    if not data_path or not spec.get("storage") or not os.path.isdir(data_path):
        return {"storage": None, "file": None, "error": f"no data path {data_path} here"}
    storage = loop_dataset(spec, data_path)
    if storage["error"]:
        return {"storage": storage, "file": None, "error": storage["error"]}
    return {"storage": storage, "file": write_train_spec(spec, storage, sizes), "error": None}


if __name__ == "__main__":
    sys.exit(main())
