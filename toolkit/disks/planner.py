"""The pure data-disk planner: (spec, observed facts) -> a plan of ordered actions, or refusals.

Nothing here touches a disk. The planner names disks by serial and resolves them through
``/dev/disk/by-id`` to a device number, the only identity that survives kernel names moving
between boots (and, in containers, a listing that shows the host's disks). Every safety rule
of domain.md section 4 is a refusal reason (``toolkit.disks.rules``); all of them are collected,
so a refused plan says everything that is wrong at once. ``plan()`` runs in phases: judge the
disks, pick the UUID, then create, record, write, mount. "Already done" is recognised by the
filesystem UUID (recorded by gpunode and in the mount unit) or the md array name, never by
formatting again.
"""

from __future__ import annotations

import json
import shlex
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from toolkit.disks import units
from toolkit.disks.facts import (
    format_devnum,
)
from toolkit.disks.rules import (
    DirState,
    NodeFacts,
    Resolved,
    devices_of_layout,
    judge,
    managed_uuids,
    resolve,
)
from toolkit.disks.spec import DataDisksSpec

DEFAULT_SETTLE = "udevadm settle"


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


def md_uuid_for(fs_uuid: str) -> str:
    """The md array UUID derived from the filesystem UUID (stable, so plans are repeatable)."""
    return str(uuidlib.uuid5(uuidlib.UUID(fs_uuid), "gpunode-md-data"))


def _mdadm_uuid(value: str) -> str:
    hexes = value.replace("-", "")
    return ":".join(hexes[i : i + 8] for i in range(0, 32, 8))


@dataclass
class _Layout:
    """What the refusal phase decided, read by the phases that build the actions."""

    spec: DataDisksSpec
    facts: NodeFacts
    resolved: list[Resolved]
    existing: bool  # every listed disk already carries the data layout
    mounted_ok: bool  # the mount point already holds our filesystem
    uuid: str | None
    paths: list[str]

    @property
    def layout(self) -> str:
        return self.spec.effective_layout

    @property
    def fs(self) -> str:
        return self.spec.effective_filesystem


def plan(
    spec: DataDisksSpec,
    facts: NodeFacts,
    new_uuid: str,
    *,
    settle_command: str = DEFAULT_SETTLE,
    runtime_services: Sequence[str] = units.RUNTIME_SERVICES,
) -> Plan:
    """Plan the data-disk layout of one node, or refuse with every reason.

    The phases, in order: resolve and judge every listed disk (every refusal collected), pick
    the filesystem's UUID, then the actions: create or assemble, record the array, write the
    units and files, enable and mount, make the directory tree.

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
    layout, fs = spec.effective_layout, spec.effective_filesystem
    known_uuid = managed_uuids(spec, facts).get("uuid")
    resolved = [resolve(d, facts) for d in spec.disks]
    own = devices_of_layout(resolved, facts)
    reasons = judge(resolved, spec, facts, known_uuid, own)
    ours = [d for d in resolved if d.device is not None and d.ours]
    existing = bool(ours) and len(ours) == len(resolved)
    uuid = _uuid_for(resolved, spec, facts, existing, known_uuid, new_uuid)
    reports = tuple(_report(d) for d in resolved)

    notes: list[str] = []
    target_mounts = [m for m in facts.mounts if m.target == spec.mount_point]
    mounted_ok = any(m.devnum in own for m in target_mounts) and existing
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
    blockers: list[str] = []
    if layout == "md-raid0" and not facts.md_available:
        blockers.append(
            "this kernel has no md software RAID (/proc/mdstat is missing): md-raid0 can be "
            "planned here but not applied"
        )
    assert uuid is not None or existing
    state = _Layout(
        spec=spec,
        facts=facts,
        resolved=resolved,
        existing=existing,
        mounted_ok=mounted_ok,
        uuid=uuid,
        paths=[d.link.path for d in resolved if d.link is not None],
    )
    create_cmds = _create_commands(state)
    actions = _create_actions(state, create_cmds, settle_command)
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
    array_uuid = _array_uuid(state)
    actions += _mdadm_conf_actions(state, array_uuid)
    if not existing or not mounted_ok:
        actions.append(_settle(f"/dev/disk/by-uuid/{uuid}", settle_command, spec.device_timeout_s))
    files = _files(state, uuid, array_uuid, create_cmds, settle_command, runtime_services)
    actions += _file_actions(state, uuid, files)
    actions += _mount_actions(state, uuid)
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


def _uuid_for(
    resolved: Sequence[Resolved],
    spec: DataDisksSpec,
    facts: NodeFacts,
    existing: bool,
    known_uuid: str | None,
    new_uuid: str,
) -> str | None:
    """The data filesystem's UUID: the existing one's, the recorded one for an ephemeral
    disk, else the new one (None: an existing array whose filesystem is not seen)."""
    if existing and spec.effective_layout != "md-raid0":
        return resolved[0].device.blkid.uuid if resolved[0].device else None
    if existing:
        md_fs = facts.md_device
        return md_fs.uuid if md_fs is not None and md_fs.type == spec.effective_filesystem else None
    if spec.ephemeral and known_uuid:
        return known_uuid
    return new_uuid


def _report(disk: Resolved) -> DiskReport:
    return DiskReport(
        serial=disk.spec.serial,
        path=disk.link.path if disk.link else None,
        device=format_devnum(disk.link.devnum) if disk.link else None,
        size=disk.device.size if disk.device else None,
        model=disk.model,
        state=disk.state,
        refusals=tuple(disk.reasons),
    )


def _create_commands(state: _Layout) -> list[tuple[str, ...]]:
    """The commands that make the layout (an md array, then the filesystem), also what an
    ephemeral disk's boot script runs."""
    commands: list[tuple[str, ...]] = []
    md_uuid = md_uuid_for(state.uuid) if state.uuid else None
    if state.layout == "md-raid0" and md_uuid:
        commands.append(
            (
                "mdadm",
                "--create",
                units.MD_DEVICE,
                "--metadata=1.2",
                f"--name={units.MD_NAME}",
                "--level=0",
                f"--raid-devices={len(state.paths)}",
                f"--uuid={_mdadm_uuid(md_uuid)}",
                *state.paths,
            )
        )
    if state.uuid:
        md_device = units.MD_DEVICE if state.layout == "md-raid0" else None
        commands.append(_mkfs(state.fs, state.uuid, md_device, state.paths))
    return commands


