"""The pure data-disk planner: (spec, observed facts) -> a plan of ordered actions, or refusals.

Nothing here touches a disk. The planner names disks by serial and resolves them through
``/dev/disk/by-id`` to a device number, the only identity that survives kernel names moving
between boots (and, in containers, a listing that shows the host's disks). Every safety rule
of domain.md section 4 is a refusal reason here; all of them are collected, so a refused plan
says everything that is wrong at once. "Already done" is recognised by the filesystem UUID
(recorded by gpunode and in the mount unit) or the md array name, never by formatting again.
"""

from __future__ import annotations

import json
import shlex
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
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
DEFAULT_SETTLE = "udevadm settle"


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


@dataclass(frozen=True)
class Action:
    """One step of a plan: a command, or a file to write or remove."""

    kind: str
    summary: str
    argv: tuple[str, ...] = ()
    script: str | None = None  # a shell snippet, when a step is more than one command
    path: str | None = None
    content: str | None = None
    mode: str = "0644"
    before: str | None = None  # the file's current content, for diffs

    def shell(self) -> str:
        """The POSIX shell command that performs this action on the node."""
        if self.kind == "write-file":
            assert self.path is not None and self.content is not None
            import base64

            data = base64.b64encode(self.content.encode()).decode()
            path = shlex.quote(self.path)
            tmp = shlex.quote(self.path + ".gpunode-tmp")
            parent = shlex.quote(self.path.rsplit("/", 1)[0] or "/")
            return (
                f"mkdir -p {parent} && printf %s {data} | base64 -d > {tmp} && "
                f"chmod {self.mode} {tmp} && mv -f {tmp} {path}"
            )
        if self.kind == "remove-file":
            assert self.path is not None
            parent = self.path.rsplit("/", 1)[0]
            if parent.endswith(".d"):
                # A drop-in directory left empty is removed with its last file.
                return f"rm -f {shlex.quote(self.path)} && (rmdir {shlex.quote(parent)} || true)"
            return f"rm -f {shlex.quote(self.path)}"
        if self.script is not None:
            return self.script
        return shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        """The action as plain data (JSON, Ansible results)."""
        data: dict[str, Any] = {
            "kind": self.kind,
            "summary": self.summary,
            "command": self.shell(),
        }
        if self.path is not None:
            data["path"] = self.path
        if self.kind == "write-file":
            data["content"] = self.content
            data["command"] = f"write {self.path} (mode {self.mode})"
        return data


@dataclass(frozen=True)
class DiskReport:
    """One listed disk as found on the node."""

    serial: str
    path: str | None  # /dev/disk/by-id/... (None: not found)
    device: str | None  # major:minor
    size: int | None
    model: str | None
    state: str
    refusals: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The planner's answer: ordered actions, or (when ``reasons`` is not empty) a refusal."""

    layout: str
    filesystem: str
    mount_point: str
    uuid: str | None
    disks: tuple[DiskReport, ...]
    actions: tuple[Action, ...] = ()
    reasons: tuple[str, ...] = ()  # refusals: every one names the disk by serial
    blockers: tuple[str, ...] = ()  # the plan is right but this node cannot apply it
    notes: tuple[str, ...] = ()
    existing: bool = False  # the data filesystem was already there

    @property
    def refused(self) -> bool:
        """True when at least one safety rule refused the request."""
        return bool(self.reasons)

    @property
    def done(self) -> bool:
        """True when the node already is as planned (nothing to do)."""
        return not self.refused and not self.actions

    def to_dict(self) -> dict[str, Any]:
        """The plan as plain data (``--json``, the module's result)."""
        return {
            "layout": self.layout,
            "filesystem": self.filesystem,
            "mount_point": self.mount_point,
            "uuid": self.uuid,
            "refused": self.refused,
            "done": self.done,
            "existing": self.existing,
            "reasons": list(self.reasons),
            "blockers": list(self.blockers),
            "notes": list(self.notes),
            "disks": [asdict(d) | {"refusals": list(d.refusals)} for d in self.disks],
            "actions": [a.to_dict() for a in self.actions],
        }

    def describe(self) -> str:
        """A few lines for people: the refusals, or the actions in order."""
        if self.refused:
            return "refused:\n" + "\n".join(f"  - {r}" for r in self.reasons)
        if self.done:
            return f"nothing to do: {self.mount_point} is in place (UUID {self.uuid})"
        lines = [f"{i}. {a.summary}" for i, a in enumerate(self.actions, 1)]
        return "\n".join(lines)


