"""The data-disk safety rules: what the planner knows of a node, and each listed disk resolved
through ``/dev/disk/by-id`` and judged.

Every safety rule of domain.md section 4 is a refusal reason here: a disk that carries data not
allowed to be wiped, one in use (mounted, swap, a member of an array or volume group, behind
the system disk), one whose identity does not match the profile. All of them are collected, so
a refused plan says everything that is wrong at once. ``toolkit.disks.planner`` turns a layout
that passed into actions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.disks import units
from toolkit.disks.facts import (
    CRYPT_TYPES,
    LVM_MEMBER_TYPES,
    RAID_MEMBER_TYPES,
    BlkidProbe,
    BlockNode,
    ByIdLink,
    DevNum,
    MdSuperblock,
    Mount,
    Signature,
    by_id_serial_model,
    format_devnum,
)
from toolkit.disks.spec import SIZE_TOLERANCE, DataDisk, DataDisksSpec

SYSTEM_TARGETS = ("/", "/boot", "/boot/efi")
# lsblk TYPE values of md arrays (lsblk(8): the RAID level for md devices).
MD_TYPES = frozenset({"raid0", "raid1", "raid4", "raid5", "raid6", "raid10", "linear", "md"})


@dataclass(frozen=True)
class DeviceFacts:
    """What the node's probes found on one block device reached through /dev/disk/by-id."""

    devnum: DevNum
    size: int | None = None
    blkid: BlkidProbe = field(default_factory=BlkidProbe)
    signatures: tuple[Signature, ...] = ()
    md: MdSuperblock | None = None
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class DirState:
    """Mode (octal, as ``stat %a``), owner and group of a directory."""

    mode: str
    owner: str
    group: str


@dataclass(frozen=True)
class NodeFacts:
    """Everything the planner knows about one node (see ``toolkit.disks.gather``)."""

    by_id: tuple[ByIdLink, ...] = ()
    devices: Mapping[DevNum, DeviceFacts] = field(default_factory=dict)
    blocks: tuple[BlockNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    swaps: tuple[tuple[str, DevNum | None], ...] = ()  # (filename, device behind it)
    files: Mapping[str, str | None] = field(default_factory=dict)  # None: absent
    dirs: Mapping[str, DirState | None] = field(default_factory=dict)
    mount_point_entries: int = 0  # entries in the mount point directory when not mounted
    enabled_units: frozenset[str] = frozenset()
    md_available: bool = False
    md_active: bool = False  # /dev/md/data exists
    md_device: BlkidProbe | None = None  # blkid -p of /dev/md/data
    mdadm_conf: str | None = None
    mdadm_conf_path: str = "/etc/mdadm/mdadm.conf"
    group_exists: bool = False


@dataclass
class Resolved:
    spec: DataDisk
    link: ByIdLink | None = None
    device: DeviceFacts | None = None
    model: str | None = None
    reasons: list[str] = field(default_factory=list)
    state: str = "not found"
    signatures: bool = False  # carries a wipeable signature
    ours: bool = False  # carries the data filesystem/array gpunode made


def human_size(size: int | None) -> str:
    """Bytes for people, in both the vendors' and the kernel's units."""
    if size is None:
        return "unknown size"
    for unit, factor in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2)):
        if size >= factor:
            return f"{size / factor:.2f}{unit} ({size} bytes)"
    return f"{size} bytes"


def _norm_model(text: str) -> str:
    return "_".join(text.replace("_", " ").split()).lower()


def managed_uuids(spec: DataDisksSpec, facts: NodeFacts) -> dict[str, Any]:
    """What gpunode recorded about the layout it made: the record file and the mount unit."""
    found: dict[str, Any] = {}
    raw = facts.files.get(units.record_path(spec.mount_point))
    if raw:
        try:
            record = json.loads(raw)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict) and isinstance(record.get("uuid"), str):
            found = dict(record)
    unit_text = facts.files.get(f"{units.UNIT_DIR}/{units.mount_unit_name(spec.mount_point)}")
    if unit_text:
        for line in unit_text.splitlines():
            if line.startswith("What=/dev/disk/by-uuid/"):
                found.setdefault("uuid", line.split("/")[-1].strip())
    return found


def _disks_behind(blocks: Sequence[BlockNode], devnum: DevNum) -> set[DevNum]:
    behind = {devnum}
    for node in blocks:
        if node.devnum == devnum:
            behind.update(node.parents)
    return behind