def _create_actions(
    state: _Layout, create_cmds: Sequence[tuple[str, ...]], settle_command: str
) -> list[Action]:
    """Wipe (allowed disks only), create the array and the filesystem; or assemble an
    existing array that is not active."""
    actions: list[Action] = []
    if not state.existing:
        for disk in state.resolved:
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
            what = "md RAID0 array 'data'" if cmd[0] == "mdadm" else f"{state.fs} filesystem"
            actions.append(
                Action(
                    "create-array" if cmd[0] == "mdadm" else "mkfs",
                    f"Create the {what} on {', '.join(d.spec.serial for d in state.resolved)}"
                    + (f" with UUID {state.uuid}" if cmd[0] != "mdadm" else ""),
                    argv=cmd,
                )
            )
            if cmd[0] == "mdadm":
                actions.append(
                    _settle(units.MD_DEVICE, settle_command, state.spec.device_timeout_s)
                )
    elif state.layout == "md-raid0" and not state.facts.md_active:
        actions.append(
            Action(
                "assemble-array",
                "Assemble the existing md array 'data'",
                argv=("mdadm", "--assemble", units.MD_DEVICE, *state.paths),
            )
        )
    return actions


def _array_uuid(state: _Layout) -> str | None:
    """The md array's UUID: an existing array keeps its own (it may not be one gpunode
    derived)."""
    assert state.uuid is not None
    array_uuid = _mdadm_uuid(md_uuid_for(state.uuid))
    first = state.resolved[0].device
    if state.existing and state.layout == "md-raid0" and first is not None:
        if first.md is not None:
            array_uuid = first.md.array_uuid
        elif first.blkid.uuid:  # no mdadm on the node yet: blkid reads the same superblock
            array_uuid = _mdadm_uuid(first.blkid.uuid)
    return array_uuid


def _mdadm_conf_actions(state: _Layout, array_uuid: str | None) -> list[Action]:
    """Record the array in mdadm.conf (and the initramfs) when it is not there yet."""
    if state.layout != "md-raid0" or not array_uuid:
        return []
    line = f"ARRAY {units.MD_DEVICE} metadata=1.2 UUID={array_uuid}"
    if line in (state.facts.mdadm_conf or ""):
        return []
    conf = state.facts.mdadm_conf_path
    return [
        Action(
            "mdadm-conf",
            f"Record the array in {conf} and refresh the initramfs",
            script=(
                f"mkdir -p {shlex.quote(conf.rsplit('/', 1)[0])} && "
                f"printf '%s\\n' {shlex.quote(line)} >> {shlex.quote(conf)} && "
                "if command -v update-initramfs >/dev/null 2>&1; then "
                "update-initramfs -u; fi"
            ),
        )
    ]


