"""The NVIDIA driver as the node reports it: ``nvidia-smi`` and ``/proc/driver/nvidia/version``."""

from __future__ import annotations

import re
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
