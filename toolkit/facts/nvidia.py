"""The NVIDIA driver and GPUs as the node reports them: every ``nvidia-smi`` query gpunode runs
(its arguments and fields) and their parsers, and ``/proc/driver/nvidia/version``.

The control machine's probe (:data:`SMI_LIST`, :data:`SMI_DRIVER`) and the node-side runner
(``toolkit.acceptance.node_runner``, which ships this module: standard library only) both
build their commands here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

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