_EPHEMERAL_FILES = (
    (units.EPHEMERAL_SCRIPT, "0755"),
    (f"{units.UNIT_DIR}/{units.EPHEMERAL_UNIT}", "0644"),
    (f"{units.UNIT_DIR}/{units.TREE_UNIT}", "0644"),
)


def _files(
    state: _Layout,
    uuid: str,
    array_uuid: str | None,
    create_cmds: Sequence[tuple[str, ...]],
    settle_command: str,
    runtime_services: Sequence[str],
) -> list[tuple[str, str, str, bool]]:
    """Every file the layout needs on the node: (path, content, mode, is a systemd unit)."""
    spec = state.spec
    record_doc = {
        "uuid": uuid,
        "layout": state.layout,
        "filesystem": state.fs,
        "mount_point": spec.mount_point,
        "serials": [d.spec.serial for d in state.resolved],
        "md_uuid": array_uuid if state.layout == "md-raid0" else None,
    }
    files = [
        (
            units.record_path(spec.mount_point),
            json.dumps(record_doc, indent=2, sort_keys=True) + "\n",
            "0644",
            False,
        ),
        (
            f"{units.UNIT_DIR}/{units.mount_unit_name(spec.mount_point)}",
            units.mount_unit(
                spec.mount_point,
                uuid,
                state.fs,
                spec.device_timeout_s,
                state.paths,
                runtime_services,
            ),
            "0644",
            True,
        ),
        (
            _device_dropin(uuid),
            units.device_timeout_dropin(spec.device_timeout_s),
            "0644",
            True,
        ),
    ]
    for service in runtime_services:
        files.append(
            (
                f"{units.UNIT_DIR}/{service}.d/{units.DROPIN_NAME}",
                units.runtime_dropin(spec.mount_point),
                "0644",
                True,
            )
        )
    if spec.ephemeral:
        contents = [
            units.ephemeral_script(state.paths, create_cmds, uuid, settle_command),
            units.ephemeral_unit(spec.mount_point, state.paths, runtime_services),
            units.tree_unit(spec.mount_point, spec.group, runtime_services),
        ]
        for (path, mode), content in zip(_EPHEMERAL_FILES, contents, strict=True):
            files.append((path, content, mode, path.startswith(units.UNIT_DIR)))
    return files


def _device_dropin(uuid: str) -> str:
    """The drop-in that gives the filesystem's device unit its timeout."""
    device_unit = units.device_unit_name(f"/dev/disk/by-uuid/{uuid}")
    return f"{units.UNIT_DIR}/{device_unit}.d/{units.DROPIN_NAME}"


def _file_actions(
    state: _Layout, uuid: str, files: Sequence[tuple[str, str, str, bool]]
) -> list[Action]:
    """Write what differs, remove what a former layout left, reload systemd if a unit moved."""
    actions: list[Action] = []
    units_changed = False
    for path, content, mode, is_unit in files:
        current = state.facts.files.get(path)
        if current == content:
            continue
        units_changed = units_changed or is_unit
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
    if not state.spec.ephemeral:
        for path, _mode in _EPHEMERAL_FILES:
            if state.facts.files.get(path) is not None:
                units_changed = True
                actions.append(Action("remove-file", f"Remove {path} (not ephemeral)", path=path))
    # Device timeouts of filesystems that are gone (an earlier layout): one layout per node.
    current_dropin = _device_dropin(uuid)
    for stale, text in sorted(state.facts.files.items()):
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
    return actions


def _mount_actions(state: _Layout, uuid: str) -> list[Action]:
    """Enable the units at boot, mount, and make the group and the directory tree."""
    spec, facts = state.spec, state.facts
    mount_name = units.mount_unit_name(spec.mount_point)
    actions: list[Action] = []
    wanted_enabled = [mount_name] + (
        [units.EPHEMERAL_UNIT, units.TREE_UNIT] if spec.ephemeral else []
    )
    for unit in wanted_enabled:
        if unit not in facts.enabled_units:
            actions.append(
                Action("enable", f"Enable {unit} at boot", argv=("systemctl", "enable", unit))
            )
    if not state.mounted_ok:
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
        if state.mounted_ok and facts.dirs.get(path) == DirState(entry.mode, "root", group):
            continue
        actions.append(
            Action(
                "directory",
                f"Create {path} (mode {entry.mode}, group {group})",
                argv=("install", "-d", "-m", entry.mode, "-o", "root", "-g", group, path),
            )
        )
    return actions


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
