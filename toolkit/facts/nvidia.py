"""The NVIDIA driver and GPUs as the node reports them: every ``nvidia-smi`` query gpunode runs
(its arguments and fields) and their parsers, ``nvidia-smi -q``'s report read as a tree with
its memory-error counters, and ``/proc/driver/nvidia/version``.

The control machine's probe (:data:`SMI_LIST`, :data:`SMI_DRIVER`) and the node-side runner
(``toolkit.acceptance.node_runner``, which ships this module: standard library only) both
build their commands here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.facts.probe import Fact

MISMATCH = "Driver/library version mismatch"


_SMI_LIST = re.compile(r"^GPU\s+(?P<index>\d+):\s+(?P<name>.+?)\s+\(UUID:\s*(?P<uuid>[^)]+)\)")


def parse_nvidia_smi_list(text: str) -> list[dict[str, str]]:
    """GPUs from ``nvidia-smi -L``: index, name and UUID of each."""
    gpus = []
    for line in text.splitlines():
        match = _SMI_LIST.match(line.strip())
        if match:
            gpus.append(
                {"index": match["index"], "name": match["name"], "uuid": match["uuid"].strip()}
            )
    return gpus


_VERSION = re.compile(r"\b(\d{3}\.\d+(?:\.\d+)?)\b")


@dataclass(frozen=True)
class LoadedDriver:
    """What the kernel has loaded, as ``nvidia-smi`` or ``/proc/driver/nvidia/version`` say."""

    version: str | None
    mismatch: bool = False
    library_version: str | None = None
    source: str = ""
    detail: str = ""


def parse_nvidia_smi_driver(stdout: str, stderr: str, rc: int | None) -> LoadedDriver:
    """The loaded driver from ``nvidia-smi --query-gpu=driver_version --format=csv,noheader``.

    Args:
        stdout: Its standard output (one version per GPU).
        stderr: Its standard error.
        rc: Its exit status; None when ``nvidia-smi`` is not installed.

    Returns:
        The loaded version; on a driver/library mismatch, ``mismatch`` and the library version
        (newer drivers print ``NVML library version: <V>``).
    """
    if rc is None:
        return LoadedDriver(version=None, source="nvidia-smi", detail="nvidia-smi not installed")
    text = f"{stdout}\n{stderr}"
    if MISMATCH in text:
        library = re.search(r"NVML library version:\s*(\S+)", text)
        return LoadedDriver(
            version=None,
            mismatch=True,
            library_version=library.group(1) if library else None,
            source="nvidia-smi",
            detail=MISMATCH,
        )
    if rc != 0:
        first = text.strip().splitlines()[0] if text.strip() else f"exit status {rc}"
        return LoadedDriver(version=None, source="nvidia-smi", detail=first)
    versions = {line.strip() for line in stdout.splitlines() if line.strip()}
    if len(versions) == 1:
        return LoadedDriver(version=versions.pop(), source="nvidia-smi")
    if not versions:
        return LoadedDriver(version=None, source="nvidia-smi", detail="no GPU reported")
    return LoadedDriver(
        version=None,
        source="nvidia-smi",
        detail=f"GPUs report different drivers: {sorted(versions)}",
    )


def parse_proc_driver_version(text: str) -> tuple[str | None, bool | None]:
    """Version and flavour from ``/proc/driver/nvidia/version``: (version, open or not)."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = _VERSION.search(line)
            return (match.group(1) if match else None, "Open Kernel Module" in line)
    return (None, None)


SMI_LIST = Fact(
    "smi_list",
    ("nvidia-smi", "-L"),
    lambda rc, text: parse_nvidia_smi_list(text) if rc == 0 else [],
)
SMI_DRIVER = Fact(
    "smi_driver",
    ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"),
    lambda rc, text: parse_nvidia_smi_driver(text, "", rc),
)
PROC_VERSION = Fact(
    "proc_version",
    ("cat", "/proc/driver/nvidia/version"),
    lambda rc, text: parse_proc_driver_version(text) if rc == 0 else (None, None),
)


def _lines(rc: int | None, text: str) -> list[str] | None:
    """The non-empty lines of a query that ran (None: nvidia-smi is missing or failed)."""
    return [line.strip() for line in text.splitlines() if line.strip()] if rc == 0 else None


# Read by the roles when they need them (``gpunode_node_facts`` with ``read``), not by the
# converge's probe: what a step has just changed, or what runs on the GPUs now.
# ``persistence_mode``: "Enabled" or "Disabled", one line per GPU (nvidia-smi(1), "Persistence
# Mode"; the same words as `nvidia-smi -q` prints in the captures of tests/data/real/).
SMI_PERSISTENCE = Fact(
    "smi_persistence",
    ("nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader"),
    _lines,
)
# The compute processes on any GPU (nvidia-smi(1), --query-compute-apps: "information about
# currently active compute processes"): one "pid, process_name" line each, none when idle.
SMI_COMPUTE_APPS = Fact(
    "smi_compute_apps",
    ("nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"),
    _lines,
)


# --- nvidia-smi's CSV queries (``nvidia-smi --help-query-gpu``) ---------------------------------

CSV = "--format=csv,noheader,nounits"
# The fields read per GPU. Health fields are read in a second query so that a driver lacking
# one of them still reports the inventory.
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
# Newer drivers call the throttle bitmask "clocks_event_reasons".
FIELD_ALIASES = {"clocks_throttle_reasons.active": "clocks_event_reasons.active"}
# The link sampled while host-to-device copies run.
LINK_FIELDS = ("pcie.link.gen.current", "pcie.link.width.current")
# utilization.gpu: "Percent of time over the past sample period during which one or more
# kernels was executing on the GPU".
UTIL_FIELDS = ("index", "utilization.gpu")


def query_gpu(
    smi: str, fields: Sequence[str], *, gpu: int | None = None, loop_ms: int | None = None
) -> list[str]:
    """``nvidia-smi --query-gpu=FIELDS`` as CSV without header or units: every GPU, or the one
    of index ``gpu``; every ``loop_ms`` milliseconds until stopped when given."""
    argv = [smi] + (["-i", str(gpu)] if gpu is not None else [])
    argv += [f"--query-gpu={','.join(fields)}", CSV]
    return argv + ([f"--loop-ms={loop_ms}"] if loop_ms is not None else [])


def query_driver(smi: str) -> list[str]:
    """The loaded driver's version per GPU (:func:`parse_nvidia_smi_driver` reads it)."""
    return [smi, *SMI_DRIVER.argv[1:]]


def query_report(smi: str) -> list[str]:
    """``nvidia-smi -q``: the full report of every GPU (the memory-error counters)."""
    return [smi, "-q"]


def query_topology(smi: str) -> list[str]:
    """``nvidia-smi topo -m``: the GPU and NIC link matrix."""
    return [smi, "topo", "-m"]


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


def parse_smi_csv(text: str, fields: Sequence[str]) -> list[dict[str, str | None]]:
    """Rows of :data:`CSV` output, keyed by field; a line of another width is skipped."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        values = [smi_value(v) for v in line.split(",")]
        if len(values) != len(fields):
            continue
        rows.append(dict(zip(fields, values, strict=False)))
    return rows


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