def resolve(spec_disk: DataDisk, facts: NodeFacts) -> Resolved:
    result = Resolved(spec=spec_disk)
    serial = spec_disk.serial
    if spec_disk.by_id is not None:
        links = [link for link in facts.by_id if link.name == spec_disk.by_id]
        if not links:
            result.reasons.append(
                f"{serial}: /dev/disk/by-id/{spec_disk.by_id} is not present on this node"
            )
            return result
        link = links[0]
        names = [x.name for x in facts.by_id if x.devnum == link.devnum]
        if serial not in link.name and not any(
            by_id_serial_model(n, serial) is not None for n in names
        ):
            result.reasons.append(
                f"{serial}: /dev/disk/by-id/{link.name} points to a disk whose by-id names "
                f"({', '.join(sorted(names))}) do not carry this serial"
            )
            return result
    else:
        matches = [
            x
            for x in facts.by_id
            if not x.is_partition and by_id_serial_model(x.name, serial) is not None
        ]
        devnums = sorted({x.devnum for x in matches})
        if not devnums:
            result.reasons.append(
                f"{serial}: no disk with this serial under /dev/disk/by-id "
                "(the disk is absent or named differently; set by_id to its exact name)"
            )
            return result
        if len(devnums) > 1:
            listed = ", ".join(sorted(x.name for x in matches))
            result.reasons.append(
                f"{serial}: the serial names several devices ({listed}); set by_id to one of them"
            )
            return result
        # The link that names the serial most directly (no namespace suffix) is used.
        link = sorted(matches, key=lambda x: (len(x.name), x.name))[0]
    result.link = link
    result.state = "found"
    models = [
        m
        for x in facts.by_id
        if x.devnum == link.devnum
        for m in [by_id_serial_model(x.name, serial)]
        if m
    ]
    models += [b.model for b in facts.blocks if b.devnum == link.devnum and b.model]
    result.model = models[0].replace("_", " ") if models else None
    device = facts.devices.get(link.devnum)
    if device is None:
        result.reasons.append(f"{serial}: {link.path} was not probed")
        return result
    result.device = device
    for error in device.errors:
        result.reasons.append(f"{serial}: {link.path} could not be probed: {error}")
    return result


def _check_identity(disk: Resolved, facts: NodeFacts) -> None:
    spec_disk, device = disk.spec, disk.device
    assert device is not None and disk.link is not None
    serial = spec_disk.serial
    kinds = {b.type for b in facts.blocks if b.devnum == device.devnum}
    if "part" in kinds:
        disk.reasons.append(f"{serial}: {disk.link.path} is a partition, not a whole disk")
    expected = spec_disk.size_bytes
    if expected is not None:
        if device.size is None:
            disk.reasons.append(f"{serial}: its size could not be read to check {spec_disk.size}")
        elif abs(device.size - expected) > SIZE_TOLERANCE * expected:
            disk.reasons.append(
                f"{serial}: size {human_size(device.size)} does not match the profile's "
                f"{spec_disk.size}"
            )
    if spec_disk.model is not None:
        found = [
            m
            for x in facts.by_id
            if x.devnum == device.devnum
            for m in [by_id_serial_model(x.name, serial)]
            if m
        ] + [b.model for b in facts.blocks if b.devnum == device.devnum and b.model]
        if not found:
            disk.reasons.append(
                f"{serial}: its model could not be read to check {spec_disk.model!r}"
            )
        elif _norm_model(spec_disk.model) not in {_norm_model(m) for m in found}:
            disk.reasons.append(
                f"{serial}: model {found[0].replace('_', ' ')!r} does not match the profile's "
                f"{spec_disk.model!r}"
            )


def _check_use(
    disk: Resolved, spec: DataDisksSpec, facts: NodeFacts, devices_of_layout: set[DevNum]
) -> None:
    """System disk, swap, mounts and child devices (none of them is ever overridden)."""
    device = disk.device
    assert device is not None
    serial = disk.spec.serial
    devnum = device.devnum
    for mount in facts.mounts:
        if mount.devnum is None:
            continue
        if devnum not in _disks_behind(facts.blocks, mount.devnum):
            continue
        if mount.target in SYSTEM_TARGETS:
            disk.reasons.append(f"{serial}: is the system disk (behind {mount.target})")
        elif mount.target == spec.mount_point and mount.devnum in devices_of_layout:
            continue  # the data filesystem itself, already in place
        else:
            disk.reasons.append(
                f"{serial}: is mounted ({mount.source} on {mount.target}, {mount.fstype})"
            )
    for filename, swap_dev in facts.swaps:
        if swap_dev is not None and devnum in _disks_behind(facts.blocks, swap_dev):
            disk.reasons.append(f"{serial}: holds active swap ({filename})")
    for node in facts.blocks:
        if devnum in node.parents:
            if node.type in MD_TYPES:
                if node.devnum in devices_of_layout:
                    continue
                disk.reasons.append(
                    f"{serial}: is a member of the md array {node.name} ({node.type})"
                )
            elif node.type in ("lvm", "crypt", "dm", "mpath"):
                disk.reasons.append(f"{serial}: holds the device-mapper device {node.name}")
            elif node.type == "part":
                disk.signatures = True
                disk.state = "has partitions"
                if disk.spec.serial not in spec.allow_wipe:
                    disk.reasons.append(
                        f"{serial}: has the partition {node.name}; list its serial in "
                        "allow_wipe to let gpunode wipe it"
                    )
            if node.mountpoints and node.devnum != devnum:
                for target in node.mountpoints:
                    if target == "[SWAP]":
                        disk.reasons.append(f"{serial}: holds active swap ({node.name})")
                    elif target in SYSTEM_TARGETS:
                        disk.reasons.append(f"{serial}: is the system disk (behind {target})")
                    elif not any(m.target == target for m in facts.mounts):
                        disk.reasons.append(f"{serial}: {node.name} is mounted on {target}")


