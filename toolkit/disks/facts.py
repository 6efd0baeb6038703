"""Facts about block devices: pure parsers of the commands a node runs.

Each parser takes the text a command printed (and, where it matters, its exit status) and
returns plain frozen data. Nothing here runs a command: ``toolkit.disks.gather`` builds the
one shell script that prints these outputs and splits them into sections.

Formats, as printed by util-linux 2.37-2.39 and mdadm 4.x (recorded outputs are the unit
tests' data):

- ``lsblk -J -b -o NAME,KNAME,PATH,MAJ:MIN,TYPE,SIZE,SERIAL,MODEL,FSTYPE,UUID,PTTYPE,MOUNTPOINTS``
  (lsblk(8); ``MOUNTPOINTS`` since 2.37, older versions print ``mountpoint``; sizes are JSON
  numbers since 2.33 and strings before).
- ``blkid -p -o export DEV`` (blkid(8)): ``KEY=value`` lines, values shell-escaped with
  backslashes; exit status 2 when nothing was found on the device.
- ``wipefs -n -J DEV`` and ``wipefs -n DEV`` (wipefs(8)): every signature with its offset.
- ``mdadm --examine DEV`` (mdadm(8)): exit status 1 and "No md superblock detected" on a
  non-member.
- ``/proc/mounts`` (proc(5), fstab(5) escaping: ``\\040`` for space), ``/proc/self/mountinfo``
  (proc(5): field 3 is ``major:minor``), ``/proc/swaps``.
- ``stat -L --printf '%n\\t%t\\t%T\\t%F\\n' /dev/disk/by-id/*`` (stat(1): ``%t``/``%T`` are the
  device's major and minor in hex): the by-id names and the device each one points to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import RemoteError

DevNum = tuple[int, int]

# blkid TYPE values of members of a software RAID (blkid's superblocks/*raid*.c probes),
# volume managers and encrypted containers: such a disk belongs to something else.
RAID_MEMBER_TYPES = frozenset(
    {
        "linux_raid_member",
        "isw_raid_member",
        "ddf_raid_member",
        "adaptec_raid_member",
        "hpt37x_raid_member",
        "hpt45x_raid_member",
        "jmicron_raid_member",
        "lsi_mega_raid_member",
        "nvidia_raid_member",
        "promise_fasttrack_raid_member",
        "silicon_medley_raid_member",
        "via_raid_member",
        "zfs_member",
    }
)
LVM_MEMBER_TYPES = frozenset({"LVM2_member", "LVM1_member"})
CRYPT_TYPES = frozenset({"crypto_LUKS", "BitLocker", "TCRYPT"})


def format_devnum(devnum: DevNum) -> str:
    """``(259, 1)`` -> ``"259:1"``."""
    return f"{devnum[0]}:{devnum[1]}"


def parse_devnum(text: str) -> DevNum:
    """``"259:1"`` -> ``(259, 1)``.

    Raises:
        RemoteError: The text is not ``major:minor``.
    """
    match = re.fullmatch(r"\s*(\d+):(\d+)\s*", text)
    if not match:
        raise RemoteError(f"not a device number major:minor: {text!r}")
    return int(match.group(1)), int(match.group(2))


def decode_st_dev(value: int) -> DevNum:
    """Split a ``st_dev`` value (``stat -c %D``, hex) into major and minor.

    glibc's encoding (sys/sysmacros.h, ``gnu_dev_major``/``gnu_dev_minor``).
    """
    major = ((value >> 8) & 0xFFF) | ((value >> 32) & ~0xFFF)
    minor = (value & 0xFF) | ((value >> 12) & ~0xFF)
    return major, minor


# --- /dev/disk/by-id -------------------------------------------------------------------------


@dataclass(frozen=True)
class ByIdLink:
    """One name under /dev/disk/by-id and the block device it points to."""

    name: str
    devnum: DevNum

    @property
    def path(self) -> str:
        """The link's full path (what commands are given: it follows the disk, not its name)."""
        return f"/dev/disk/by-id/{self.name}"

    @property
    def is_partition(self) -> bool:
        """True for udev's partition links (``...-part1``)."""
        return re.search(r"-part\d+$", self.name) is not None


