"""Gathering a node's disk facts: one read-only shell script, parsed on the controller.

:func:`gather_script` builds the script (POSIX sh, read-only: it runs in check mode too) in
the probe dialect of ``toolkit.facts.probe``: each command's output in a section named
``NAME ARG`` with its exit status (``missing`` when the section's condition fails: mdadm not
installed, no md device, no file). :func:`parse_sections` splits that text and
:func:`node_facts` turns the sections into :class:`toolkit.disks.rules.NodeFacts` with the
pure parsers of ``toolkit.disks.facts``.

Every device is probed through its /dev/disk/by-id link (the name that follows the disk);
kernel names and lsblk's listing are used only for topology (what sits on what).
"""

from __future__ import annotations

import base64
import binascii
import shlex
from collections.abc import Mapping, Sequence

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
from toolkit.facts import probe
from toolkit.facts.probe import Section

LSBLK_COLUMNS = "NAME,KNAME,PATH,MAJ:MIN,TYPE,SIZE,SERIAL,MODEL,FSTYPE,UUID,PTTYPE"
MDADM_CONF_PATHS = ("/etc/mdadm/mdadm.conf", "/etc/mdadm.conf")

_STAT_DEVICES = "stat -L --printf '%n\\t%t\\t%T\\t%F\\n'"
# The device numbers of each path awk prints (sources of mounts, swap partitions).
_STAT_EACH = "| while IFS= read -r s; do\n  " + _STAT_DEVICES + ' "$s" 2>/dev/null\ndone; true'


def _file(path_word: str) -> str:
    """A file's content as one base64 line (``path_word`` is a quoted or expanding shell word)."""
    return probe.block(
        "file", f"base64 < {path_word} | tr -d '\\n'", arg=path_word, when=f"[ -f {path_word} ]"
    )


def gather_script(
    spec: DataDisksSpec, runtime_services: Sequence[str] = units.RUNTIME_SERVICES
) -> str:
    """The read-only shell script that prints every fact the planner needs."""
    mount_unit = units.mount_unit_name(spec.mount_point)
    md = shlex.quote(units.MD_DEVICE)
    mount_point = shlex.quote(spec.mount_point)
    per_device = "\n".join(
        (
            probe.block("size", 'blockdev --getsize64 "$f"', arg='"$f"'),
            probe.block("blkid", 'blkid -p -o export "$f"', arg='"$f"'),
            probe.block("wipefs", 'wipefs -n -J "$f"', arg='"$f"'),
            probe.block(
                "mdadm", 'mdadm --examine "$f" 2>&1', arg='"$f"', when=probe.installed("mdadm")
            ),
        )
    )
    parts = [
        probe.block(
            "by-id",
            'for f in /dev/disk/by-id/*; do\n  [ -e "$f" ] && '
            + _STAT_DEVICES
            + ' "$f"\ndone; true',
        ),
        probe.block(
            "lsblk",
            f"lsblk -J -b -o {LSBLK_COLUMNS},MOUNTPOINTS 2>/dev/null"
            f" || lsblk -J -b -o {LSBLK_COLUMNS},MOUNTPOINT",
        ),
        probe.block("mountinfo", "cat /proc/self/mountinfo"),
        probe.block("mounts", "cat /proc/mounts"),
        probe.block(
            "mount-sources", "awk '$1 ~ \"^/dev/\" {print $1}' /proc/mounts | sort -u " + _STAT_EACH
        ),
        probe.block("swaps", "cat /proc/swaps"),
        probe.block(
            "swap-devices",
            "awk 'NR > 1 && $2 == \"partition\" {print $1}' /proc/swaps " + _STAT_EACH,
        ),
        probe.block(
            "swap-files",
            "awk 'NR > 1 && $2 == \"file\" {print $1}' /proc/swaps"
            " | while IFS= read -r s; do\n  stat --printf '%n\\t%D\\n' \"$s\" 2>/dev/null\n"
            "done; true",
        ),
        probe.block("mdstat", "cat /proc/mdstat; true", when="[ -e /proc/mdstat ]"),
        # Each disk once, by the first by-id link to it.
        'seen=" "\nfor f in /dev/disk/by-id/*; do\n  [ -b "$f" ] || continue\n'
        "  key=$(stat -L -c '%t:%T' \"$f\")\n"
        '  case "$seen" in *" $key "*) continue ;; esac\n  seen="$seen$key "\n'
        + per_device
        + "\ndone",
        probe.block("md-device", f"blkid -p -o export {md}", when=f"[ -b {md} ]"),
        probe.block(
            "mount-point-entries",
            f"if [ -d {mount_point} ] && ! mountpoint -q {mount_point}; then "
            f"ls -A {mount_point} | wc -l; else echo 0; fi; true",
        ),
        probe.block("group", f"getent group {shlex.quote(spec.group)}"),
    ]
    parts += [_file(shlex.quote(path)) for path in managed_files(spec, runtime_services)]
    parts += [_file(shlex.quote(path)) for path in MDADM_CONF_PATHS]
    # The device units' timeout drop-ins are named after the filesystem UUID: found by glob.
    parts.append(
        f"for f in {units.UNIT_DIR}/*.device.d/{units.DROPIN_NAME}; do\n"
        '  [ -f "$f" ] || continue\n' + _file('"$f"') + "\ndone"
    )
    for entry in units.tree(spec.group):
        quoted = shlex.quote(f"{spec.mount_point}/{entry.name}")
        parts.append(probe.block("dir", f"stat -c '%a %U %G' {quoted} 2>/dev/null", arg=quoted))
    for unit in (mount_unit, units.EPHEMERAL_UNIT, units.TREE_UNIT):
        quoted = shlex.quote(unit)
        parts.append(
            probe.block("enabled", f"systemctl is-enabled {quoted} 2>/dev/null", arg=quoted)
        )
    return probe.script(parts)


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


def parse_sections(text: str) -> list[Section]:
    """Split the script's output into sections.

    Raises:
        RemoteError: The output has no sections at all.
    """
    sections = probe.split(text)
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
        md_active=md.rc is not None,
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
            if section.rc is None:
                raise RemoteError("blkid is not installed")
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
    if section is not None and section.rc is not None:
        try:
            md = parse_mdadm_examine(section.text, section.rc)
        except RemoteError as err:
            errors.append(str(err))
    return DeviceFacts(devnum, size, blkid, signatures, md, tuple(errors))
