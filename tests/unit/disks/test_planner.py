"""Table-driven tests of the data-disk planner, from recorded device facts.

Each node is described by the outputs its probes print (recorded blkid, wipefs, mdadm,
mountinfo, swaps outputs from tests/unit/disks/test_facts.py), assembled into the probe
script's sections and read through ``toolkit.disks.gather`` exactly as on a real node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from toolkit.disks import units
from toolkit.disks.gather import node_facts, parse_sections
from toolkit.disks.planner import Plan, plan
from toolkit.disks.rules import NodeFacts
from toolkit.disks.spec import DataDisksSpec
from unit.disks.test_facts import (
    BLKID_BTRFS,
    BLKID_EXT4,
    BLKID_GPT,
    BLKID_LUKS,
    BLKID_LVM,
    BLKID_MD,
    BLKID_SWAP,
    BLKID_XFS,
    MDADM_EXAMINE,
    MDADM_NONE,
    WIPEFS_EMPTY_JSON,
    WIPEFS_GPT_JSON,
    WIPEFS_MD_JSON,
)

GIB = 1024**3
NEW_UUID = "0b6d1a54-7c1f-4d3e-9a55-2d5ad9c3e111"
OTHER_UUID = "11111111-2222-4333-8444-555555555555"

# A lab node: overlay root (no block device behind /), loop "NVMe" disks of the host.
BASE_MOUNTINFO = (
    "600 500 0:120 / / rw,relatime - overlay overlay rw,lowerdir=/x\n"
    "601 600 0:121 / /proc rw,nosuid - proc proc rw\n"
    "602 600 0:122 / /dev rw,nosuid - tmpfs tmpfs rw,mode=755\n"
)
SWAPS_HEADER = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"


@dataclass
class Disk:
    """One disk as the probes see it."""

    serial: str
    devnum: tuple[int, int]
    kname: str
    size: int = 8 * GIB
    model: str = "Lab_NVMe"
    blkid: str = ""
    wipefs: str = WIPEFS_EMPTY_JSON
    mdadm: str = MDADM_NONE
    children: list[dict] = field(default_factory=list)
    blkid_rc: int | None = None

    @property
    def by_id(self) -> str:
        return f"/dev/disk/by-id/nvme-{self.model}_{self.serial}"


def lsblk_entry(disk: Disk) -> dict:
    return {
        "name": disk.kname,
        "kname": disk.kname,
        "path": f"/dev/{disk.kname}",
        "maj:min": f"{disk.devnum[0]}:{disk.devnum[1]}",
        "type": "loop",
        "size": disk.size,
        "serial": None,
        "model": None,
        "fstype": None,
        "uuid": None,
        "pttype": None,
        "mountpoints": [None],
        **({"children": disk.children} if disk.children else {}),
    }


def probe_output(
    disks: list[Disk],
    *,
    mountinfo: str = BASE_MOUNTINFO,
    mount_sources: dict[str, tuple[int, int]] | None = None,
    swaps: str = SWAPS_HEADER,
    swap_devices: dict[str, tuple[int, int]] | None = None,
    swap_files: dict[str, int] | None = None,
    files: dict[str, str] | None = None,
    dirs: dict[str, str] | None = None,
    enabled: tuple[str, ...] = (),
    mdstat: bool = False,
    md_blkid: str | None = None,
    group: bool = False,
    entries: int = 0,
    extra_by_id: str = "",
) -> str:
    """What the gather script prints on such a node."""

    def sec(name: str, body: str, rc: int | str = 0, arg: str = "") -> str:
        head = f"{name} {arg}".strip()
        return f"\n@@gpunode-fact {head}@@\n{body}\n@@gpunode-fact-end {rc}@@\n"

    def stat_lines(mapping: dict[str, tuple[int, int]]) -> str:
        return "".join(f"{p}\t{a:x}\t{b:x}\tblock special file\n" for p, (a, b) in mapping.items())

    out = sec("by-id", stat_lines({d.by_id: d.devnum for d in disks}) + extra_by_id)
    out += sec("lsblk", json.dumps({"blockdevices": [lsblk_entry(d) for d in disks]}))
    out += sec("mountinfo", mountinfo)
    out += sec("mounts", "")
    out += sec("mount-sources", stat_lines(mount_sources or {}))
    out += sec("swaps", swaps)
    out += sec("swap-devices", stat_lines(swap_devices or {}))
    out += sec("swap-files", "".join(f"{p}\t{v:x}\n" for p, v in (swap_files or {}).items()))
    out += sec("mdstat", "Personalities : [raid0]\n" if mdstat else "", 0 if mdstat else 1)
    for d in disks:
        out += sec("size", str(d.size), arg=d.by_id)
        rc = d.blkid_rc if d.blkid_rc is not None else (0 if d.blkid else 2)
        out += sec("blkid", d.blkid, rc, arg=d.by_id)
        out += sec("wipefs", d.wipefs, arg=d.by_id)
        out += sec("mdadm", d.mdadm, 1 if d.mdadm == MDADM_NONE else 0, arg=d.by_id)
    if md_blkid is None:
        out += sec("md-device", "", "missing")
    else:
        out += sec("md-device", md_blkid, 0 if md_blkid else 2)
    out += sec("mount-point-entries", str(entries))
    out += sec("group", "data:x:998:" if group else "", 0 if group else 2)
    import base64

    for path, content in (files or {}).items():
        out += sec("file", base64.b64encode(content.encode()).decode(), arg=path)
    for path, state in (dirs or {}).items():
        out += sec("dir", state, arg=path)
    for unit in enabled:
        out += sec("enabled", "enabled", arg=unit)
    return out


def facts_of(spec: DataDisksSpec, disks: list[Disk], **kwargs) -> NodeFacts:
    return node_facts(parse_sections(probe_output(disks, **kwargs)), spec)


def make_spec(*serials: str, **kwargs) -> DataDisksSpec:
    return DataDisksSpec.model_validate({"disks": [{"serial": s} for s in serials], **kwargs})


def disk_a(**kw) -> Disk:
    return Disk("LAB0001", (7, 5), "loop5", **kw)


def disk_b(**kw) -> Disk:
    return Disk("LAB0002", (7, 6), "loop6", **kw)


def kinds(p: Plan) -> list[str]:
    return [a.kind for a in p.actions]


# --- refusals ---------------------------------------------------------------------------------

ROOT_PART = {
    "name": "loop5p2",
    "kname": "loop5p2",
    "maj:min": "259:5",
    "type": "part",
    "size": 4 * GIB,
    "mountpoints": ["/"],
}
BOOT_EFI_PART = {
    "name": "loop5p1",
    "kname": "loop5p1",
    "maj:min": "259:4",
    "type": "part",
    "size": 512 * 1024**2,
    "mountpoints": ["/boot/efi"],
}
MD_CHILD = {"name": "md127", "kname": "md127", "maj:min": "9:127", "type": "raid0", "size": GIB}
LVM_CHILD = {"name": "vg-lv", "kname": "dm-0", "maj:min": "253:0", "type": "lvm", "size": GIB}


REFUSALS = [
    pytest.param({}, [disk_a(blkid=BLKID_XFS)], {}, "carries xfs signature", id="filesystem"),
    pytest.param({}, [disk_a(blkid=BLKID_EXT4)], {}, "carries ext4 signature", id="ext4"),
    pytest.param(
        {},
        [disk_a(blkid=BLKID_GPT, wipefs=WIPEFS_GPT_JSON)],
        {},
        "gpt partition table",
        id="partition-table-only",
    ),
    pytest.param(
        {},
        [disk_a()],
        {"mountinfo": BASE_MOUNTINFO + "700 600 7:5 / /mnt/old rw - xfs /dev/nvme0n1 rw\n"},
        r"is mounted \(/dev/nvme0n1 on /mnt/old, xfs\)",
        id="mounted",
    ),
    pytest.param(
        {},
        [disk_a()],
        {
            "mountinfo": BASE_MOUNTINFO + "700 600 0:55 / /mnt/b rw - btrfs /dev/nvme0n1 rw\n",
            "mount_sources": {"/dev/nvme0n1": (7, 5)},
        },
        "is mounted",
        id="mounted-btrfs-by-source",
    ),
    pytest.param(
        {"allow_wipe": ["LAB0001"]},
        [
            disk_a(
                blkid=BLKID_MD,
                wipefs=WIPEFS_MD_JSON,
                mdadm=MDADM_EXAMINE.replace("node:data", "node:old"),
            )
        ],
        {},
        r"is a RAID member \(linux_raid_member, array 'node:old'\)",
        id="md-member-even-with-allow-wipe",
    ),
    pytest.param(
        {}, [disk_a(children=[MD_CHILD])], {}, "member of the md array md127", id="md-holder"
    ),
    pytest.param(
        {"allow_wipe": ["LAB0001"]},
        [disk_a(blkid=BLKID_LVM)],
        {},
        "is an LVM physical volume",
        id="lvm-pv-even-with-allow-wipe",
    ),
    pytest.param({}, [disk_a(children=[LVM_CHILD])], {}, "device-mapper device vg-lv", id="lvm-lv"),
    pytest.param({}, [disk_a(blkid=BLKID_LUKS)], {}, "encrypted container", id="luks"),
    pytest.param(
        {},
        [disk_a(blkid=BLKID_SWAP)],
        {
            "swaps": SWAPS_HEADER + "/dev/nvme0n1 partition\t8388604\t0\t-2\n",
            "swap_devices": {"/dev/nvme0n1": (7, 5)},
        },
        r"holds active swap \(/dev/nvme0n1\)",
        id="swap-active",
    ),
    pytest.param(
        {},
        [disk_a(blkid=BLKID_SWAP)],
        {},
        "carries swap signature",
        id="swap-signature-inactive",
    ),
    pytest.param(
        {},
        [disk_a(children=[ROOT_PART])],
        {"mountinfo": "1 0 259:5 / / rw - ext4 /dev/nvme0n1p2 rw\n"},
        r"is the system disk \(behind /\)",
        id="system-disk-root",
    ),
    pytest.param(
        {},
        [disk_a(children=[BOOT_EFI_PART])],
        {"mountinfo": BASE_MOUNTINFO + "9 600 259:4 / /boot/efi rw - vfat /dev/nvme0n1p1 rw\n"},
        r"is the system disk \(behind /boot/efi\)",
        id="system-disk-efi",
    ),
    pytest.param(
        {},
        [disk_a()],
        {
            "mountinfo": BASE_MOUNTINFO + "9 600 7:5 / /boot rw - ext4 /dev/nvme0n1 rw\n",
        },
        r"is the system disk \(behind /boot\)",
        id="system-disk-boot",
    ),
    pytest.param(
        {},
        [disk_a()],
        {
            "swaps": SWAPS_HEADER + "/scratch/swapfile file\t1048572\t0\t-3\n",
            "swap_files": {"/scratch/swapfile": 0x705},
        },
        r"holds active swap \(/scratch/swapfile\)",
        id="swap-file-on-disk",
    ),
    pytest.param(
        {"disks": [{"serial": "LAB0001", "size": "16GiB"}]},
        [disk_a()],
        {},
        r"size 8.59GB \(8589934592 bytes\) does not match the profile's 16GiB",
        id="size-mismatch",
    ),
    pytest.param(
        {"disks": [{"serial": "LAB0001", "model": "SAMSUNG MZQL23T8HCLS-00A07"}]},
        [disk_a()],
        {},
        r"model 'Lab NVMe' does not match",
        id="model-mismatch",
    ),
    pytest.param(
        {"disks": [{"serial": "LAB0009"}]},
        [disk_a()],
        {},
        "LAB0009: no disk with this serial",
        id="serial-absent",
    ),
    pytest.param(
        {"disks": [{"serial": "LAB0001", "by_id": "nvme-Lab_NVMe_LAB0002"}]},
        [disk_a(), disk_b()],
        {},
        "do not carry this serial",
        id="by-id-of-another-disk",
    ),
    pytest.param(
        {"disks": [{"serial": "LAB0001", "by_id": "nvme-gone"}]},
        [disk_a()],
        {},
        "nvme-gone is not present",
        id="by-id-absent",
    ),
    pytest.param(
        {},
        [disk_a()],
        {"extra_by_id": "/dev/disk/by-id/nvme-Other_LAB0001\t7\t9\tblock special file\n"},
        "names several devices",
        id="serial-ambiguous",
    ),
    pytest.param(
        {},
        [disk_a()],
        {"mountinfo": BASE_MOUNTINFO + "9 600 8:16 / /data rw - xfs /dev/sdb rw\n"},
        r"/data: already a mount point of /dev/sdb \(xfs\)",
        id="mount-point-taken",
    ),
    pytest.param(
        {},
        [disk_a(blkid="garbage line", blkid_rc=0)],
        {},
        "could not be probed",
        id="probe-error",
    ),
]


@pytest.mark.parametrize(("spec_extra", "disks", "node", "reason"), REFUSALS)
def test_refusals(spec_extra, disks, node, reason):
    spec = DataDisksSpec.model_validate({"disks": [{"serial": "LAB0001"}], **spec_extra})
    result = plan(spec, facts_of(spec, disks, **node), NEW_UUID)
    assert result.refused
    assert not result.actions
    assert any(__import__("re").search(reason, r) for r in result.reasons), result.reasons
    # Every reason names a disk by serial, or the mount point.
    assert all(r.startswith(("LAB", "/data", "disks")) for r in result.reasons)


def test_every_reason_is_collected():
    spec = make_spec("LAB0001", "LAB0002", "LAB0009", layout="btrfs-raid0")
    facts = facts_of(
        spec,
        [disk_a(blkid=BLKID_XFS), disk_b(blkid=BLKID_LVM)],
        mountinfo=BASE_MOUNTINFO + "700 600 7:5 / /mnt rw - xfs /dev/nvme0n1 rw\n",
    )
    result = plan(spec, facts, NEW_UUID)
    joined = "\n".join(result.reasons)
    for expected in (
        "LAB0001: carries xfs",
        "LAB0001: is mounted",
        "LAB0002: is an LVM",
        "LAB0009",
    ):
        assert expected in joined
    by_serial = {d.serial: d for d in result.disks}
    assert by_serial["LAB0009"].path is None
    assert by_serial["LAB0001"].device == "7:5"


def test_duplicate_device_refused():
    spec = DataDisksSpec.model_validate(
        {
            "disks": [
                {"serial": "LAB0001"},
                {"serial": "X", "by_id": "nvme-Lab_NVMe_LAB0001"},
            ],
            "layout": "btrfs-raid0",
        }
    )
    facts = facts_of(
        spec,
        [disk_a()],
        extra_by_id="/dev/disk/by-id/nvme-alias_X\t7\t5\tblock special file\n",
    )
    result = plan(spec, facts, NEW_UUID)
    assert any("name the same device 7:5" in r for r in result.reasons)


def test_a_partition_by_id_is_refused():
    spec = DataDisksSpec.model_validate(
        {"disks": [{"serial": "LAB0001", "by_id": "nvme-Lab_NVMe_LAB0001-part1"}]}
    )
    part = {"name": "loop5p1", "kname": "loop5p1", "maj:min": "259:1", "type": "part", "size": GIB}
    facts = facts_of(
        spec,
        [disk_a(children=[part])],
        extra_by_id="/dev/disk/by-id/nvme-Lab_NVMe_LAB0001-part1\t103\t1\tblock special file\n",
    )
    result = plan(spec, facts, NEW_UUID)
    assert result.refused
    assert any("was not probed" in r or "is a partition" in r for r in result.reasons)


# --- layouts ----------------------------------------------------------------------------------


def test_single_xfs_plan():
    spec = make_spec("LAB0001")
    result = plan(spec, facts_of(spec, [disk_a()]), NEW_UUID)
    assert not result.refused and not result.blockers
    assert result.layout == "single" and result.uuid == NEW_UUID
    assert kinds(result)[:2] == ["mkfs", "settle"]
    mkfs = result.actions[0]
    assert mkfs.argv == (
        "mkfs.xfs",
        "-q",
        "-L",
        "data",
        "-m",
        f"uuid={NEW_UUID}",
        "/dev/disk/by-id/nvme-Lab_NVMe_LAB0001",
    )
    assert not any(flag in mkfs.argv for flag in ("-f", "-F", "--force"))
    written = {a.path: a.content for a in result.actions if a.kind == "write-file"}
    unit = written["/etc/systemd/system/data.mount"]
    assert f"What=/dev/disk/by-uuid/{NEW_UUID}" in unit
    assert "Options=noatime,nofail,x-systemd.device-timeout=30s\n" in unit
    assert "Before=docker.service containerd.service" in unit
    for service in ("docker.service", "containerd.service"):
        dropin = written[f"/etc/systemd/system/{service}.d/gpunode-data-mount.conf"]
        assert "RequiresMountsFor=/data" in dropin
    assert json.loads(written[units.record_path(spec.mount_point)])["uuid"] == NEW_UUID
    tail = kinds(result)[-8:]
    assert tail == ["daemon-reload", "enable", "mount", "group"] + ["directory"] * 4
    dirs = {a.argv[-1]: a.argv for a in result.actions if a.kind == "directory"}
    assert dirs["/data/datasets"][2:4] == ("-m", "2775")
    assert dirs["/data/datasets"][-2] == "data"
    assert dirs["/data/containers"][2:4] == ("-m", "711")


def test_ext4_option():
    spec = make_spec("LAB0001", filesystem="ext4")
    result = plan(spec, facts_of(spec, [disk_a()]), NEW_UUID)
    assert result.actions[0].argv[:2] == ("mkfs.ext4", "-q")
    assert result.actions[0].argv[4:6] == ("-U", NEW_UUID)


def test_md_raid0_plan_and_blocker_without_md():
    spec = make_spec("LAB0001", "LAB0002")  # auto: two disks -> md-raid0
    result = plan(spec, facts_of(spec, [disk_a(), disk_b()]), NEW_UUID)
    assert result.layout == "md-raid0" and not result.refused
    assert result.blockers and "no md" in result.blockers[0]
    create = result.actions[0]
    assert create.kind == "create-array"
    assert create.argv[:6] == (
        "mdadm",
        "--create",
        "/dev/md/data",
        "--metadata=1.2",
        "--name=data",
        "--level=0",
    )
    assert create.argv[-2:] == (
        "/dev/disk/by-id/nvme-Lab_NVMe_LAB0001",
        "/dev/disk/by-id/nvme-Lab_NVMe_LAB0002",
    )
    assert "--run" not in create.argv and "--force" not in create.argv
    assert result.actions[1].kind == "settle" and "/dev/md/data" in result.actions[1].shell()
    assert result.actions[2].argv[-1] == "/dev/md/data"
    assert "mdadm-conf" in kinds(result)
    conf = next(a for a in result.actions if a.kind == "mdadm-conf")
    assert "ARRAY /dev/md/data metadata=1.2 UUID=" in conf.shell()
    assert "update-initramfs -u" in conf.shell()
    with_md = plan(spec, facts_of(spec, [disk_a(), disk_b()], mdstat=True), NEW_UUID)
    assert not with_md.blockers


def test_btrfs_raid0_plan():
    spec = make_spec("LAB0001", "LAB0002", layout="btrfs-raid0")
    result = plan(spec, facts_of(spec, [disk_a(), disk_b()]), NEW_UUID)
    assert not result.blockers
    assert result.actions[0].argv == (
        "mkfs.btrfs",
        "-L",
        "data",
        "-U",
        NEW_UUID,
        "-d",
        "raid0",
        "-m",
        "raid1",
        "/dev/disk/by-id/nvme-Lab_NVMe_LAB0001",
        "/dev/disk/by-id/nvme-Lab_NVMe_LAB0002",
    )
    unit = next(a.content for a in result.actions if a.path == "/etc/systemd/system/data.mount")
    assert "Type=btrfs" in unit
    assert "device=/dev/disk/by-id/nvme-Lab_NVMe_LAB0002" in unit


def test_allow_wipe_wipes_only_listed_disks_first():
    spec = make_spec("LAB0001", "LAB0002", layout="btrfs-raid0", allow_wipe=["LAB0001"])
    facts = facts_of(spec, [disk_a(blkid=BLKID_GPT, wipefs=WIPEFS_GPT_JSON), disk_b()])
    result = plan(spec, facts, NEW_UUID)
    assert not result.refused
    assert result.actions[0].argv == ("wipefs", "-a", "/dev/disk/by-id/nvme-Lab_NVMe_LAB0001")
    assert kinds(result).count("wipe") == 1
    assert result.actions[1].kind == "mkfs"


def test_mount_point_with_files_is_a_note():
    spec = make_spec("LAB0001")
    result = plan(spec, facts_of(spec, [disk_a()], entries=3), NEW_UUID)
    assert not result.refused
    assert "holds 3 entries" in result.notes[0]


# --- already done, restarts, name swaps -------------------------------------------------------


def converged_node(spec: DataDisksSpec, result: Plan, disks: list[Disk], blkid: str, **kw) -> dict:
    """The probe view of a node after ``result`` was applied (what apply leaves behind)."""
    files = {a.path: a.content for a in result.actions if a.kind == "write-file"}
    dirs = {
        a.argv[-1]: f"{a.argv[3]} root {a.argv[-2]}"
        for a in result.actions
        if a.kind == "directory"
    }
    for d in disks:
        d.blkid = blkid
    mount_dev = disks[0]
    mountinfo = BASE_MOUNTINFO + (
        f"800 600 0:77 / {spec.mount_point} rw,noatime - {result.filesystem} {mount_dev.by_id} rw\n"
    )
    node = {
        "files": files,
        "dirs": dirs,
        "enabled": ("data.mount",),
        "group": True,
        "mountinfo": mountinfo,
        "mount_sources": {mount_dev.by_id: mount_dev.devnum},
    }
    node.update(kw)
    return node


def btrfs_blkid(uuid: str) -> str:
    return BLKID_BTRFS.replace("700c582c-f994-4f34-82ba-164ab467e754", uuid)


def test_second_run_changes_nothing_and_names_may_swap():
    spec = make_spec("LAB0001", "LAB0002", layout="btrfs-raid0")
    disks = [disk_a(), disk_b()]
    first = plan(spec, facts_of(spec, disks), NEW_UUID)
    node = converged_node(spec, first, disks, btrfs_blkid(NEW_UUID))
    second = plan(spec, facts_of(spec, disks, **node), OTHER_UUID)
    assert second.done, second.describe()
    assert second.existing and second.uuid == NEW_UUID
    # After a reboot the kernel names moved: LAB0001 is now 7:6 and LAB0002 7:5.
    swapped = [
        Disk("LAB0001", (7, 6), "loop6", blkid=disks[0].blkid),
        Disk("LAB0002", (7, 5), "loop5", blkid=disks[1].blkid),
    ]
    node["mount_sources"] = {swapped[0].by_id: (7, 6)}
    third = plan(spec, facts_of(spec, swapped, **node), OTHER_UUID)
    assert third.done, third.describe()
    assert {d.serial: d.device for d in third.disks} == {"LAB0001": "7:6", "LAB0002": "7:5"}


def test_unmounted_after_restart_only_mounts_again():
    spec = make_spec("LAB0001")
    disks = [disk_a()]
    first = plan(spec, facts_of(spec, disks), NEW_UUID)
    xfs = BLKID_XFS.replace("05c8dde3-1580-4df8-b0e1-07b615e85c09", NEW_UUID)
    node = converged_node(spec, first, disks, xfs, mountinfo=BASE_MOUNTINFO, dirs={})
    again = plan(spec, facts_of(spec, disks, **node), OTHER_UUID)
    assert not again.refused
    assert "mkfs" not in kinds(again) and "wipe" not in kinds(again)
    assert kinds(again)[:2] == ["settle", "mount"]
    assert again.uuid == NEW_UUID


def test_own_filesystem_is_never_formatted_even_with_allow_wipe():
    spec = make_spec("LAB0001", allow_wipe=["LAB0001"])
    disks = [disk_a()]
    first = plan(spec, facts_of(spec, disks), NEW_UUID)
    xfs = BLKID_XFS.replace("05c8dde3-1580-4df8-b0e1-07b615e85c09", NEW_UUID)
    node = converged_node(spec, first, disks, xfs)
    again = plan(spec, facts_of(spec, disks, **node), OTHER_UUID)
    assert again.done


def test_foreign_filesystem_mounted_on_data_is_refused():
    spec = make_spec("LAB0001")
    xfs = BLKID_XFS  # a filesystem gpunode did not make (no record, other UUID)
    mountinfo = BASE_MOUNTINFO + "800 600 7:5 / /data rw - xfs /dev/nvme0n1 rw\n"
    result = plan(spec, facts_of(spec, [disk_a(blkid=xfs)], mountinfo=mountinfo), NEW_UUID)
    assert result.refused
    assert any("is mounted" in r for r in result.reasons)


def test_disks_disagree_is_refused():
    spec = make_spec("LAB0001", "LAB0002", layout="btrfs-raid0")
    record = json.dumps({"uuid": NEW_UUID, "layout": "btrfs-raid0"})
    facts = facts_of(
        spec,
        [disk_a(blkid=btrfs_blkid(NEW_UUID)), disk_b()],
        files={units.record_path(spec.mount_point): record},
    )
    result = plan(spec, facts, OTHER_UUID)
    assert result.refused
    assert "disks disagree" in result.reasons[-1]
    assert "LAB0002 blank" in result.reasons[-1]


def test_layout_change_is_refused():
    spec = make_spec("LAB0001", filesystem="ext4")
    xfs = BLKID_XFS.replace("05c8dde3-1580-4df8-b0e1-07b615e85c09", NEW_UUID)
    record = json.dumps({"uuid": NEW_UUID, "layout": "single"})
    facts = facts_of(spec, [disk_a(blkid=xfs)], files={units.record_path(spec.mount_point): record})
    result = plan(spec, facts, OTHER_UUID)
    assert any("does not convert layouts" in r for r in result.reasons)


def test_existing_md_array_recognised_by_name():
    spec = make_spec("LAB0001", "LAB0002", layout="md-raid0")
    member = {"blkid": BLKID_MD, "wipefs": WIPEFS_MD_JSON, "mdadm": MDADM_EXAMINE}
    disks = [disk_a(**member), disk_b(**member)]
    inactive = plan(spec, facts_of(spec, disks, mdstat=True), NEW_UUID)
    assert not inactive.refused
    assert kinds(inactive) == ["assemble-array"]
    md_xfs = BLKID_XFS.replace("05c8dde3-1580-4df8-b0e1-07b615e85c09", NEW_UUID)
    active = plan(spec, facts_of(spec, disks, mdstat=True, md_blkid=md_xfs), OTHER_UUID)
    assert not active.refused and active.existing
    assert "create-array" not in kinds(active) and "mkfs" not in kinds(active)
    assert active.uuid == NEW_UUID


def test_existing_md_array_without_filesystem_is_refused():
    spec = make_spec("LAB0001", "LAB0002", layout="md-raid0")
    member = {"blkid": BLKID_MD, "wipefs": WIPEFS_MD_JSON, "mdadm": MDADM_EXAMINE}
    facts = facts_of(spec, [disk_a(**member), disk_b(**member)], mdstat=True, md_blkid="")
    result = plan(spec, facts, NEW_UUID)
    assert result.refused and "does not format an existing array" in result.reasons[0]


def test_ephemeral_recreates_with_recorded_uuid_when_blank():
    spec = make_spec("LAB0001", ephemeral=True)
    record = json.dumps({"uuid": NEW_UUID, "layout": "single"})
    result = plan(
        spec,
        facts_of(spec, [disk_a()], files={units.record_path(spec.mount_point): record}),
        OTHER_UUID,
    )
    assert result.uuid == NEW_UUID
    assert result.actions[0].argv[-2] == f"uuid={NEW_UUID}"
    written = {a.path: a for a in result.actions if a.kind == "write-file"}
    script = written[units.EPHEMERAL_SCRIPT]
    assert script.mode == "0755"
    assert f"mkfs.xfs -q -L data -m uuid={NEW_UUID} /dev/disk/by-id/nvme-Lab_NVMe_LAB0001" in (
        script.content or ""
    )
    service = written[f"/etc/systemd/system/{units.EPHEMERAL_UNIT}"].content or ""
    assert "Before=data.mount docker.service containerd.service" in service
    assert "gpunode-data-tree.service" in kinds(result) or any(
        a.argv == ("systemctl", "enable", units.TREE_UNIT) for a in result.actions
    )


def test_plan_to_dict_and_describe():
    spec = make_spec("LAB0001")
    result = plan(spec, facts_of(spec, [disk_a(blkid=BLKID_XFS)]), NEW_UUID)
    data = result.to_dict()
    assert data["refused"] is True and data["disks"][0]["serial"] == "LAB0001"
    assert result.describe().startswith("refused:")
    ok = plan(spec, facts_of(spec, [disk_a()]), NEW_UUID)
    assert ok.describe().startswith("1. Create the xfs filesystem on LAB0001")
    assert ok.to_dict()["actions"][0]["command"].startswith("mkfs.xfs")


def test_md_array_mounted_at_data_is_done_and_another_array_is_not_ours():
    spec = make_spec("LAB0001", "LAB0002", layout="md-raid0")
    member = {"blkid": BLKID_MD, "wipefs": WIPEFS_MD_JSON, "mdadm": MDADM_EXAMINE}
    md = {"name": "md127", "kname": "md127", "maj:min": "9:127", "type": "raid0", "size": GIB}
    disks = [disk_a(children=[md], **member), disk_b(children=[md], **member)]
    md_xfs = BLKID_XFS.replace("05c8dde3-1580-4df8-b0e1-07b615e85c09", NEW_UUID)
    first = plan(spec, facts_of(spec, disks, mdstat=True, md_blkid=md_xfs), OTHER_UUID)
    assert not first.refused, first.reasons
    node = converged_node(spec, first, disks, BLKID_MD)
    node.update(
        mdstat=True,
        md_blkid=md_xfs,
        mountinfo=BASE_MOUNTINFO + "800 600 9:127 / /data rw,noatime - xfs /dev/md127 rw\n",
        mount_sources={},
    )
    conf = "ARRAY /dev/md/data metadata=1.2 UUID=a2bb2603:9e7e4cc9:b9314bcf:c8960911\n"
    node["files"]["/etc/mdadm/mdadm.conf"] = conf
    done = plan(spec, facts_of(spec, disks, **node), OTHER_UUID)
    assert done.done, done.describe()
    # The system's own mirror (md0, mounted at /) is never taken for the data array.
    system_md = {"name": "md0", "kname": "md0", "maj:min": "9:0", "type": "raid1", "size": GIB}
    other = [disk_a(children=[system_md]), disk_b()]
    refused = plan(
        spec,
        facts_of(spec, other, mdstat=True, mountinfo="1 0 9:0 / / rw - ext4 /dev/md0 rw\n"),
        OTHER_UUID,
    )
    assert refused.refused
    assert any("LAB0001: is the system disk (behind /)" in r for r in refused.reasons)
    assert any("member of the md array md0" in r for r in refused.reasons)


def test_signatures_only_wipefs_sees_are_named():
    # A backup GPT header at the end of the disk: blkid -p finds nothing, wipefs does.
    backup_gpt = '{"signatures": [{"device": "loop5", "offset": "0x13fffe00", "type": "gpt"}]}'
    spec = make_spec("LAB0001")
    result = plan(spec, facts_of(spec, [disk_a(wipefs=backup_gpt)]), NEW_UUID)
    assert result.reasons == (
        "LAB0001: carries signatures gpt; list its serial in allow_wipe to let gpunode wipe it",
    )


def test_stale_device_timeout_dropins_are_removed():
    spec = make_spec("LAB0001")
    stale = "/etc/systemd/system/dev-disk-by\\x2duuid-old.device.d/gpunode-data-mount.conf"
    facts = facts_of(spec, [disk_a()], files={stale: "[Unit]\nJobRunningTimeoutSec=30s\n"})
    result = plan(spec, facts, NEW_UUID)
    removals = [a for a in result.actions if a.kind == "remove-file"]
    assert [a.path for a in removals] == [stale]
    assert kinds(result).index("remove-file") < kinds(result).index("daemon-reload")


def test_a_mount_no_runtime_depends_on_writes_no_runtime_dropins():
    spec = make_spec("LAB0001", mount_point="/mnt/scratch")
    result = plan(spec, facts_of(spec, [disk_a()]), NEW_UUID, runtime_services=())
    written = {a.path: a.content for a in result.actions if a.kind == "write-file"}
    assert not [p for p in written if ".service.d/" in p]
    unit = written["/etc/systemd/system/mnt-scratch.mount"] or ""
    assert "Before=" not in unit
    podman = plan(spec, facts_of(spec, [disk_a()]), NEW_UUID, runtime_services=["podman.service"])
    paths = [a.path for a in podman.actions if a.kind == "write-file"]
    assert "/etc/systemd/system/podman.service.d/gpunode-data-mount.conf" in paths


@pytest.mark.parametrize("with_mdadm", [True, False])
def test_existing_array_is_recorded_with_its_own_uuid(with_mdadm):
    spec = make_spec("LAB0001", "LAB0002", layout="md-raid0")
    member = {"blkid": BLKID_MD, "wipefs": WIPEFS_MD_JSON}
    if with_mdadm:
        member["mdadm"] = MDADM_EXAMINE
    md_xfs = BLKID_XFS.replace("05c8dde3-1580-4df8-b0e1-07b615e85c09", NEW_UUID)
    disks = [disk_a(**member), disk_b(**member)]
    result = plan(spec, facts_of(spec, disks, mdstat=True, md_blkid=md_xfs), OTHER_UUID)
    conf = next(a for a in result.actions if a.kind == "mdadm-conf")
    assert "UUID=a2bb2603:9e7e4cc9:b9314bcf:c8960911" in conf.shell()
