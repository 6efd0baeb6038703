"""The files the data-disk layout installs on a node: systemd units, drop-ins, scripts.

Pure text rendering, so the plan can show every byte it would write and a second run can
tell, by comparing contents, that nothing needs to change.

Sources: systemd.mount(5) (``What=``, ``Options=``, ``nofail``), systemd.unit(5)
(``RequiresMountsFor=``, drop-ins), systemd-fstab-generator(8) (``x-systemd.device-timeout=``
becomes ``JobRunningTimeoutSec=`` on the device unit), systemd-escape(1) (unit names of paths).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

HEADER = "# Managed by gpunode (role data_disks); changes are overwritten.\n"
UNIT_DIR = "/etc/systemd/system"
RECORD_DIR = "/etc/gpunode/data-disks"
EPHEMERAL_SCRIPT = "/usr/local/sbin/gpunode-data-ephemeral"
EPHEMERAL_UNIT = "gpunode-data-ephemeral.service"
TREE_UNIT = "gpunode-data-tree.service"
DROPIN_NAME = "gpunode-data-mount.conf"
# The container runtimes whose storage lives on the data filesystem (domain.md section 4:
# Docker's data-root and containerd's root both move there).
RUNTIME_SERVICES = ("docker.service", "containerd.service")
FS_LABEL = "data"
MD_NAME = "data"
MD_DEVICE = "/dev/md/data"


@dataclass(frozen=True)
class TreeDir:
    """One directory of the standard tree under the mount point."""

    name: str
    mode: str  # octal, as install(1) and stat %a write it (setgid/sticky included)
    group: str | None  # None: root's group


def tree(group: str) -> tuple[TreeDir, ...]:
    """The standard tree: shared data with setgid group permissions, runtime storage private."""
    return (
        TreeDir("datasets", "2775", group),
        TreeDir("checkpoints", "2775", group),
        TreeDir("scratch", "3777", group),  # sticky: everybody writes, nobody deletes others'
        TreeDir("containers", "711", None),  # docker/containerd roots; only root lists them
    )


def escape_path(path: str) -> str:
    """systemd-escape --path: ``/data`` -> ``data``, ``/mnt/fast-data`` -> ``mnt-fast\\x2ddata``."""
    trimmed = path.strip("/")
    if not trimmed:
        return "-"
    out = []
    for index, char in enumerate(trimmed):
        if char == "/":
            out.append("-")
        elif (char.isascii() and (char.isalnum() or char in ":_")) or (char == "." and index > 0):
            out.append(char)
        else:
            out.extend(f"\\x{byte:02x}" for byte in char.encode())
    return "".join(out)


def record_path(mount_point: str) -> str:
    """Where gpunode records the layout it made for a mount point (its UUID, disks)."""
    return f"{RECORD_DIR}/{escape_path(mount_point)}.json"


def mount_unit_name(mount_point: str) -> str:
    """The .mount unit systemd requires for a mount point."""
    return escape_path(mount_point) + ".mount"


def device_unit_name(path: str) -> str:
    """The .device unit of a device path (``/dev/disk/by-uuid/X``)."""
    return escape_path(path) + ".device"


def mount_options(filesystem: str, timeout_s: int, devices: Sequence[str]) -> str:
    """Mount options: noatime, nofail, the device timeout; btrfs names every member.

    btrfs needs all its devices registered before a multi-device mount; ``device=`` makes the
    mount scan them by their by-id paths, so it works without udev and after names moved.
    """
    options = ["noatime", "nofail", f"x-systemd.device-timeout={timeout_s}s"]
    if filesystem == "btrfs":
        options.extend(f"device={d}" for d in devices)
    return ",".join(options)


def _before(units: Sequence[str]) -> str:
    return f"Before={' '.join(units)}\n" if units else ""


def mount_unit(
    mount_point: str,
    uuid: str,
    filesystem: str,
    timeout_s: int,
    devices: Sequence[str],
    runtimes: Sequence[str] = RUNTIME_SERVICES,
) -> str:
    """The .mount unit: the filesystem by UUID, before the container runtimes."""
    what = f"/dev/disk/by-uuid/{uuid}"
    return (
        HEADER
        + "[Unit]\n"
        + f"Description=gpunode data filesystem at {mount_point}\n"
        + _before(runtimes)
        + "\n[Mount]\n"
        + f"What={what}\n"
        + f"Where={mount_point}\n"
        + f"Type={filesystem}\n"
        + f"Options={mount_options(filesystem, timeout_s, devices)}\n"
        + "\n[Install]\n"
        + "WantedBy=local-fs.target\n"
    )


def device_timeout_dropin(timeout_s: int) -> str:
    """The device unit's drop-in that bounds the wait for the disk (fstab-generator's way)."""
    return HEADER + "[Unit]\n" + f"JobRunningTimeoutSec={timeout_s}s\n"


def runtime_dropin(mount_point: str) -> str:
    """A container runtime's drop-in: never start without the data mount."""
    return HEADER + "[Unit]\n" + f"RequiresMountsFor={mount_point}\n"


