"""Data disks on the lab: the safety matrix made for real on loop disks, then convergence.

Runs after 01 (lab) and before 03 (provision) and 04 (accept), against the shared lab of conftest.py
(``$GPUNODE_TEST_LAB``). Node 1 gets two extra 320 MiB disks (hot-added like new NVMe) on
which every hostile state is made for real; each is refused by ``playbooks/disks.yml`` run
for real (not in check mode) and the checksum of every disk of the node is unchanged
afterwards. Then allow_wipe proceeds, one disk converges to XFS, and the lab's own data disks
converge to btrfs RAID0 at /data on both nodes (this kernel has no md; md RAID0 is covered by
the planner's unit tests and a check-mode plan here), survive a second run (changed=0), a
kernel-name swap and a node restart. The module leaves /data mounted on both nodes, which
03 (provision: the container runtime's storage) and 04 (accept) use.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.ansible.events import RunResult
from toolkit.ansible.runner import run_playbook
from toolkit.lab import lab as lab_core
from toolkit.lab.state import DiskState

pytestmark = pytest.mark.lab

MIB = 1024**2
BLOCK = 64 * 1024  # sparse_digest's unit of content
EXTRA_SIZE = 320 * MIB  # mkfs.xfs refuses filesystems under 300 MB
HOSTILE_MOUNT = "/mnt/gpunode-hostile"
XFS_MOUNT = "/mnt/gpunode-xfs"
TARGET_MOUNT = "/mnt/gpunode-target"  # where the refused specs would have mounted
# No udev runs in a lab node: the lab's stand-in publishes /dev/disk links when asked.
LAB_SETTLE = "/usr/local/sbin/gpunode-lab-udev"


# --- helpers ----------------------------------------------------------------------------------


def sparse_digest(path: Path) -> str:
    """SHA-256 of a disk image's contents: every 64 KiB block that is not all zeros, with its
    offset, read only from the data extents (SEEK_DATA/SEEK_HOLE: holes are zeros).

    It changes when a byte on the disk changes, and not when the host's file system maps the
    same bytes differently: it does (a digest that also hashed the data map moved across
    refused runs, 5 times in one run of this module, its bytes equal each time, 2026-12-07).
    """
    digest = hashlib.sha256()
    size = path.stat().st_size
    zeros = bytes(BLOCK)
    with path.open("rb") as handle:
        fd = handle.fileno()
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError:
                break  # no data after offset
            end = os.lseek(fd, start, os.SEEK_HOLE)
            block = start - start % BLOCK
            handle.seek(block)
            while block < end:
                chunk = handle.read(BLOCK)
                if not chunk:
                    break
                if chunk != zeros[: len(chunk)]:
                    digest.update(struct.pack("<Q", block) + chunk)
                block += len(chunk)
            offset = max(end, block)
    digest.update(struct.pack("<Q", size))
    return digest.hexdigest()


def md_superblock(name: str, raid_disks: int, size_sectors: int) -> bytes:
    """An md v1.2 superblock (mdadm's md_p.h layout) that blkid and mdadm recognise.

    The kernel here has no md, so ``mdadm --create`` cannot write one; this is the same
    256-byte structure plus the role table, with the checksum mdadm's calc_sb_1_csum computes.
    """
    max_dev = 128
    sb = bytearray(256 + 2 * max_dev)
    now = int(time.time())
    struct.pack_into("<IIII", sb, 0, 0xA92B4EFC, 1, 0, 0)  # magic, major_version, features
    sb[16:32] = uuid.uuid4().bytes  # set_uuid
    sb[32:64] = name.encode().ljust(32, b"\0")
    struct.pack_into("<QiIQII", sb, 64, now, 0, 0, size_sectors, 1024, raid_disks)
    struct.pack_into("<QQQQ", sb, 128, 2048, size_sectors, 8, 0)  # data/super offsets
    sb[168:184] = uuid.uuid4().bytes  # device_uuid
    struct.pack_into("<QQQ", sb, 192, now, 1, 0xFFFFFFFFFFFFFFFF)  # utime, events, resync
    struct.pack_into("<I", sb, 220, max_dev)
    for i in range(max_dev):
        struct.pack_into("<H", sb, 256 + 2 * i, i if i < raid_disks else 0xFFFF)
    total = sum(struct.unpack_from(f"<{len(sb) // 4}I", sb))
    struct.pack_into("<I", sb, 216, ((total & 0xFFFFFFFF) + (total >> 32)) & 0xFFFFFFFF)
    return bytes(sb)


@dataclass
class Ctx:
    """What the tests share: the lab, an inventory and node 1's extra disks."""

    lab: Any
    inventory: Path
    hosts: list[str]
    x: DiskState
    y: DiskState
    active_runtimes: dict[int, list[str]]

    def node1(self, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.lab.ssh(1, command, check=check)

    def disks_of(self, index: int) -> list[DiskState]:
        self.lab.refresh()
        node = next(n for n in self.lab.nodes if n.index == index)
        return sorted(node.disks, key=lambda d: d.index)

    def digests(self, index: int) -> dict[str, str]:
        # Flush the block devices' caches into the image files before reading them.
        os.sync()
        return {d.serial: sparse_digest(d.image) for d in self.disks_of(index)}

    def inventory_spec(self, host: str) -> dict[str, Any]:
        data = yaml.safe_load((self.inventory / "host_vars" / host / "hardware.yml").read_text())
        return dict(data["hardware"]["data_disks"])


def play(
    ctx: Ctx,
    host: str,
    spec: dict[str, Any] | None = None,
    *,
    check: bool = False,
    secondary: bool = False,
) -> RunResult:
    """Run playbooks/disks.yml on one host; ``spec`` replaces its hardware.data_disks.

    ``secondary``: a test mount beside /data, which no container runtime depends on (the
    runtimes' drop-ins keep pointing at /data).
    """
    extravars: dict[str, Any] = {"data_disks_runtime_services": []} if secondary else {}
    if spec is not None:
        extravars["data_disks_spec"] = spec
    if check:
        extravars["data_disks_report_only"] = True
    return run_playbook(
        "disks", ctx.inventory, limit=host, check=check, extravars=extravars or None
    )


def failure_text(result: RunResult) -> str:
    return "\n".join(f.message for f in result.failures)


def one_disk(target: DiskState, **extra: Any) -> dict[str, Any]:
    return {
        "disks": [{"serial": target.serial, **extra.pop("disk", {})}],
        "mount_point": TARGET_MOUNT,
        **extra,
    }


@pytest.fixture(scope="module")
def ctx(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ctx]:
    """Node 1 with two extra blank disks, and a copy of the lab inventory."""
    inventory = tmp_path_factory.mktemp("disks") / "inventory"
    shutil.copytree(lab.inventory, inventory)
    # The lab has no udev: its inventory names the stand-in that publishes by-uuid links.
    lab_vars = yaml.safe_load((inventory / "group_vars" / "all" / "lab.yml").read_text())
    assert lab_vars["data_disks_udev_settle_command"] == LAB_SETTLE
    lab.refresh()
    node1 = next(n for n in lab.nodes if n.index == 1)
    base = {
        d["serial"]
        for d in yaml.safe_load(
            (inventory / "host_vars" / node1.name / "hardware.yml").read_text()
        )["hardware"]["data_disks"]["disks"]
    }
    extras = [d for d in node1.disks if d.serial not in base]
    while len(extras) < 2:
        extras.append(lab_core.add_disk(lab.name, 1, EXTRA_SIZE))
    hosts = [n.name for n in sorted(lab.nodes, key=lambda n: n.index)]
    # Container runtimes running before this module (none in the suite's order) must run again.
    active = {
        node.index: [
            unit
            for unit in ("docker.service", "containerd.service")
            if lab.ssh(node.index, f"systemctl is-active --quiet {unit}", check=False).returncode
            == 0
        ]
        for node in lab.nodes
    }
    context = Ctx(lab, inventory, hosts, extras[0], extras[1], active)
    yield context
    # Whatever a failed test left behind on node 1: no swap, no mount on the extra disks.
    context.node1(
        f"swapoff /dev/disk/by-id/{extras[0].by_id} 2>/dev/null; "
        f"umount {HOSTILE_MOUNT} /boot 2>/dev/null; true",
        check=False,
    )


@pytest.fixture
def blank(ctx: Ctx) -> Iterator[Ctx]:
    """Both extra disks blank before (and after) a hostile case."""
    reset = (
        f"swapoff /dev/disk/by-id/{ctx.x.by_id} 2>/dev/null; "
        f"umount {HOSTILE_MOUNT} 2>/dev/null; umount /boot 2>/dev/null; "
        f"wipefs -a -q /dev/disk/by-id/{ctx.x.by_id} /dev/disk/by-id/{ctx.y.by_id} && "
        f"{LAB_SETTLE}"
    )
    ctx.node1(reset)
    yield ctx
    ctx.node1(reset, check=False)


# --- hostile states: each refused, nothing written ----------------------------------------------


def _in_node(command: str) -> Callable[[Ctx], None]:
    def make(ctx: Ctx) -> None:
        ctx.node1(command.format(x=f"/dev/disk/by-id/{ctx.x.by_id}", mnt=HOSTILE_MOUNT))

    return make


def _gpt(ctx: Ctx) -> None:
    # The node has no partitioning tool; the host's sgdisk writes a GPT on the same loop disk.
    subprocess.run(["sgdisk", "-o", str(ctx.x.loop)], check=True, capture_output=True)


def _md_member(ctx: Ctx) -> None:
    with open(str(ctx.x.loop), "r+b") as device:
        device.seek(4096)  # v1.2: 8 sectors from the start
        device.write(md_superblock("otherhost:scratch", 2, (EXTRA_SIZE >> 9) - 4096))


def _lvm_pv(ctx: Ctx) -> None:
    subprocess.run(
        ["pvcreate", "--yes", "--quiet", str(ctx.x.loop)], check=True, capture_output=True
    )


# Filesystems are mounted read-only: a mounted filesystem writes to its disk on its own
# (journal, lazy inode-table init), which would hide whether gpunode wrote anything.
HOSTILE = [
    pytest.param(_in_node("mkfs.ext4 -q {x}"), {}, r"carries ext4 signature", id="filesystem"),
    pytest.param(_gpt, {}, r"carries gpt partition table", id="partition-table-only"),
    pytest.param(
        _in_node("mkfs.ext4 -q {x} && mkdir -p {mnt} && mount -o ro {x} {mnt}"),
        {"allow_wipe": "x"},
        r"is mounted \(.* on /mnt/gpunode-hostile, ext4\)",
        id="mounted-even-with-allow-wipe",
    ),
    pytest.param(
        _md_member,
        {"allow_wipe": "x"},
        r"is a RAID member \(linux_raid_member, array 'otherhost:scratch'\)",
        id="md-member",
    ),
    pytest.param(_lvm_pv, {"allow_wipe": "x"}, r"is an LVM physical volume", id="lvm-pv"),
    pytest.param(
        _in_node("mkswap -q {x} && swapon {x}"),
        {"allow_wipe": "x"},
        r"holds active swap",
        id="swap",
    ),
    pytest.param(
        _in_node("mkfs.ext4 -q {x} && mkdir -p /boot && mount -o ro {x} /boot"),
        {"allow_wipe": "x"},
        r"is the system disk \(behind /boot\)",
        id="system-disk",
    ),
    pytest.param(
        None,
        {"disks": [{"serial": "SABSENT0000"}]},
        r"SABSENT0000: no disk with this serial",
        id="serial-absent",
    ),
    pytest.param(
        None,
        {"disk": {"size": "2GiB"}},
        r"does not match the profile's 2GiB",
        id="size-mismatch",
    ),
    pytest.param(
        None,
        {"disk": {"model": "SAMSUNG MZQL23T8HCLS-00A07"}},
        r"does not match the profile's 'SAMSUNG MZQL23T8HCLS-00A07'",
        id="model-mismatch",
    ),
]


@pytest.mark.parametrize(("make", "extra", "reason"), HOSTILE)
def test_hostile_state_is_refused_and_no_disk_changes(
    blank: Ctx, make: Callable[[Ctx], None] | None, extra: dict[str, Any], reason: str
) -> None:
    ctx = blank
    if make is not None:
        make(ctx)
        ctx.node1(LAB_SETTLE)
    extra = dict(extra)
    if extra.get("allow_wipe") == "x":
        extra["allow_wipe"] = [ctx.x.serial]
    spec = one_disk(ctx.x, **extra)
    swapping = _is_swap(ctx)
    before = ctx.digests(1)
    header = _header(ctx.x)
    result = play(ctx, ctx.hosts[0], spec)
    assert not result.ok, "a hostile state was not refused"
    message = failure_text(result)
    assert "refused, nothing was changed" in message, message
    assert re.search(reason, message), message
    after = ctx.digests(1)
    if swapping:
        # The kernel pages out to an active swap disk on its own, so its contents may move;
        # its swap header must be intact and it must still be in use.
        assert _header(ctx.x) == header
        assert _is_swap(ctx)
        before.pop(ctx.x.serial)
        after.pop(ctx.x.serial)
    assert after == before


def _header(disk: DiskState) -> bytes:
    os.sync()
    with disk.image.open("rb") as handle:
        return handle.read(4096)


def _is_swap(ctx: Ctx) -> bool:
    swaps = ctx.node1("cat /proc/swaps").stdout
    kernel = ctx.node1(f"readlink -f /dev/disk/by-id/{ctx.x.by_id}").stdout.strip()
    return kernel in swaps.split()


def test_names_swapped_between_runs_still_refuse_the_same_disk(blank: Ctx) -> None:
    ctx = blank
    x_path = f"/dev/disk/by-id/{ctx.x.by_id}"
    ctx.node1(f"mkfs.ext4 -q {x_path} && {LAB_SETTLE}")
    kernel_before = ctx.node1(f"readlink -f {x_path}").stdout.strip()
    before = ctx.digests(1)
    first = play(ctx, ctx.hosts[0], one_disk(ctx.x))
    assert not first.ok and "carries ext4 signature" in failure_text(first)

    # The NVMe names move (as across a reboot); by-id still follows the serial.
    lab_core.swap_kernel_names(ctx.lab.name, 1, ctx.x.serial, ctx.y.serial)
    kernel_after = ctx.node1(f"readlink -f {x_path}").stdout.strip()
    assert kernel_after != kernel_before
    second = play(ctx, ctx.hosts[0], one_disk(ctx.x))
    assert not second.ok
    assert f"{ctx.x.serial}: carries ext4 signature" in failure_text(second)
    # The blank disk that now has X's old kernel name is planned, by its own serial.
    planned = play(ctx, ctx.hosts[0], one_disk(ctx.y), check=True)
    assert planned.ok, failure_text(planned)
    report = planned.host_facts(ctx.hosts[0], "gpunode_data_disks")
    assert report["disks"][0]["path"] == f"/dev/disk/by-id/{ctx.y.by_id}"
    assert report["actions"][0]["command"].endswith(f"/dev/disk/by-id/{ctx.y.by_id}")
    assert ctx.digests(1) == before


def test_md_raid0_is_planned_and_needs_md_to_apply(blank: Ctx) -> None:
    ctx = blank
    spec = {
        "disks": [{"serial": ctx.x.serial}, {"serial": ctx.y.serial}],
        "layout": "md-raid0",
        "mount_point": TARGET_MOUNT,
    }
    planned = play(ctx, ctx.hosts[0], spec, check=True)
    assert planned.ok, failure_text(planned)
    report = planned.host_facts(ctx.hosts[0], "gpunode_data_disks")
    commands = [a["command"] for a in report["actions"]]
    assert commands[0].startswith("mdadm --create /dev/md/data --metadata=1.2 --name=data")
    assert "/dev/md/data" in commands[1]  # wait for udev to publish the array
    assert commands[2].startswith("mkfs.xfs -q -L data -m uuid=")
    assert commands[2].endswith("/dev/md/data")
    if Path("/proc/mdstat").exists():
        assert not report["blockers"]
    else:
        before = ctx.digests(1)
        assert "no md software RAID" in report["blockers"][0]
        applied = play(ctx, ctx.hosts[0], spec)
        assert not applied.ok and "cannot apply on this node" in failure_text(applied)
        assert ctx.digests(1) == before


# --- convergence ------------------------------------------------------------------------------


def _findmnt(ctx: Ctx, node: int, target: str) -> dict[str, str]:
    out = ctx.lab.ssh(node, f"findmnt -J -o TARGET,SOURCE,FSTYPE,OPTIONS {target}", check=False)
    if out.returncode != 0:
        return {}
    return dict(json.loads(out.stdout)["filesystems"][0])


def _unit_uuid(ctx: Ctx, node: int, unit: str) -> str:
    text = ctx.lab.ssh(node, f"cat /etc/systemd/system/'{unit}'").stdout
    match = re.search(r"^What=/dev/disk/by-uuid/(\S+)$", text, re.M)
    assert match, text
    return match.group(1)


def test_allow_wipe_proceeds_and_one_disk_converges_to_xfs(blank: Ctx) -> None:
    ctx = blank
    _gpt(ctx)
    ctx.node1(LAB_SETTLE)
    spec = {
        "disks": [{"serial": ctx.x.serial, "size": "320MiB"}],
        "layout": "single",
        "mount_point": XFS_MOUNT,
        "allow_wipe": [ctx.x.serial],
    }
    planned = play(ctx, ctx.hosts[0], spec, check=True, secondary=True)
    report = planned.host_facts(ctx.hosts[0], "gpunode_data_disks")
    assert [a["kind"] for a in report["actions"]][:2] == ["wipe", "mkfs"]
    y_before = ctx.digests(1)[ctx.y.serial]
    try:
        first = play(ctx, ctx.hosts[0], spec, secondary=True)
        assert first.ok, failure_text(first)
        mounted = _findmnt(ctx, 1, XFS_MOUNT)
        assert mounted.get("fstype") == "xfs"
        assert "noatime" in mounted["options"]
        fs_uuid = ctx.node1(f"blkid -p -s UUID -o value /dev/disk/by-id/{ctx.x.by_id}").stdout
        assert _unit_uuid(ctx, 1, "mnt-gpunode\\x2dxfs.mount") == fs_uuid.strip()
        tree = ctx.node1(f"stat -c '%n %a %G' {XFS_MOUNT}/datasets {XFS_MOUNT}/scratch").stdout
        assert f"{XFS_MOUNT}/datasets 2775 data" in tree
        second = play(ctx, ctx.hosts[0], spec, secondary=True)
        assert second.ok and second.changed == 0, second.to_dict()
        assert ctx.digests(1)[ctx.y.serial] == y_before  # the other disk was not touched
    finally:
        ctx.node1(
            "systemctl disable --now 'mnt-gpunode\\x2dxfs.mount' 2>/dev/null; "
            "rm -f '/etc/systemd/system/mnt-gpunode\\x2dxfs.mount' "
            "'/etc/gpunode/data-disks/mnt-gpunode\\x2dxfs.json'; systemctl daemon-reload",
            check=False,
        )


EPH_MOUNT = "/mnt/gpunode-eph"
EPH_UNIT = "mnt-gpunode\\x2deph.mount"


def test_ephemeral_disk_is_recreated_at_boot_only_when_blank(blank: Ctx) -> None:
    ctx = blank
    spec = {"disks": [{"serial": ctx.x.serial}], "mount_point": EPH_MOUNT, "ephemeral": True}
    x_path = f"/dev/disk/by-id/{ctx.x.by_id}"
    try:
        first = play(ctx, ctx.hosts[0], spec, secondary=True)
        assert first.ok, failure_text(first)
        fs_uuid = _unit_uuid(ctx, 1, EPH_UNIT)
        ctx.node1(f"echo kept > {EPH_MOUNT}/scratch/marker")
        # A plain reboot: the disk still holds the filesystem, which is left alone.
        lab_core.restart_node(ctx.lab.name, 1)
        _wait_mounted(ctx, 1, EPH_MOUNT)
        assert ctx.node1(f"cat {EPH_MOUNT}/scratch/marker").stdout.strip() == "kept"
        # The instance stopped: the disk comes back blank; the oneshot makes the filesystem
        # again, with the same UUID, before the mount and the container runtimes.
        # In a lab node, services with their own mount namespace (systemd-logind) keep a copy
        # of a boot-time mount (the container's root is not a shared mount): restart them so
        # the disk is really free, as it is on a host after the unmount.
        ctx.node1(
            f"systemctl stop '{EPH_UNIT}' && systemctl restart systemd-logind && "
            f"wipefs -a -q {x_path}"
        )
        lab_core.restart_node(ctx.lab.name, 1)
        _wait_mounted(ctx, 1, EPH_MOUNT)
        assert ctx.node1(f"blkid -p -s UUID -o value {x_path}").stdout.strip() == fs_uuid
        assert ctx.node1(f"test -e {EPH_MOUNT}/scratch/marker", check=False).returncode == 1
        tree = ctx.node1(f"stat -c '%n %a %G' {EPH_MOUNT}/datasets").stdout
        assert f"{EPH_MOUNT}/datasets 2775 data" in tree
        journal = ctx.node1("journalctl -b -u gpunode-data-ephemeral.service --no-pager").stdout
        assert f"re-created the data filesystem {fs_uuid}" in journal
        again = play(ctx, ctx.hosts[0], spec, secondary=True)
        assert again.ok and again.changed == 0, again.to_dict()
    finally:
        ctx.node1(
            f"systemctl disable --now '{EPH_UNIT}' gpunode-data-ephemeral.service "
            "gpunode-data-tree.service 2>/dev/null; "
            f"rm -f '/etc/systemd/system/{EPH_UNIT}' /etc/systemd/system/gpunode-data-*.service "
            "/usr/local/sbin/gpunode-data-ephemeral "
            "'/etc/gpunode/data-disks/mnt-gpunode\\x2deph.json'; "
            "systemctl daemon-reload",
            check=False,
        )


def _wait_mounted(ctx: Ctx, node: int, target: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _findmnt(ctx, node, target):
            return
        time.sleep(1)
    raise AssertionError(f"{target} was not mounted on node {node} within {timeout}s")


def test_lab_disks_converge_to_btrfs_raid0_at_data_on_both_nodes(ctx: Ctx) -> None:
    # Node 2's first disk carries a partition table the profile allows gpunode to wipe.
    node2 = ctx.disks_of(2)
    host2 = ctx.hosts[1]
    spec2 = ctx.inventory_spec(host2)
    if _findmnt(ctx, 2, "/data").get("fstype") is None:
        subprocess.run(["sgdisk", "-o", str(node2[0].loop)], check=True, capture_output=True)
        ctx.lab.ssh(2, LAB_SETTLE)
        refused = play(ctx, host2)
        assert not refused.ok and "carries gpt partition table" in failure_text(refused)
    allowed = {**spec2, "allow_wipe": [node2[0].serial]}
    assert play(ctx, host2, allowed).ok

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    gpunode = [sys.executable, "-m", "toolkit"]
    planned = subprocess.run(
        [*gpunode, "disks", "plan", "-i", str(ctx.inventory), "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=False,
    )
    document = json.loads(planned.stdout)
    assert planned.returncode == 0, planned.stderr[-2000:]
    plan1 = document["nodes"][ctx.hosts[0]]["plan"]
    assert plan1["layout"] == ("md-raid0" if Path("/proc/mdstat").exists() else "btrfs-raid0")
    assert document["nodes"][host2]["plan"]["done"] is True

    no_tty = subprocess.run(
        [*gpunode, "disks", "apply", "-i", str(ctx.inventory)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert no_tty.returncode == 2 and "--yes" in no_tty.stderr

    applied = subprocess.run(
        [*gpunode, "disks", "apply", "-i", str(ctx.inventory), "--yes", "--json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=False,
    )
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-2000:]
    for index in (1, 2):
        mounted = _findmnt(ctx, index, "/data")
        assert mounted.get("fstype") in ("btrfs", "xfs"), mounted
        fs_uuid = ctx.lab.ssh(index, "findmnt -n -o UUID /data").stdout.strip()
        assert _unit_uuid(ctx, index, "data.mount") == fs_uuid
        for service in ("docker", "containerd"):
            dropin = ctx.lab.ssh(
                index, f"cat /etc/systemd/system/{service}.service.d/gpunode-data-mount.conf"
            ).stdout
            assert "RequiresMountsFor=/data" in dropin
            # Where a runtime is installed, systemd orders it after the mount (03 asserts it too).
            installed = ctx.lab.ssh(index, f"systemctl cat {service}.service", check=False)
            if installed.returncode == 0:
                after = ctx.lab.ssh(
                    index, f"systemctl show -p After -p Requires --value {service}.service"
                ).stdout
                assert "data.mount" in after.split(), after

    again = run_playbook("disks", ctx.inventory)
    assert again.ok and again.changed == 0, again.to_dict()


def test_names_swap_and_restart_keep_data_mounted(ctx: Ctx) -> None:
    base = [d for d in ctx.disks_of(1) if d.serial not in (ctx.x.serial, ctx.y.serial)]
    before = ctx.lab.ssh(1, "findmnt -n -o UUID /data").stdout.strip()
    assert before
    ctx.node1("echo kept > /data/scratch/marker")
    lab_core.swap_kernel_names(ctx.lab.name, 1, base[0].serial, base[1].serial)
    lab_core.restart_node(ctx.lab.name, 1)
    _wait_mounted(ctx, 1, "/data")
    assert ctx.lab.ssh(1, "findmnt -n -o UUID /data").stdout.strip() == before
    assert ctx.node1("cat /data/scratch/marker").stdout.strip() == "kept"
    assert ctx.node1("systemctl is-active data.mount").stdout.strip() == "active"
    again = run_playbook("disks", ctx.inventory, limit=ctx.hosts[0])
    assert again.ok and again.changed == 0, again.to_dict()
    ctx.node1("rm -f /data/scratch/marker")
    for index, running in ctx.active_runtimes.items():
        for unit in running:
            state = ctx.lab.ssh(index, f"systemctl is-active {unit}", check=False).stdout.strip()
            assert state == "active", f"node {index}: {unit} is {state} after the disks module"
