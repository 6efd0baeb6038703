"""The lab's data disks: sparse files on the host, attached as loop devices.

A node sees each disk as ``/dev/nvme<k>n1`` with the udev-style link
``/dev/disk/by-id/nvme-LAB_NVMe_SSD_<serial>`` (see ``node_files/gpunode-lab-udev.sh``).
The lab records every disk it made in its state; it only ever detaches a loop device that
still backs one of its own image files, and only stops md arrays made entirely of its own
loop devices (an array a disk role built inside a node lives in the host kernel).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from toolkit.errors import LabError
from toolkit.lab.proc import run
from toolkit.lab.spec import DISK_MODEL, by_id_name, disk_serial
from toolkit.lab.state import DiskState

SYS_BLOCK = Path("/sys/block")


def parse_losetup_json(text: str) -> dict[str, str]:
    """Parse ``losetup --json --list`` into {loop device: backing file}.

    An empty text (no loop devices at all: losetup prints nothing) gives an empty dict.

    Raises:
        LabError: The text is not losetup's JSON.
    """
    if not text.strip():
        return {}
    try:
        devices = json.loads(text)["loopdevices"]
        return {str(d["name"]): str(d.get("back-file") or "") for d in devices}
    except (ValueError, KeyError, TypeError) as err:
        raise LabError(f"cannot read the output of `losetup --json --list`: {err}") from err


def attached_loops() -> dict[str, str]:
    """Every loop device of the host with its backing file."""
    result = run(["losetup", "--json", "--list", "--output", "NAME,BACK-FILE"])
    return parse_losetup_json(result.stdout)


def render_disks_file(disks: Iterable[DiskState]) -> str:
    """The node's ``/var/lib/gpunode-lab/disks``, read by ``gpunode-lab-udev`` at boot."""
    lines = ["# kernel-name major minor model serial (written by gpunode lab)"]
    for disk in sorted(disks, key=lambda d: d.kernel_name):
        if disk.major is None or disk.minor is None:
            continue  # not attached: the node does not see it, like a pulled disk
        lines.append(f"{disk.kernel_name} {disk.major} {disk.minor} {disk.model} {disk.serial}")
    return "\n".join(lines) + "\n"


def render_backing_file(disks: Iterable[DiskState]) -> str:
    """The node's ``disks.backing``: which host file each kernel name's loop device backs.

    ``gpunode-lab-udev`` leaves a disk out when its loop device now backs another file (the
    host rebooted and loop numbers moved), so a node never writes to someone else's disk.
    """
    lines = [
        f"{disk.kernel_name} {disk.image.resolve()}"
        for disk in sorted(disks, key=lambda d: d.kernel_name)
        if disk.major is not None
    ]
    return "".join(line + "\n" for line in lines)


def new_disk(
    lab_name: str, lab_dir: Path, node_index: int, disk_index: int, size: int, kernel_name: str
) -> DiskState:
    """Describe a new disk (nothing is created yet)."""
    serial = disk_serial(lab_name, node_index, disk_index)
    return DiskState(
        index=disk_index,
        serial=serial,
        model=DISK_MODEL,
        by_id=by_id_name(serial),
        image=lab_dir / "disks" / f"node-{node_index}-disk-{disk_index}.img",
        size=size,
        kernel_name=kernel_name,
    )


def free_kernel_name(disks: Iterable[DiskState]) -> str:
    """The first ``nvme<k>n1`` not used by any of ``disks``."""
    used = {disk.kernel_name for disk in disks}
    k = 0
    while f"nvme{k}n1" in used:
        k += 1
    return f"nvme{k}n1"


def ensure_attached(disk: DiskState) -> DiskState:
    """Create the disk's sparse image if needed and attach it as a loop device.

    Returns:
        The disk with its loop device and device numbers filled in.
    """
    disk.image.parent.mkdir(parents=True, exist_ok=True)
    if not disk.image.exists():
        with disk.image.open("wb") as handle:
            handle.truncate(disk.size)  # sparse: no space is used until written
    existing = loops_backing(disk.image)
    if existing:
        loop = existing[0]
    else:
        # --partscan: partitions a disk role creates show up (as loopNpM) like NVMe ones.
        loop = run(["losetup", "--find", "--show", "--partscan", str(disk.image)]).stdout.strip()
    info = os.stat(loop)
    if not stat.S_ISBLK(info.st_mode):
        raise LabError(f"{loop} is not a block device")
    disk.loop = loop
    disk.major = os.major(info.st_rdev)
    disk.minor = os.minor(info.st_rdev)
    return disk


def loops_backing(image: Path) -> list[str]:
    """Loop devices whose backing file is ``image``."""
    target = str(image.resolve())
    return sorted(
        loop for loop, back in attached_loops().items() if back.removesuffix(" (deleted)") == target
    )


def detach(image: Path, own_loops: set[str]) -> list[str]:
    """Detach the loop device(s) of a disk image after stopping md arrays of own loops only.

    Args:
        image: A disk image of this lab.
        own_loops: Every loop device of this lab (an array is stopped only if all of its
            members are in this set).

    Returns:
        The loop devices detached.

    Raises:
        LabError: A holder of the disk is not the lab's to stop, or detaching failed.
    """
    detached = []
    for loop in loops_backing(image):
        _stop_holders(loop, own_loops)
        run(["losetup", "--detach", loop])
        detached.append(loop)
    return detached


def _stop_holders(loop: str, own_loops: set[str]) -> None:
    name = Path(loop).name
    holders = SYS_BLOCK / name / "holders"
    if not holders.is_dir():
        return
    for holder in sorted(holders.iterdir()):
        if not holder.name.startswith("md"):
            raise LabError(
                f"{loop} is held by {holder.name}, which the lab did not make; "
                "release it first (nothing was detached)"
            )
        members = {f"/dev/{p.name}" for p in (SYS_BLOCK / holder.name / "slaves").iterdir()}
        if not members <= own_loops:
            raise LabError(
                f"md array {holder.name} uses {', '.join(sorted(members - own_loops))} besides "
                f"the lab's disks; stop it yourself (nothing was detached)"
            )
        # The array's device node may not exist on the host (no udev here): stop it
        # through sysfs, which is what `mdadm --stop` asks the kernel to do.
        try:
            (SYS_BLOCK / holder.name / "md" / "array_state").write_text("clear")
        except OSError as err:
            raise LabError(f"cannot stop md array {holder.name} on {loop}: {err}") from err