@dataclass
class _Resolved:
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


def md_uuid_for(fs_uuid: str) -> str:
    """The md array UUID derived from the filesystem UUID (stable, so plans are repeatable)."""
    return str(uuidlib.uuid5(uuidlib.UUID(fs_uuid), "gpunode-md-data"))


def _mdadm_uuid(value: str) -> str:
    hexes = value.replace("-", "")
    return ":".join(hexes[i : i + 8] for i in range(0, 32, 8))


def _disks_behind(blocks: Sequence[BlockNode], devnum: DevNum) -> set[DevNum]:
    behind = {devnum}
    for node in blocks:
        if node.devnum == devnum:
            behind.update(node.parents)
    return behind


def _resolve(spec_disk: DataDisk, facts: NodeFacts) -> _Resolved:
    result = _Resolved(spec=spec_disk)
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


def _check_identity(disk: _Resolved, facts: NodeFacts) -> None:
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
    disk: _Resolved, spec: DataDisksSpec, facts: NodeFacts, own_devnums: set[DevNum]
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
        elif mount.target == spec.mount_point and mount.devnum in own_devnums:
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
                if node.devnum in own_devnums:
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


def _check_content(disk: _Resolved, spec: DataDisksSpec, known_uuid: str | None) -> None:
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


def plan(
    spec: DataDisksSpec,
    facts: NodeFacts,
    new_uuid: str,
    *,
    settle_command: str = DEFAULT_SETTLE,
    runtime_services: Sequence[str] = units.RUNTIME_SERVICES,
) -> Plan:
    """Plan the data-disk layout of one node, or refuse with every reason.

    Args:
        spec: The node's ``hardware.data_disks``.
        facts: What the node's probes found (``toolkit.disks.gather.node_facts``).
        new_uuid: The UUID a new filesystem gets (the caller draws it, so this stays pure).
        settle_command: The command that waits for udev to publish new device links.
        runtime_services: The container runtimes that must start after the mount (drop-ins
            with ``RequiresMountsFor=``); empty for a mount no runtime depends on.

    Returns:
        A Plan; ``plan.refused`` tells whether it may be applied.
    """
    layout = spec.effective_layout
    fs = spec.effective_filesystem
    record = managed_uuids(spec, facts)
    known_uuid = record.get("uuid")

    resolved = [_resolve(d, facts) for d in spec.disks]
    by_devnum: dict[DevNum, list[str]] = {}
    for disk in resolved:
        if disk.link is not None:
            by_devnum.setdefault(disk.link.devnum, []).append(disk.spec.serial)
    duplicates = [
        f"{', '.join(serials)}: name the same device {format_devnum(devnum)}"
        for devnum, serials in by_devnum.items()
        if len(serials) > 1
    ]

    own_devnums = {d.link.devnum for d in resolved if d.link is not None}
    # The md array built on the listed disks (never another array that merely exists).
    own_devnums |= {
        b.devnum for b in facts.blocks if b.type in MD_TYPES and own_devnums.intersection(b.parents)
    }

    for disk in resolved:
        if disk.device is None or disk.reasons:
            continue
        _check_content(disk, spec, known_uuid)
        _check_identity(disk, facts)
        _check_use(disk, spec, facts, own_devnums if disk.ours else set())

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
    existing = bool(ours) and len(ours) == len(resolved)
    uuid: str | None
    if existing and layout != "md-raid0":
        uuid = resolved[0].device.blkid.uuid if resolved[0].device else None
    elif existing:
        md_fs = facts.md_device
        uuid = md_fs.uuid if md_fs is not None and md_fs.type == fs else None
    elif spec.ephemeral and known_uuid:
        uuid = known_uuid
    else:
        uuid = new_uuid

    reports = tuple(
        DiskReport(
            serial=d.spec.serial,
            path=d.link.path if d.link else None,
            device=format_devnum(d.link.devnum) if d.link else None,
            size=d.device.size if d.device else None,
            model=d.model,
            state=d.state,
            refusals=tuple(d.reasons),
        )
        for d in resolved
    )
    notes: list[str] = []
    target_mounts = [m for m in facts.mounts if m.target == spec.mount_point]
    mounted_ok = any(m.devnum in own_devnums for m in target_mounts) and existing
    if target_mounts and not mounted_ok:
        others = ", ".join(f"{m.source} ({m.fstype})" for m in target_mounts)
        reasons.append(f"{spec.mount_point}: already a mount point of {others}")
    if reasons:
        return Plan(layout, fs, spec.mount_point, uuid, reports, reasons=tuple(reasons))
    if not target_mounts and facts.mount_point_entries:
        notes.append(
            f"{spec.mount_point} holds {facts.mount_point_entries} entries on the system disk; "
            "the mount will hide them"
        )

    paths = [d.link.path for d in resolved if d.link is not None]
    actions: list[Action] = []
    blockers: list[str] = []
    if layout == "md-raid0" and not facts.md_available:
        blockers.append(
            "this kernel has no md software RAID (/proc/mdstat is missing): md-raid0 can be "
            "planned here but not applied"
        )
    assert uuid is not None or existing
    create_cmds: list[tuple[str, ...]] = []
    md_uuid = md_uuid_for(uuid) if uuid else None
    if layout == "md-raid0" and md_uuid:
        create_cmds.append(
            (
                "mdadm",
                "--create",
                units.MD_DEVICE,
                "--metadata=1.2",
                f"--name={units.MD_NAME}",
                "--level=0",
                f"--raid-devices={len(paths)}",
                f"--uuid={_mdadm_uuid(md_uuid)}",
                *paths,
            )
        )
    if uuid:
        create_cmds.append(
            _mkfs(fs, uuid, units.MD_DEVICE if layout == "md-raid0" else None, paths)
        )

    if not existing:
        for disk in resolved:
            if disk.signatures and disk.link is not None:
                actions.append(
                    Action(
                        "wipe",
                        f"Wipe every signature of {disk.spec.serial} ({disk.state}), "
                        "allowed by allow_wipe",
                        argv=("wipefs", "-a", disk.link.path),
                    )
                )
        for cmd in create_cmds:
            what = "md RAID0 array 'data'" if cmd[0] == "mdadm" else f"{fs} filesystem"
            actions.append(
                Action(
                    "create-array" if cmd[0] == "mdadm" else "mkfs",
                    f"Create the {what} on {', '.join(d.spec.serial for d in resolved)}"
                    + (f" with UUID {uuid}" if cmd[0] != "mdadm" else ""),
                    argv=cmd,
                )
            )
            if cmd[0] == "mdadm":
                actions.append(_settle(units.MD_DEVICE, settle_command, spec.device_timeout_s))
    elif layout == "md-raid0" and not facts.md_active:
        actions.append(
            Action(
                "assemble-array",
                "Assemble the existing md array 'data'",
                argv=("mdadm", "--assemble", units.MD_DEVICE, *paths),
            )
        )
    if existing and layout == "md-raid0" and uuid is None and facts.md_active:
        return Plan(
            layout,
            fs,
            spec.mount_point,
            None,
            reports,
            reasons=(
                f"the md array 'data' holds no {fs} filesystem (blkid found "
                f"{facts.md_device.describe() if facts.md_device else 'nothing'}); "
                "gpunode does not format an existing array",
            ),
        )
    if uuid is None:
        # An inactive existing array: assemble it first; the next run finds the filesystem.
        return Plan(
            layout, fs, spec.mount_point, None, reports, tuple(actions), (), tuple(blockers)
        )

    # An existing array keeps its own UUID (it may not be one gpunode derived).
    array_uuid = _mdadm_uuid(md_uuid) if md_uuid else None
    if existing and layout == "md-raid0" and resolved[0].device is not None:
        member = resolved[0].device
        if member.md is not None:
            array_uuid = member.md.array_uuid
        elif member.blkid.uuid:  # no mdadm on the node yet: blkid reads the same superblock
            array_uuid = _mdadm_uuid(member.blkid.uuid)
    if layout == "md-raid0" and array_uuid:
        line = f"ARRAY {units.MD_DEVICE} metadata=1.2 UUID={array_uuid}"
        if line not in (facts.mdadm_conf or ""):
            actions.append(
                Action(
                    "mdadm-conf",
                    f"Record the array in {facts.mdadm_conf_path} and refresh the initramfs",
                    script=(
                        f"mkdir -p {shlex.quote(facts.mdadm_conf_path.rsplit('/', 1)[0])} && "
                        f"printf '%s\\n' {shlex.quote(line)} >> "
                        f"{shlex.quote(facts.mdadm_conf_path)} && "
                        "if command -v update-initramfs >/dev/null 2>&1; then "
                        "update-initramfs -u; fi"
                    ),
                )
            )
    if not existing or not mounted_ok:
        actions.append(_settle(f"/dev/disk/by-uuid/{uuid}", settle_command, spec.device_timeout_s))

    record_doc = {
        "uuid": uuid,
        "layout": layout,
        "filesystem": fs,
        "mount_point": spec.mount_point,
        "serials": [d.spec.serial for d in resolved],
        "md_uuid": array_uuid if layout == "md-raid0" else None,
    }
    files: list[tuple[str, str, str, str]] = [
        (
            units.record_path(spec.mount_point),
            json.dumps(record_doc, indent=2, sort_keys=True) + "\n",
            "0644",
            "",
        )
    ]
    mount_name = units.mount_unit_name(spec.mount_point)
    unit_paths = []
    mount_path = f"{units.UNIT_DIR}/{mount_name}"
    files.append(
        (
            mount_path,
            units.mount_unit(
                spec.mount_point, uuid, fs, spec.device_timeout_s, paths, runtime_services
            ),
            "0644",
            "unit",
        )
    )
    device_unit = units.device_unit_name(f"/dev/disk/by-uuid/{uuid}")
    files.append(
        (
            f"{units.UNIT_DIR}/{device_unit}.d/{units.DROPIN_NAME}",
            units.device_timeout_dropin(spec.device_timeout_s),
            "0644",
            "unit",
        )
    )
    for service in runtime_services:
        files.append(
            (
                f"{units.UNIT_DIR}/{service}.d/{units.DROPIN_NAME}",
                units.runtime_dropin(spec.mount_point),
                "0644",
                "unit",
            )
        )
    ephemeral_files = [
        (units.EPHEMERAL_SCRIPT, "0755"),
        (f"{units.UNIT_DIR}/{units.EPHEMERAL_UNIT}", "0644"),
        (f"{units.UNIT_DIR}/{units.TREE_UNIT}", "0644"),
    ]
    if spec.ephemeral:
        contents = [
            units.ephemeral_script(paths, create_cmds, uuid, settle_command),
            units.ephemeral_unit(spec.mount_point, paths, runtime_services),
            units.tree_unit(spec.mount_point, spec.group, runtime_services),
        ]
        for (path, mode), content in zip(ephemeral_files, contents, strict=True):
            files.append((path, content, mode, "unit" if path.startswith(units.UNIT_DIR) else ""))
    units_changed = False
    for path, content, mode, kind in files:
        current = facts.files.get(path)
        if current == content:
            continue
        if kind == "unit":
            units_changed = True
            unit_paths.append(path)
        actions.append(
            Action(
                "write-file",
                f"{'Write' if current is None else 'Update'} {path}",
                path=path,
                content=content,
                mode=mode,
                before=current,
            )
        )
    if not spec.ephemeral:
        for path, _mode in ephemeral_files:
            if facts.files.get(path) is not None:
                units_changed = True
                actions.append(Action("remove-file", f"Remove {path} (not ephemeral)", path=path))
    # Device timeouts of filesystems that are gone (an earlier layout): one layout per node.
    current_dropin = f"{units.UNIT_DIR}/{device_unit}.d/{units.DROPIN_NAME}"
    for stale, text in sorted(facts.files.items()):
        if (
            text is not None
            and stale != current_dropin
            and stale.startswith(f"{units.UNIT_DIR}/dev-disk-by")
            and stale.endswith(f".device.d/{units.DROPIN_NAME}")
        ):
            units_changed = True
            actions.append(
                Action("remove-file", f"Remove {stale} (a filesystem no longer used)", path=stale)
            )
    if units_changed:
        actions.append(
            Action("daemon-reload", "Reload systemd's units", argv=("systemctl", "daemon-reload"))
        )
    wanted_enabled = [mount_name] + (
        [units.EPHEMERAL_UNIT, units.TREE_UNIT] if spec.ephemeral else []
    )
    for unit in wanted_enabled:
        if unit not in facts.enabled_units:
            actions.append(
                Action("enable", f"Enable {unit} at boot", argv=("systemctl", "enable", unit))
            )
    if not mounted_ok:
        actions.append(
            Action(
                "mount",
                f"Mount {spec.mount_point} by UUID {uuid}",
                script=(
                    f"systemctl start {shlex.quote(mount_name)} && "
                    f"mountpoint -q {shlex.quote(spec.mount_point)}"
                ),
            )
        )
    if not facts.group_exists:
        actions.append(
            Action(
                "group",
                f"Create the system group {spec.group}",
                argv=("groupadd", "--system", spec.group),
            )
        )
    for entry in units.tree(spec.group):
        path = f"{spec.mount_point}/{entry.name}"
        group = entry.group or "root"
        state = facts.dirs.get(path)
        if mounted_ok and state == DirState(entry.mode, "root", group):
            continue
        actions.append(
            Action(
                "directory",
                f"Create {path} (mode {entry.mode}, group {group})",
                argv=("install", "-d", "-m", entry.mode, "-o", "root", "-g", group, path),
            )
        )
    return Plan(
        layout,
        fs,
        spec.mount_point,
        uuid,
        reports,
        tuple(actions),
        (),
        tuple(blockers),
        tuple(notes),
        existing,
    )