def tree_unit(mount_point: str, group: str, runtimes: Sequence[str] = RUNTIME_SERVICES) -> str:
    """Recreates the directory tree on a re-created ephemeral filesystem, before the runtimes."""
    mount = mount_unit_name(mount_point)
    lines = [
        HEADER,
        "[Unit]\n",
        f"Description=gpunode directory tree on {mount_point}\n",
        f"Requires={mount}\n",
        f"After={mount}\n",
        _before(runtimes),
        f"ConditionPathIsMountPoint={mount_point}\n",
        "\n[Service]\n",
        "Type=oneshot\n",
        "RemainAfterExit=yes\n",
    ]
    for entry in tree(group):
        cmd = ["/usr/bin/install", "-d", "-m", entry.mode, "-o", "root"]
        cmd += ["-g", entry.group or "root", f"{mount_point}/{entry.name}"]
        lines.append(f"ExecStart={shlex.join(cmd)}\n")
    lines += ["\n[Install]\n", "WantedBy=local-fs.target\n"]
    return "".join(lines)


def ephemeral_unit(
    mount_point: str, by_id_paths: Sequence[str], runtimes: Sequence[str] = RUNTIME_SERVICES
) -> str:
    """The oneshot that re-creates a lost ephemeral filesystem before it is mounted."""
    devices = " ".join(device_unit_name(p) for p in by_id_paths)
    before = " ".join([mount_unit_name(mount_point), *runtimes, "local-fs.target"])
    return (
        HEADER
        + "[Unit]\n"
        + f"Description=gpunode: re-create the ephemeral data filesystem of {mount_point}\n"
        + "DefaultDependencies=no\n"
        + f"Wants={devices}\n"
        + f"After=local-fs-pre.target {devices}\n"
        + f"Before={before}\n"
        + "\n[Service]\n"
        + "Type=oneshot\n"
        + "RemainAfterExit=yes\n"
        + f"ExecStart={EPHEMERAL_SCRIPT}\n"
        + "\n[Install]\n"
        + "WantedBy=local-fs.target\n"
    )


def ephemeral_script(
    by_id_paths: Sequence[str], create: Sequence[Sequence[str]], uuid: str, settle: str
) -> str:
    """The boot script: re-create the filesystem only when every disk is blank.

    Args:
        by_id_paths: The data disks, by their by-id paths.
        create: The commands that make the layout (array, filesystem) with the same UUID.
        uuid: The filesystem UUID the mount unit expects.
        settle: The command that waits for udev to publish the new filesystem's links.
    """
    disks = " ".join(shlex.quote(p) for p in by_id_paths)
    # udev publishes each new device (the array, then the filesystem) before the next step.
    commands = "".join(f"{shlex.join(list(c))}\n{settle} || true\n" for c in create)
    return (
        "#!/bin/sh\n"
        + HEADER
        + "# An ephemeral (instance-store) disk comes back blank after the instance stopped;\n"
        + "# after a plain reboot it still holds the filesystem. Only when every disk is blank\n"
        + "# is anything written: a disk with any signature is never touched.\n"
        + "set -eu\n"
        + f"UUID={shlex.quote(uuid)}\n"
        + f"DISKS={shlex.quote(disks)}\n"
        + "blank=0 total=0\n"
        + "for d in $DISKS; do\n"
        + "  total=$((total + 1))\n"
        + '  if [ ! -b "$d" ]; then echo "gpunode-data-ephemeral: $d is missing" >&2; exit 1; fi\n'
        + '  rc=0; blkid -p "$d" >/dev/null 2>&1 || rc=$?\n'
        + '  if [ "$rc" -eq 2 ]; then blank=$((blank + 1)); fi\n'
        + "done\n"
        + "# Nothing blank: a plain reboot, the filesystem is still there.\n"
        + 'if [ "$blank" -eq 0 ]; then exit 0; fi\n'
        + 'if [ "$blank" -ne "$total" ]; then\n'
        + '  echo "gpunode-data-ephemeral: only $blank of $total disks are blank; left alone" >&2\n'
        + "  exit 1\n"
        + "fi\n"
        + commands
        + 'echo "gpunode-data-ephemeral: re-created the data filesystem $UUID"\n'
    )