def parse_by_id(text: str) -> list[ByIdLink]:
    """Parse ``stat -L --printf '%n\\t%t\\t%T\\t%F\\n' /dev/disk/by-id/*``.

    Lines for anything but a block device (a dangling link, a stray file) are dropped: they
    name no disk.

    Raises:
        RemoteError: A line does not have the four tab-separated fields.
    """
    links: list[ByIdLink] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 4:
            raise RemoteError(f"unexpected by-id listing line: {line!r}")
        path, major, minor, kind = parts
        if kind.strip() != "block special file":
            continue
        name = path.rsplit("/", 1)[-1]
        links.append(ByIdLink(name=name, devnum=(int(major, 16), int(minor, 16))))
    return links


def by_id_serial_model(name: str, serial: str) -> str | None:
    """The model part of a udev by-id name when the name ends with ``serial``, else None.

    udev names NVMe, ATA and SCSI disks ``<bus>-<model>_<serial>`` with spaces replaced by
    ``_`` (60-persistent-storage.rules); NVMe namespaces may add ``_<nsid>``. Returns ``""``
    when the name ends with the serial but has no model part.
    """
    wanted = re.escape(normalise_serial(serial))
    pattern = rf"(?:nvme|ata|scsi-[0-9a-zA-Z]|usb|virtio|mmc)-(?:(.+)_)?{wanted}(?:_\d+)?"
    match = re.fullmatch(pattern, name)
    if not match:
        return None
    return match.group(1) or ""


def normalise_serial(serial: str) -> str:
    """The serial as udev writes it into a by-id name (spaces become ``_``)."""
    return re.sub(r"\s+", "_", serial.strip())


# --- lsblk ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockNode:
    """One node of lsblk's tree, with the top-level disks it sits on."""

    name: str
    devnum: DevNum
    type: str
    size: int | None
    serial: str | None
    model: str | None
    fstype: str | None
    mountpoints: tuple[str, ...]
    parents: tuple[DevNum, ...] = ()  # every ancestor, nearest first
    children: tuple[DevNum, ...] = ()  # direct children (partitions, holders)


def _to_int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return int(value)
    return int(value)


def _clean(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def parse_lsblk_json(text: str) -> list[BlockNode]:
    """Parse ``lsblk -J -b -o ...`` into a flat list (a node under two parents appears twice).

    Raises:
        RemoteError: The output is not lsblk's JSON.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise RemoteError(f"lsblk printed something that is not JSON: {err}") from None
    if not isinstance(document, Mapping) or not isinstance(document.get("blockdevices"), list):
        raise RemoteError("lsblk JSON has no 'blockdevices' list")
    nodes: list[BlockNode] = []

    def walk(entry: Mapping[str, Any], parents: tuple[DevNum, ...]) -> None:
        devnum = parse_devnum(str(entry.get("maj:min") or entry.get("maj_min") or ""))
        raw_mounts = entry.get("mountpoints")
        if raw_mounts is None:
            raw_mounts = [entry.get("mountpoint")]
        mounts = tuple(str(m) for m in raw_mounts if m)
        children = [c for c in entry.get("children") or [] if isinstance(c, Mapping)]
        child_nums = tuple(
            parse_devnum(str(c.get("maj:min") or c.get("maj_min") or "")) for c in children
        )
        nodes.append(
            BlockNode(
                name=str(entry.get("name") or entry.get("kname") or ""),
                devnum=devnum,
                type=str(entry.get("type") or ""),
                size=_to_int(entry.get("size")),
                serial=_clean(entry.get("serial")),
                model=_clean(entry.get("model")),
                fstype=_clean(entry.get("fstype")),
                mountpoints=mounts,
                parents=parents,
                children=child_nums,
            )
        )
        for child in children:
            walk(child, (devnum, *parents))

    for entry in document["blockdevices"]:
        if isinstance(entry, Mapping):
            walk(entry, ())
    return nodes


# --- blkid ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlkidProbe:
    """What ``blkid -p`` found on a device: a filesystem, member or partition table."""

    values: Mapping[str, str] = field(default_factory=dict)

    @property
    def type(self) -> str | None:
        """The superblock type (``xfs``, ``linux_raid_member``, ``swap``...)."""
        return self.values.get("TYPE")

    @property
    def uuid(self) -> str | None:
        """The filesystem (or array, or PV) UUID."""
        return self.values.get("UUID")

    @property
    def pttype(self) -> str | None:
        """The partition table type (``gpt``, ``dos``) when one was found."""
        return self.values.get("PTTYPE")

    @property
    def usage(self) -> str | None:
        """blkid's usage class: filesystem, raid, crypto, other."""
        return self.values.get("USAGE")

    @property
    def label(self) -> str | None:
        """The label (the array name for md members)."""
        return self.values.get("LABEL")

    @property
    def empty(self) -> bool:
        """True when blkid found nothing at all."""
        return not (self.type or self.pttype)

    def describe(self) -> str:
        """A short human description: ``xfs filesystem UUID 05c8...``."""
        parts = []
        if self.pttype:
            parts.append(f"{self.pttype} partition table")
        if self.type:
            what = f"{self.type} signature"
            if self.uuid:
                what += f" (UUID {self.uuid})"
            parts.append(what)
        return " and ".join(parts) or "nothing"


def _unescape_export(value: str) -> str:
    # blkid -o export escapes unsafe characters with a backslash (blkid.c, safe_print).
    return re.sub(r"\\(.)", r"\1", value)


def parse_blkid_export(text: str, rc: int = 0) -> BlkidProbe:
    """Parse ``blkid -p -o export DEV`` (exit status 2 means nothing was found).

    Raises:
        RemoteError: blkid failed for another reason (a status other than 0 or 2), or a line is
            not ``KEY=value``.
    """
    if rc == 2:
        return BlkidProbe({})
    if rc != 0:
        raise RemoteError(f"blkid -p failed with exit status {rc}: {text.strip()}")
    values: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key):
            raise RemoteError(f"unexpected blkid export line: {line!r}")
        values[key] = _unescape_export(value)
    return BlkidProbe(values)