def _check_content(disk: Resolved, spec: DataDisksSpec, known_uuid: str | None) -> None:
    """Members, filesystems and other signatures; only the last are overridden by allow_wipe."""
    device = disk.device
    assert device is not None and disk.link is not None
    serial = disk.spec.serial
    probe = device.blkid
    layout = spec.effective_layout
    fs = spec.effective_filesystem
    member = device.md is not None or probe.type in RAID_MEMBER_TYPES
    if member:
        name = (device.md.name if device.md else None) or probe.label
        short = name.split(":", 1)[-1] if name else None
        if layout == "md-raid0" and short == units.MD_NAME:
            disk.ours = True
            disk.state = f"member of the md array {name!r}"
            return
        disk.reasons.append(
            f"{serial}: is a RAID member ({probe.type or 'md superblock'}"
            + (f", array {name!r}" if name else "")
            + "); gpunode never takes a disk from an array"
        )
        disk.state = "RAID member"
        return
    if probe.type in LVM_MEMBER_TYPES:
        disk.reasons.append(
            f"{serial}: is an LVM physical volume ({probe.type}, UUID {probe.uuid})"
        )
        disk.state = "LVM physical volume"
        return
    if probe.type in CRYPT_TYPES:
        disk.reasons.append(f"{serial}: is an encrypted container ({probe.type})")
        disk.state = "encrypted container"
        return
    if known_uuid is not None and probe.uuid == known_uuid and probe.type is not None:
        if probe.type != fs or layout == "md-raid0":
            disk.reasons.append(
                f"{serial}: holds gpunode's data filesystem ({probe.type}, UUID {probe.uuid}) "
                f"but the profile now asks for {layout} with {fs}; gpunode does not convert "
                "layouts (move the data, then wipe the disks)"
            )
            disk.state = f"data filesystem {probe.type}"
            return
        disk.ours = True
        disk.state = f"data filesystem ({probe.type}, UUID {probe.uuid})"
        return
    if probe.empty and not device.signatures:
        if not disk.signatures:
            disk.state = "blank"
        return
    described = probe.describe() if not probe.empty else ""
    # A GPT's protective MBR is part of the partition table blkid already named.
    named = {probe.type, probe.pttype} | ({"PMBR"} if probe.pttype else set())
    others = sorted({s.type for s in device.signatures} - named)
    if others:
        described = " and ".join(x for x in (described, f"signatures {', '.join(others)}") if x)
    disk.state = f"carries {described}"
    disk.signatures = True
    if serial not in spec.allow_wipe:
        disk.reasons.append(
            f"{serial}: carries {described}; list its serial in allow_wipe to let gpunode wipe it"
        )


def devices_of_layout(resolved: Sequence[Resolved], facts: NodeFacts) -> set[DevNum]:
    """The listed disks' devices and the md array built on them (never another array that
    merely exists)."""
    own = {d.link.devnum for d in resolved if d.link is not None}
    return own | {
        b.devnum for b in facts.blocks if b.type in MD_TYPES and own.intersection(b.parents)
    }


def judge(
    resolved: Sequence[Resolved],
    spec: DataDisksSpec,
    facts: NodeFacts,
    known_uuid: str | None,
    devices_of_layout: set[DevNum],
) -> list[str]:
    """Every refusal: each disk's content, identity and use, two serials naming one device,
    and disks that disagree about holding the layout."""
    by_devnum: dict[DevNum, list[str]] = {}
    for disk in resolved:
        if disk.link is not None:
            by_devnum.setdefault(disk.link.devnum, []).append(disk.spec.serial)
    duplicates = [
        f"{', '.join(serials)}: name the same device {format_devnum(devnum)}"
        for devnum, serials in by_devnum.items()
        if len(serials) > 1
    ]
    for disk in resolved:
        if disk.device is None or disk.reasons:
            continue
        _check_content(disk, spec, known_uuid)
        _check_identity(disk, facts)
        _check_use(disk, spec, facts, devices_of_layout if disk.ours else set())
    reasons = [r for d in resolved for r in d.reasons] + duplicates
    found = [d for d in resolved if d.device is not None]
    ours = [d for d in found if d.ours]
    if not reasons and ours and len(ours) != len(resolved):
        rest = [d for d in found if not d.ours]
        reasons.append(
            "disks disagree: "
            + ", ".join(f"{d.spec.serial} holds the data layout" for d in ours)
            + "; "
            + ", ".join(f"{d.spec.serial} {d.state}" for d in rest)
            + "; gpunode does not repair or grow a layout"
        )
    return reasons
