"""What a lab is made of: the options of ``gpunode lab up``, validated.

Pure: no Docker, no files. The CLI and the tests build a ``LabSpec``; ``toolkit.lab.lab``
turns it into containers, disks and an inventory.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from pydantic import Field, ValidationError, field_validator, model_validator

from toolkit.config import StrictModel
from toolkit.errors import ConfigError, clip
from toolkit.lab.faults import FAULTS
from toolkit.lab.hardware import GPU_MODELS

# The `slow-data` fault's read limits per data disk (blkio.throttle.read_bps_device and
# read_iops_device): a disk in trouble, two orders of magnitude below the lab's healthy loop
# disks (measured: GB/s and thousands of reads per second), yet fast enough that an
# acceptance run on it still ends within seconds.
SLOW_DATA_READ_BPS = 16 * 1024**2
SLOW_DATA_READ_IOPS = 100

NAME_PATTERN = r"^[a-z][a-z0-9-]{0,23}$"
MAX_NODES = 16
SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
DISK_MODEL = "LAB_NVMe_SSD"  # as it appears in /dev/disk/by-id (spaces become underscores)


def parse_size(text: str) -> int:
    """Parse a disk size like ``2G``, ``512M`` or ``1.5GiB`` into bytes (binary units).

    Raises:
        ConfigError: The text is not a positive size.
    """
    match = re.fullmatch(
        r"\s*([0-9]{1,15}(?:\.[0-9]{1,9})?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE
    )
    if not match:
        raise ConfigError(
            f"disk size {clip(repr(text))}: expected a number with an optional unit K, M, G or T "
            "(for example 2G or 512M)"
        )
    value = float(match.group(1)) * SIZE_UNITS[match.group(2).upper()]
    if value < 64 * 1024**2:
        raise ConfigError(f"disk size {clip(repr(text))}: must be at least 64M (XFS needs room)")
    # Loop devices want whole 512-byte sectors.
    return int(value) // 512 * 512


def parse_fault(text: str) -> tuple[int, str]:
    """Parse ``NODE_INDEX:FAULT`` (for example ``2:ecc``) into (index, fault).

    Raises:
        ConfigError: The index is not a positive number or the fault is unknown.
    """
    index_text, sep, fault = text.partition(":")
    if not sep or not index_text.strip().isdigit():
        raise ConfigError(
            f"fault {clip(repr(text))}: expected NODE_INDEX:FAULT, for example 1:ecc "
            f"(faults: {', '.join(FAULTS)})"
        )
    fault = fault.strip()
    check_fault(fault)
    index = int(index_text)
    if index < 1:
        raise ConfigError(f"fault {clip(repr(text))}: node indexes start at 1")
    return index, fault


def check_fault(fault: str) -> str:
    """Return ``fault`` if it is a known fault name.

    Raises:
        ConfigError: Unknown name, with the closest known one.
    """
    if fault not in FAULTS:
        from difflib import get_close_matches

        close = get_close_matches(fault, list(FAULTS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)}){hint}")
    return fault


def name_tag(name: str) -> str:
    """Four hex characters that tell labs apart in serials and subnets."""
    return hashlib.sha256(name.encode()).hexdigest()[:4].upper()


def disk_serial(lab_name: str, node_index: int, disk_index: int) -> str:
    """The serial of a lab data disk: ``S<lab tag>N<node>D<disk>``, e.g. ``S1A2BN01D00``.

    Serials differ between nodes and between labs, like real NVMe serials; the pattern lets
    a reader tell lab, node and disk apart at a glance.
    """
    return f"S{name_tag(lab_name)}N{node_index:02d}D{disk_index:02d}"


def by_id_name(serial: str, model: str = DISK_MODEL) -> str:
    """The name under ``/dev/disk/by-id/`` of a lab disk, in the NVMe scheme of udev."""
    return f"nvme-{model}_{serial}"


def node_name(lab_name: str, index: int) -> str:
    """A node's container name and hostname: ``<lab>-node-<i>``, i from 1."""
    return f"{lab_name}-node-{index}"