# --- wipefs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    """One signature wipefs would erase."""

    offset: int
    type: str
    uuid: str | None = None
    label: str | None = None


def parse_wipefs_json(text: str) -> list[Signature]:
    """Parse ``wipefs -n -J DEV`` (util-linux >= 2.29).

    Raises:
        RemoteError: The output is not wipefs' JSON.
    """
    if not text.strip():
        # wipefs prints nothing at all for a device without signatures in some versions.
        return []
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise RemoteError(f"wipefs printed something that is not JSON: {err}") from None
    entries = document.get("signatures") if isinstance(document, Mapping) else None
    if not isinstance(entries, list):
        raise RemoteError("wipefs JSON has no 'signatures' list")
    return [
        Signature(
            offset=int(str(e.get("offset")), 0),
            type=str(e.get("type")),
            uuid=_clean(e.get("uuid")),
            label=_clean(e.get("label")),
        )
        for e in entries
        if isinstance(e, Mapping)
    ]


def parse_wipefs_table(text: str) -> list[Signature]:
    """Parse the table ``wipefs -n DEV`` prints (header ``DEVICE OFFSET TYPE UUID LABEL``).

    Raises:
        RemoteError: The header is missing or a row has no offset and type.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split()
    if header[:3] != ["DEVICE", "OFFSET", "TYPE"]:
        raise RemoteError(f"unexpected wipefs header: {lines[0]!r}")
    signatures = []
    for line in lines[1:]:
        parts = line.split()
        if len(parts) < 3:
            raise RemoteError(f"unexpected wipefs line: {line!r}")
        uuid = parts[3] if len(parts) > 3 else None
        label = " ".join(parts[4:]) or None
        signatures.append(Signature(int(parts[1], 0), parts[2], uuid, label))
    return signatures


# --- mdadm --examine --------------------------------------------------------------------------


@dataclass(frozen=True)
class MdSuperblock:
    """An md superblock found on a device by ``mdadm --examine``."""

    array_uuid: str
    name: str | None
    level: str | None
    raid_devices: int | None
    version: str | None

    @property
    def short_name(self) -> str | None:
        """The array name without the ``homehost:`` prefix (``node1:data`` -> ``data``)."""
        if self.name is None:
            return None
        return self.name.split(":", 1)[-1]


def parse_mdadm_examine(text: str, rc: int) -> MdSuperblock | None:
    """Parse ``mdadm --examine DEV``; None when the device carries no md superblock.

    Raises:
        RemoteError: mdadm failed in a way that does not say "no superblock".
    """
    if rc != 0:
        if "No md superblock detected" in text or "no recogniseable superblock" in text:
            return None
        raise RemoteError(f"mdadm --examine failed with exit status {rc}: {text.strip()}")
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" : ")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    uuid = fields.get("Array UUID") or fields.get("UUID")
    if not uuid:
        raise RemoteError("mdadm --examine succeeded but printed no array UUID")
    devices = fields.get("Raid Devices")
    return MdSuperblock(
        array_uuid=uuid,
        name=fields.get("Name", "").split(" ")[0] or None,
        level=fields.get("Raid Level"),
        raid_devices=int(devices) if devices and devices.isdigit() else None,
        version=fields.get("Version"),
    )


# --- mounts and swaps -------------------------------------------------------------------------


def _unescape_octal(text: str) -> str:
    # /proc/mounts, mountinfo and /proc/swaps escape space, tab, newline and backslash as \ooo.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


@dataclass(frozen=True)
class Mount:
    """One mounted filesystem: where, what type, from which source and device number."""

    target: str
    fstype: str
    source: str
    devnum: DevNum | None = None  # None: unknown (btrfs and other pseudo devices)
    options: str = ""


def parse_proc_mounts(text: str) -> list[Mount]:
    """Parse ``/proc/mounts`` (no device numbers: those come from mountinfo or ``stat``).

    Raises:
        RemoteError: A line has fewer than four fields.
    """
    mounts = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) < 4:
            raise RemoteError(f"unexpected /proc/mounts line: {line!r}")
        mounts.append(
            Mount(
                target=_unescape_octal(parts[1]),
                fstype=parts[2],
                source=_unescape_octal(parts[0]),
                options=parts[3],
            )
        )
    return mounts


def parse_mountinfo(text: str) -> list[Mount]:
    """Parse ``/proc/self/mountinfo``: every mount with its device number.

    Device numbers with major 0 are anonymous (btrfs, overlay, tmpfs): they are kept as None
    so that only real block devices are matched.

    Raises:
        RemoteError: A line lacks the ``-`` separator or the fields around it.
    """
    mounts = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split()
        try:
            sep = parts.index("-", 6)
        except ValueError:
            raise RemoteError(f"unexpected mountinfo line: {line!r}") from None
        if len(parts) < sep + 3:
            raise RemoteError(f"unexpected mountinfo line: {line!r}")
        devnum = parse_devnum(parts[2])
        mounts.append(
            Mount(
                target=_unescape_octal(parts[4]),
                fstype=parts[sep + 1],
                source=_unescape_octal(parts[sep + 2]),
                devnum=devnum if devnum[0] != 0 else None,
                options=parts[5],
            )
        )
    return mounts


@dataclass(frozen=True)
class Swap:
    """One active swap area (a device or a file)."""

    filename: str
    kind: str  # partition | file


def parse_proc_swaps(text: str) -> list[Swap]:
    """Parse ``/proc/swaps`` (a header line, then one line per area).

    Raises:
        RemoteError: The header is missing.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    if not lines[0].startswith("Filename"):
        raise RemoteError(f"unexpected /proc/swaps header: {lines[0]!r}")
    swaps = []
    for line in lines[1:]:
        parts = line.split()
        if len(parts) < 2:
            raise RemoteError(f"unexpected /proc/swaps line: {line!r}")
        swaps.append(Swap(filename=_unescape_octal(parts[0]), kind=parts[1]))
    return swaps


def parse_stat_devnums(text: str) -> dict[str, DevNum]:
    """Parse ``stat -L --printf '%n\\t%t\\t%T\\t%F\\n' PATH...``: block device path -> number."""
    result: dict[str, DevNum] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[3].strip() == "block special file":
            result[parts[0]] = (int(parts[1], 16), int(parts[2], 16))
    return result


def parse_stat_st_dev(text: str) -> dict[str, DevNum]:
    """Parse ``stat --printf '%n\\t%D\\n' FILE...``: file -> device of its filesystem."""
    result: dict[str, DevNum] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and re.fullmatch(r"[0-9a-fA-F]+", parts[1].strip()):
            result[parts[0]] = decode_st_dev(int(parts[1].strip(), 16))
    return result


def devnums_under(nodes: Iterable[BlockNode], roots: Sequence[DevNum]) -> set[DevNum]:
    """Every device number at or below ``roots`` in lsblk's tree (partitions, arrays...)."""
    wanted = set(roots)
    found = set(roots)
    for node in nodes:
        if wanted.intersection(node.parents):
            found.add(node.devnum)
    return found
