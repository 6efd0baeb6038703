"""The data-disk part of a hardware profile (`hardware.data_disks`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from toolkit.config import StrictModel


class DataDisk(StrictModel):
    """One data disk, named by its serial (never by kernel name)."""

    serial: str = Field(min_length=1, description="Serial number as in /dev/disk/by-id.")
    by_id: str | None = Field(default=None, description="Name under /dev/disk/by-id/.")
    size: str | None = Field(default=None, description='Expected size, e.g. "3.84TB" or "16GiB".')
    model: str | None = None


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
