"""Gathering a node's disk facts: one read-only shell script, parsed on the controller.

:func:`gather_script` builds the script (POSIX sh, read-only: it runs in check mode too);
it prints each command's output in a section ``@@gpunode-disks NAME ARG@@`` followed by
``@@gpunode-disks-rc N@@``. :func:`parse_sections` splits that text and :func:`node_facts`
turns the sections into :class:`toolkit.disks.rules.NodeFacts` with the pure parsers of
``toolkit.disks.facts``.

Every device is probed through its /dev/disk/by-id link (the name that follows the disk);
kernel names and lsblk's listing are used only for topology (what sits on what).
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toolkit.disks import units
from toolkit.disks.facts import (
    BlkidProbe,
    DevNum,
    Mount,
    Signature,
    parse_blkid_export,
    parse_by_id,
    parse_lsblk_json,
    parse_mdadm_examine,
    parse_mountinfo,
    parse_proc_mounts,
    parse_proc_swaps,
    parse_stat_devnums,
    parse_stat_st_dev,
    parse_wipefs_json,
)
from toolkit.disks.rules import DeviceFacts, DirState, NodeFacts
from toolkit.disks.spec import DataDisksSpec
from toolkit.errors import RemoteError

MARK = "@@gpunode-disks"
LSBLK_COLUMNS = "NAME,KNAME,PATH,MAJ:MIN,TYPE,SIZE,SERIAL,MODEL,FSTYPE,UUID,PTTYPE"
MDADM_CONF_PATHS = ("/etc/mdadm/mdadm.conf", "/etc/mdadm.conf")

_PRELUDE = r"""
set +e
LC_ALL=C
export LC_ALL
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
sec() { printf '\n@@gpunode-disks %s@@\n' "$*"; }
rc() { printf '\n@@gpunode-disks-rc %s@@\n' "$1"; }
sec by-id
for f in /dev/disk/by-id/*; do
  [ -e "$f" ] && stat -L --printf '%n\t%t\t%T\t%F\n' "$f"
done
rc 0
sec lsblk
lsblk -J -b -o @COLUMNS@,MOUNTPOINTS 2>/dev/null || lsblk -J -b -o @COLUMNS@,MOUNTPOINT
rc $?
sec mountinfo
cat /proc/self/mountinfo
rc $?
sec mounts
cat /proc/mounts
rc $?
sec mount-sources
awk '$1 ~ "^/dev/" {print $1}' /proc/mounts | sort -u | while IFS= read -r s; do
  stat -L --printf '%n\t%t\t%T\t%F\n' "$s" 2>/dev/null
done
rc 0
sec swaps
cat /proc/swaps
rc $?
sec swap-devices
awk 'NR > 1 && $2 == "partition" {print $1}' /proc/swaps | while IFS= read -r s; do
  stat -L --printf '%n\t%t\t%T\t%F\n' "$s" 2>/dev/null
done
rc 0
sec swap-files
awk 'NR > 1 && $2 == "file" {print $1}' /proc/swaps | while IFS= read -r s; do
  stat --printf '%n\t%D\n' "$s" 2>/dev/null
done
rc 0
sec mdstat
if [ -e /proc/mdstat ]; then cat /proc/mdstat; rc 0; else rc 1; fi
seen=" "
for f in /dev/disk/by-id/*; do
  [ -b "$f" ] || continue
  key=$(stat -L -c '%t:%T' "$f")
  case "$seen" in *" $key "*) continue ;; esac
  seen="$seen$key "
  sec size "$f"
  blockdev --getsize64 "$f"
  rc $?
  sec blkid "$f"
  blkid -p -o export "$f"
  rc $?
  sec wipefs "$f"
  wipefs -n -J "$f"
  rc $?
  sec mdadm "$f"
  if command -v mdadm >/dev/null 2>&1; then mdadm --examine "$f" 2>&1; rc $?; else rc 127; fi
done
sec md-device
if [ -b @MD@ ]; then blkid -p -o export @MD@; rc $?; else rc 127; fi
sec mount-point-entries
if [ -d @MP@ ] && ! mountpoint -q @MP@; then ls -A @MP@ | wc -l; else echo 0; fi
rc 0
sec group
getent group @GROUP@
rc $?
"""


def gather_script(
    spec: DataDisksSpec, runtime_services: Sequence[str] = units.RUNTIME_SERVICES
) -> str:
    """The read-only shell script that prints every fact the planner needs."""
    mount_unit = units.mount_unit_name(spec.mount_point)
    script = (
        _PRELUDE.replace("@COLUMNS@", LSBLK_COLUMNS)
        .replace("@MD@", shlex.quote(units.MD_DEVICE))
        .replace("@MP@", shlex.quote(spec.mount_point))
        .replace("@GROUP@", shlex.quote(spec.group))
    )
    lines = [script]
    for path in managed_files(spec, runtime_services):
        quoted = shlex.quote(path)
        lines.append(
            f"sec file {quoted}\nif [ -f {quoted} ]; then base64 < {quoted} | tr -d '\\n'; "
            "rc 0; else rc 1; fi"
        )
    for path in (*MDADM_CONF_PATHS,):
        quoted = shlex.quote(path)
        lines.append(
            f"sec file {quoted}\nif [ -f {quoted} ]; then base64 < {quoted} | tr -d '\\n'; "
            "rc 0; else rc 1; fi"
        )
    # The device units' timeout drop-ins are named after the filesystem UUID: found by glob.
    lines.append(
        f"for f in {units.UNIT_DIR}/*.device.d/{units.DROPIN_NAME}; do\n"
        '  [ -f "$f" ] || continue\n'
        '  sec file "$f"\n'
        "  base64 < \"$f\" | tr -d '\\n'; rc 0\n"
        "done"
    )
    for entry in units.tree(spec.group):
        quoted = shlex.quote(f"{spec.mount_point}/{entry.name}")
        lines.append(f"sec dir {quoted}\nstat -c '%a %U %G' {quoted} 2>/dev/null\nrc $?")
    for unit in (mount_unit, units.EPHEMERAL_UNIT, units.TREE_UNIT):
        quoted = shlex.quote(unit)
        lines.append(f"sec enabled {quoted}\nsystemctl is-enabled {quoted} 2>/dev/null\nrc $?")
    lines.append("exit 0\n")
    return "\n".join(lines)


def managed_files(
    spec: DataDisksSpec, runtime_services: Sequence[str] = units.RUNTIME_SERVICES
) -> list[str]:
    """Files the layout writes whose current content the planner compares."""
    mount_unit = units.mount_unit_name(spec.mount_point)
    paths = [
        units.record_path(spec.mount_point),
        f"{units.UNIT_DIR}/{mount_unit}",
        units.EPHEMERAL_SCRIPT,
        f"{units.UNIT_DIR}/{units.EPHEMERAL_UNIT}",
        f"{units.UNIT_DIR}/{units.TREE_UNIT}",
    ]
    paths += [f"{units.UNIT_DIR}/{s}.d/{units.DROPIN_NAME}" for s in runtime_services]
    return paths


@dataclass(frozen=True)
class Section:
    """One section of the script's output."""

    name: str
    arg: str
    text: str
    rc: int


def parse_sections(text: str) -> list[Section]:
    """Split the script's output into sections.

    Raises:
        RemoteError: The output has no sections at all, or a section has no exit status.
    """
    pattern = re.compile(
        rf"^{MARK} (?P<head>[^\n]*)@@\n(?P<body>.*?)\n?{MARK}-rc (?P<rc>-?\d+)@@$",
        re.M | re.S,
    )
    # A connection with a terminal (become over ssh -tt) turns every newline into CRLF.
    text = text.replace("\r\n", "\n")
    sections = []
    for match in pattern.finditer(text):
        name, _, arg = match.group("head").partition(" ")
        sections.append(Section(name, arg, match.group("body"), int(match.group("rc"))))
    if not sections:
        snippet = text.strip()[:300]
        raise RemoteError(f"the disk probe printed no sections: {snippet!r}")
    return sections


def _one(sections: list[Section], name: str) -> Section:
    for section in sections:
        if section.name == name:
            return section
    raise RemoteError(f"the disk probe printed no {name!r} section")


def node_facts(sections: list[Section], spec: DataDisksSpec) -> NodeFacts:
    """Turn the probe's sections into the planner's facts.

    Raises:
        RemoteError: A command that must work (lsblk, /proc/mounts) failed or printed
            something unreadable.
    """
    by_id = parse_by_id(_one(sections, "by-id").text)
    lsblk = _one(sections, "lsblk")
    if lsblk.rc != 0:
        raise RemoteError(f"lsblk failed with exit status {lsblk.rc}: {lsblk.text.strip()}")
    blocks = parse_lsblk_json(lsblk.text)
    mountinfo = parse_mountinfo(_one(sections, "mountinfo").text)
    sources = parse_stat_devnums(_one(sections, "mount-sources").text)
    mounts: list[Mount] = []
    for mount in mountinfo:
        devnum = mount.devnum or sources.get(mount.source)
        if devnum is None and mount.source in sources:
            devnum = sources[mount.source]
        mounts.append(Mount(mount.target, mount.fstype, mount.source, devnum, mount.options))
    if not mountinfo:
        # Without mountinfo (never seen, but cheap to handle): /proc/mounts and stat.
        for mount in parse_proc_mounts(_one(sections, "mounts").text):
            mounts.append(
                Mount(mount.target, mount.fstype, mount.source, sources.get(mount.source))
            )
    swap_devices = parse_stat_devnums(_one(sections, "swap-devices").text)
    swap_files = parse_stat_st_dev(_one(sections, "swap-files").text)
    swaps: list[tuple[str, DevNum | None]] = []
    for swap in parse_proc_swaps(_one(sections, "swaps").text):
        dev = swap_devices.get(swap.filename) or swap_files.get(swap.filename)
        swaps.append((swap.filename, dev))

    devices: dict[DevNum, DeviceFacts] = {}
    per_path: dict[str, dict[str, Section]] = {}
    for section in sections:
        if section.name in ("size", "blkid", "wipefs", "mdadm"):
            per_path.setdefault(section.arg, {})[section.name] = section
    link_by_path = {link.path: link for link in by_id}
    for path, probes in per_path.items():
        link = link_by_path.get(path)
        if link is None:
            continue
        devices[link.devnum] = _device(link.devnum, probes)

    files: dict[str, str | None] = {}
    dirs: dict[str, DirState | None] = {}
    enabled: set[str] = set()
    for section in sections:
        if section.name == "file":
            files[section.arg] = _decode(section) if section.rc == 0 else None
        elif section.name == "dir":
            parts = section.text.split()
            dirs[section.arg] = DirState(*parts) if section.rc == 0 and len(parts) == 3 else None
        elif section.name == "enabled" and section.text.strip() in ("enabled", "enabled-runtime"):
            enabled.add(section.arg)
    conf_path, conf = MDADM_CONF_PATHS[0], files.get(MDADM_CONF_PATHS[0])
    if conf is None and files.get(MDADM_CONF_PATHS[1]) is not None:
        conf_path, conf = MDADM_CONF_PATHS[1], files[MDADM_CONF_PATHS[1]]
    md = _one(sections, "md-device")
    entries = _one(sections, "mount-point-entries").text.strip()
    return NodeFacts(
        by_id=tuple(by_id),
        devices=devices,
        blocks=tuple(blocks),
        mounts=tuple(mounts),
        swaps=tuple(swaps),
        files=files,
        dirs=dirs,
        mount_point_entries=int(entries) if entries.isdigit() else 0,
        enabled_units=frozenset(enabled),
        md_available=_one(sections, "mdstat").rc == 0,
        md_active=md.rc != 127,
        md_device=parse_blkid_export(md.text, md.rc) if md.rc in (0, 2) else None,
        mdadm_conf=conf,
        mdadm_conf_path=conf_path,
        group_exists=_one(sections, "group").rc == 0,
    )


def _decode(section: Section) -> str:
    try:
        return base64.b64decode(section.text.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as err:
        raise RemoteError(f"could not read {section.arg}: {err}") from None


def _device(devnum: DevNum, probes: Mapping[str, Section]) -> DeviceFacts:
    errors: list[str] = []
    size = None
    section = probes.get("size")
    if section is not None and section.rc == 0 and section.text.strip().isdigit():
        size = int(section.text.strip())
    elif section is not None:
        errors.append(f"blockdev --getsize64 failed: {section.text.strip() or section.rc}")
    blkid = BlkidProbe({})
    section = probes.get("blkid")
    if section is not None:
        try:
            blkid = parse_blkid_export(section.text, section.rc)
        except RemoteError as err:
            errors.append(str(err))
    signatures: tuple[Signature, ...] = ()
    section = probes.get("wipefs")
    if section is not None:
        try:
            if section.rc != 0:
                raise RemoteError(f"wipefs -n failed: {section.text.strip() or section.rc}")
            signatures = tuple(parse_wipefs_json(section.text))
        except RemoteError as err:
            errors.append(str(err))
    md = None
    section = probes.get("mdadm")
    if section is not None and section.rc != 127:
        try:
            md = parse_mdadm_examine(section.text, section.rc)
        except RemoteError as err:
            errors.append(str(err))
    return DeviceFacts(devnum, size, blkid, signatures, md, tuple(errors))