def _settle(path: str, settle_command: str, timeout_s: int) -> Action:
    """Wait until udev has published ``path`` (a new array or filesystem link)."""
    quoted = shlex.quote(path)
    return Action(
        "settle",
        f"Wait for udev to publish {path}",
        script=(
            f"{settle_command} || true; i=0; "
            f"while [ ! -e {quoted} ] && [ $i -lt {timeout_s} ]; do sleep 1; i=$((i + 1)); done; "
            f"[ -e {quoted} ] || "
            f"{{ echo '{path} did not appear within {timeout_s}s' >&2; exit 1; }}"
        ),
    )


def _mkfs(fs: str, uuid: str, md_device: str | None, paths: Sequence[str]) -> tuple[str, ...]:
    # No force flag anywhere: mkfs refuses a device that carries a signature, a second
    # safety net behind the planner's own checks.
    if fs == "btrfs":
        return (
            "mkfs.btrfs",
            "-L",
            units.FS_LABEL,
            "-U",
            uuid,
            "-d",
            "raid0",
            "-m",
            "raid1",
            *paths,
        )
    target = md_device or paths[0]
    if fs == "ext4":
        return ("mkfs.ext4", "-q", "-L", units.FS_LABEL, "-U", uuid, target)
    return ("mkfs.xfs", "-q", "-L", units.FS_LABEL, "-m", f"uuid={uuid}", target)