class LabSpec(StrictModel):
    """Everything ``gpunode lab up`` builds, as one validated value."""

    name: str = Field(default="gpunode", pattern=NAME_PATTERN)
    nodes: int = Field(default=2, ge=1, le=MAX_NODES)
    gpus: int = Field(default=8, ge=1, le=8)
    gpu_model: str = "H100"
    nvswitch: bool | None = Field(
        default=None, description="None: derived from the model and GPU count."
    )
    disks: int = Field(default=2, ge=0, le=8)
    disk_size: int = Field(default=2 * 1024**3, ge=64 * 1024**2)
    faults: tuple[tuple[int, str], ...] = ()
    ca_bundle: Path | None = None
    slow_net_rate: str = Field(default="100mbit", pattern=r"^\d+(kbit|mbit|gbit)$")
    # A Slurm cluster across the nodes (toolkit/lab/slurm.py): slurmctld on node 1, slurmd on all.
    slurm: bool = False

    @field_validator("gpu_model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        if model.upper() not in GPU_MODELS:
            raise ValueError(f"unknown GPU model {model!r} (known: {', '.join(GPU_MODELS)})")
        return model.upper()

    @field_validator("faults")
    @classmethod
    def _known_faults(cls, faults: tuple[tuple[int, str], ...]) -> tuple[tuple[int, str], ...]:
        for _index, fault in faults:
            if fault not in FAULTS:
                raise ValueError(f"unknown fault {fault!r} (known: {', '.join(FAULTS)})")
        return tuple(sorted(set(faults)))

    @model_validator(mode="after")
    def _gpus_on_one_board(self) -> LabSpec:
        board = GPU_MODELS[self.gpu_model].board_gpus
        if self.gpus > board:
            raise ValueError(
                f"--gpus {self.gpus}: a {self.gpu_model} board has {board} GPUs at most"
            )
        return self

    @model_validator(mode="after")
    def _faults_on_existing_nodes(self) -> LabSpec:
        for index, fault in self.faults:
            if not 1 <= index <= self.nodes:
                raise ValueError(
                    f"--fault {index}:{fault} names node {index}, but the lab has nodes "
                    f"1..{self.nodes}"
                )
        return self

    @property
    def has_nvswitch(self) -> bool:
        """NVSwitch as given, or derived: a full board of an NVLink (SXM) model has one (an
        8-GPU HGX board; a 4-GPU GB200 tray, whose NVSwitches sit in the rack's switch trays)."""
        if self.nvswitch is not None:
            return self.nvswitch
        model = GPU_MODELS[self.gpu_model]
        return model.form_factor == "SXM" and model.nvlinks > 0 and self.gpus == model.board_gpus

    def node_faults(self, index: int) -> tuple[str, ...]:
        """The faults injected into node ``index``, in a stable order."""
        return tuple(sorted(fault for i, fault in self.faults if i == index))

    def shape(self) -> dict[str, object]:
        """The parts that cannot change on a running lab (everything but faults and CA)."""
        return {
            "nodes": self.nodes,
            "gpus": self.gpus,
            "gpu_model": self.gpu_model,
            "nvswitch": self.has_nvswitch,
            "disks": self.disks,
            "disk_size": self.disk_size,
            "slurm": self.slurm,
        }


def build_spec(**options: object) -> LabSpec:
    """Validate ``lab up`` options into a ``LabSpec``; errors name the option and the rule.

    Raises:
        ConfigError: An option is out of range or unknown.
    """
    try:
        return LabSpec.model_validate(options)
    except ValidationError as err:
        problems = []
        for error in err.errors():
            # The checks across fields (the faults' node indexes, the GPUs on one board) name
            # their option in their message.
            if not error["loc"]:
                problems.append(str(error["msg"]).removeprefix("Value error, "))
                continue
            field = str(error["loc"][0])
            option = "--fault" if field == "faults" else "--" + field.replace("_", "-")
            problems.append(f"{option}: {error['msg']}")
        raise ConfigError("invalid lab options: " + "; ".join(problems)) from err
