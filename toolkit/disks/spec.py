"""The data-disk part of a hardware profile (`hardware.data_disks`).

Example (``group_vars/<group>/hardware.yml``)::

    hardware:
      data_disks:
        disks:
          - serial: S64HNE0R100001
            size: 3.84TB
            model: SAMSUNG MZQL23T8HCLS-00A07
          - serial: S64HNE0R100002
            size: 3.84TB
        layout: auto            # 1 disk: single; 2 or more: md-raid0
        filesystem: xfs
        mount_point: /data
        allow_wipe: []          # serials that may be wiped although they carry signatures
"""

from __future__ import annotations

import posixpath
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from toolkit.config import StrictModel
from toolkit.errors import clip

# Decimal and binary unit multipliers for sizes written in a profile ("3.84TB", "16GiB").
SIZE_UNITS = {
    "": 1,
    "B": 1,
    "K": 1000,
    "KB": 1000,
    "M": 1000**2,
    "MB": 1000**2,
    "G": 1000**3,
    "GB": 1000**3,
    "T": 1000**4,
    "TB": 1000**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}
# A disk matches its profile size when within this fraction: vendors round "3.84TB" and
# disks of one model differ by a few sectors, but a 1.92TB disk never passes for 3.84TB.
SIZE_TOLERANCE = 0.02

# Mount points that belong to the operating system: data never goes there.
SYSTEM_MOUNT_POINTS = frozenset(
    {"/", "/boot", "/boot/efi", "/usr", "/var", "/etc", "/home", "/root", "/tmp", "/opt", "/srv"}
)
SYSTEM_PREFIXES = ("/proc", "/sys", "/dev", "/run", "/usr/", "/etc/", "/boot/")

LAYOUTS = ("single", "md-raid0", "btrfs-raid0")


def parse_size(text: str) -> int:
    """``"3.84TB"`` -> 3840000000000, ``"16GiB"`` -> 17179869184, ``"1024"`` -> 1024 bytes.

    Raises:
        ValueError: Not a number followed by one of the units B, KB, MB, GB, TB, KiB, MiB,
            GiB, TiB.
    """
    match = re.fullmatch(r"\s*([0-9]{1,15}(?:\.[0-9]{1,9})?)\s*([a-zA-Z]{0,3})\s*", text)
    unit = match.group(2).upper() if match else ""
    if not match or unit not in SIZE_UNITS:
        raise ValueError(
            f"size {clip(repr(text))} is not a number with a unit (B, KB, MB, GB, TB, KiB, MiB, "
            "GiB, TiB)"
        )
    return int(float(match.group(1)) * SIZE_UNITS[unit])


class DataDisk(StrictModel):
    """One data disk, named by its serial (never by kernel name)."""

    serial: str = Field(min_length=1, description="Serial number as in /dev/disk/by-id.")
    by_id: str | None = Field(default=None, description="Name under /dev/disk/by-id/.")
    size: str | None = Field(default=None, description='Expected size, e.g. "3.84TB" or "16GiB".')
    model: str | None = None

    @field_validator("serial")
    @classmethod
    def _serial_shape(cls, value: str) -> str:
        if value != value.strip() or "/" in value:
            raise ValueError("a serial has no leading or trailing spaces and no '/'")
        return value

    @field_validator("by_id")
    @classmethod
    def _by_id_shape(cls, value: str | None) -> str | None:
        if value is not None and ("/" in value or not value.strip()):
            raise ValueError("by_id is a name under /dev/disk/by-id/, without any '/'")
        return value

    @field_validator("size")
    @classmethod
    def _size_parses(cls, value: str | None) -> str | None:
        if value is not None:
            parse_size(value)
        return value

    @property
    def size_bytes(self) -> int | None:
        """The expected size in bytes (None when the profile gives none)."""
        return parse_size(self.size) if self.size is not None else None


class DataDisksSpec(StrictModel):
    """How a node's data disks become one filesystem at the mount point."""

    disks: list[DataDisk] = Field(min_length=1)
    layout: Literal["auto", "single", "md-raid0", "btrfs-raid0"] = "auto"
    filesystem: Literal["xfs", "ext4"] = "xfs"
    mount_point: str = "/data"
    allow_wipe: list[str] = Field(
        default_factory=list, description="Serials that may be wiped although they carry data."
    )
    ephemeral: bool = False
    device_timeout_s: int = Field(default=30, ge=1)
    group: str = Field(
        default="data", description="Group owning datasets/, checkpoints/ and scratch/."
    )

    @field_validator("mount_point")
    @classmethod
    def _mount_point_safe(cls, value: str) -> str:
        if not value.startswith("/") or posixpath.normpath(value) != value:
            raise ValueError("mount_point must be an absolute, normalised path such as /data")
        if value in SYSTEM_MOUNT_POINTS or value.startswith(SYSTEM_PREFIXES):
            raise ValueError(f"mount_point {value} belongs to the operating system")
        if not re.fullmatch(r"[A-Za-z0-9/_.-]+", value):
            raise ValueError("mount_point may only contain letters, digits, '/', '_', '.', '-'")
        return value

    @field_validator("group")
    @classmethod
    def _group_name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", value):
            raise ValueError("group must be a system group name (lower case, at most 32 chars)")
        return value

    @model_validator(mode="after")
    def _coherent(self) -> DataDisksSpec:
        serials = [d.serial for d in self.disks]
        dupes = sorted({s for s in serials if serials.count(s) > 1})
        if dupes:
            raise ValueError(f"disks: serial listed more than once: {', '.join(dupes)}")
        unknown = sorted(set(self.allow_wipe) - set(serials))
        if unknown:
            raise ValueError(
                f"allow_wipe names serials that are not in disks: {', '.join(unknown)}"
            )
        count = len(self.disks)
        if self.layout == "single" and count != 1:
            raise ValueError(f"layout single takes exactly one disk, {count} are listed")
        if self.layout in ("md-raid0", "btrfs-raid0") and count < 2:
            raise ValueError(f"layout {self.layout} takes two or more disks, {count} is listed")
        return self

    @property
    def effective_layout(self) -> str:
        """The layout with ``auto`` resolved: one disk -> single, more -> md-raid0."""
        if self.layout != "auto":
            return self.layout
        return "single" if len(self.disks) == 1 else "md-raid0"

    @property
    def effective_filesystem(self) -> str:
        """The filesystem made: btrfs for btrfs-raid0, else ``filesystem``."""
        return "btrfs" if self.effective_layout == "btrfs-raid0" else self.filesystem
