"""Table-driven tests of the disk fact parsers, from outputs recorded on Debian 12
(util-linux 2.38.1, mdadm 4.2) against loop devices, and from real NVMe servers."""

from __future__ import annotations

import pytest

from toolkit.disks import facts as f
from toolkit.errors import RemoteError

# --- recorded outputs -------------------------------------------------------------------------

BLKID_XFS = """DEVNAME=/dev/loop0
UUID=05c8dde3-1580-4df8-b0e1-07b615e85c09
BLOCK_SIZE=512
TYPE=xfs
USAGE=filesystem
"""
BLKID_GPT = """DEVNAME=/dev/loop1
PTUUID=f13c2e5d-f801-4036-908f-97b10e7cf95a
PTTYPE=gpt
"""
BLKID_SWAP = """DEVNAME=/dev/loop2
UUID=ed50cf14-4ef4-4339-9bbd-c8656c532ad7
VERSION=1
TYPE=swap
USAGE=other
"""
BLKID_LVM = """DEVNAME=/dev/loop3
UUID=GNfBaB-Ki8V-fcTg-xuUo-QTsZ-RtfM-Etj5LF
VERSION=LVM2\\ 001
TYPE=LVM2_member
USAGE=raid
"""
BLKID_MD = """DEVNAME=/dev/loop4
UUID=a2bb2603-9e7e-4cc9-b931-4bcfc8960911
UUID_SUB=9cd37e92-32b2-466a-9d3d-f88f9ef74202
LABEL=node:data
VERSION=1.2
TYPE=linux_raid_member
USAGE=raid
"""
BLKID_BTRFS = """DEVNAME=/dev/loop1
LABEL=data
UUID=700c582c-f994-4f34-82ba-164ab467e754
UUID_SUB=e4ec8edb-6445-4b7a-85f3-da1906707b2b
BLOCK_SIZE=4096
TYPE=btrfs
USAGE=filesystem
"""
BLKID_EXT4 = """DEVNAME=/dev/loop3
UUID=90771df8-2248-4bc8-9e59-f6b02972b744
VERSION=1.0
BLOCK_SIZE=1024
TYPE=ext4
USAGE=filesystem
"""
# Written from blkid's crypto_LUKS probe (superblocks/luks.c): no LUKS tool on this machine.
BLKID_LUKS = """DEVNAME=/dev/nvme2n1
VERSION=2
UUID=3c2b8c4e-6b0f-4b51-9a27-2f7a0a0c1d11
TYPE=crypto_LUKS
USAGE=crypto
"""

WIPEFS_GPT_JSON = """{
   "signatures": [
      {
         "device": "loop1",
         "offset": "0x200",
         "type": "gpt",
         "uuid": null,
         "label": null
      },{
         "device": "loop1",
         "offset": "0x13fffe00",
         "type": "gpt",
         "uuid": null,
         "label": null
      },{
         "device": "loop1",
         "offset": "0x1fe",
         "type": "PMBR",
         "uuid": null,
         "label": null
      }
   ]
}
"""
WIPEFS_EMPTY_JSON = """{
   "signatures": [

   ]
}
"""
WIPEFS_MD_JSON = """{
   "signatures": [
      {
         "device": "loop4",
         "offset": "0x1000",
         "type": "linux_raid_member",
         "uuid": "a2bb2603-9e7e-4cc9-b931-4bcfc8960911",
         "label": "node:data"
      }
   ]
}
"""
WIPEFS_GPT_TABLE = """DEVICE OFFSET     TYPE UUID LABEL
loop1  0x200      gpt
loop1  0x13fffe00 gpt
loop1  0x1fe      PMBR
"""
WIPEFS_XFS_TABLE = """DEVICE OFFSET TYPE UUID                                 LABEL
loop0  0x0    xfs  05c8dde3-1580-4df8-b0e1-07b615e85c09
"""

MDADM_EXAMINE = """/dev/loop4:
          Magic : a92b4efc
        Version : 1.2
    Feature Map : 0x0
     Array UUID : a2bb2603:9e7e4cc9:b9314bcf:c8960911
           Name : node:data
  Creation Time : Sun Nov 29 16:29:41 2026
     Raid Level : raid0
   Raid Devices : 2

 Avail Dev Size : 600000 sectors (292.97 MiB 307.20 MB)
    Data Offset : 2048 sectors
   Super Offset : 8 sectors
          State : clean
    Device UUID : 9cd37e92:32b2466a:9d3df88f:9ef74202

       Checksum : 94e5e2ca - correct
         Events : 1

     Chunk Size : 512K

   Device Role : Active device 0
   Array State : AA ('A' == active, '.' == missing, 'R' == replacing)
"""
MDADM_NONE = "mdadm: No md superblock detected on /dev/loop4.\n"
MDADM_NAME_LOCAL = MDADM_EXAMINE.replace(
    "Name : node:data", "Name : gpu07:data  (local to host gpu07)"
)

LSBLK_NVME = """{
   "blockdevices": [
      {"name":"nvme0n1", "kname":"nvme0n1", "path":"/dev/nvme0n1", "maj:min":"259:0",
       "type":"disk", "size":3840755982336, "serial":"S64HNE0R100001",
       "model":"SAMSUNG MZQL23T8HCLS-00A07", "fstype":null, "uuid":null, "pttype":null,
       "mountpoints":[null]},
      {"name":"nvme3n1", "kname":"nvme3n1", "path":"/dev/nvme3n1", "maj:min":"259:3",
       "type":"disk", "size":1920383410176, "serial":"S5XANA0R900001",
       "model":"SAMSUNG MZ1L21T9HCLS-00A07", "fstype":null, "uuid":null, "pttype":"gpt",
       "mountpoints":[null],
       "children": [
          {"name":"nvme3n1p1", "kname":"nvme3n1p1", "path":"/dev/nvme3n1p1",
           "maj:min":"259:4", "type":"part", "size":536870912, "serial":null, "model":null,
           "fstype":"vfat", "uuid":"3A1B-77C2", "pttype":"gpt", "mountpoints":["/boot/efi"]},
          {"name":"nvme3n1p2", "kname":"nvme3n1p2", "path":"/dev/nvme3n1p2",
           "maj:min":"259:5", "type":"part", "size":1919845490176, "serial":null,
           "model":null, "fstype":"ext4", "uuid":"9e2f0b6a-2a57-4a0e-8f7b-cc3b6f4f1a10",
           "pttype":"gpt", "mountpoints":["/"]}
       ]}
   ]
}"""
# lsblk 2.34 (Ubuntu 20.04): MOUNTPOINT, sizes as strings.
LSBLK_OLD = """{
   "blockdevices": [
      {"name": "sda", "kname": "sda", "path": "/dev/sda", "maj:min": "8:0", "type": "disk",
       "size": "480103981056", "serial": "BTYF00001", "model": "INTEL SSDSC2KB48",
       "fstype": null, "uuid": null, "pttype": null, "mountpoint": "[SWAP]"}
   ]
}"""

PROC_MOUNTS = """/dev/vda / ext4 rw,relatime,discard 0 0
/dev/vda /var/lib/docker ext4 rw,relatime,discard 0 0
/dev/loop1 /tmp/disksrec/mnt btrfs rw,relatime,discard=async,space_cache=v2,subvolid=5,subvol=/ 0 0
/dev/sdb1 /mnt/old\\040disk xfs rw,noatime 0 0
"""
MOUNTINFO = """22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw,discard
44 27 0:39 / /tmp/disksrec/mnt rw,relatime - btrfs /dev/loop1 rw,space_cache=v2
45 27 8:17 / /mnt/old\\040disk rw,noatime shared:7 master:1 - xfs /dev/sdb1 rw
"""
PROC_SWAPS = """Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority
/dev/loop2                              partition\t327676\t\t0\t\t-2
/swap\\040file                           file\t\t1048572\t\t0\t\t-3
"""
BY_ID = (
    "/dev/disk/by-id/nvme-Lab_NVMe_LAB0001\t7\t5\tblock special file\n"
    "/dev/disk/by-id/nvme-eui.0025388b11223344\t103\t0\tblock special file\n"
    "/dev/disk/by-id/nvme-Lab_NVMe_LAB0001-part1\t103\t1\tblock special file\n"
    "/dev/disk/by-id/stray\t0\t0\tregular empty file\n"
)


# --- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "rc", "type_", "uuid", "pttype", "empty"),
    [
        (BLKID_XFS, 0, "xfs", "05c8dde3-1580-4df8-b0e1-07b615e85c09", None, False),
        (BLKID_GPT, 0, None, None, "gpt", False),
        (BLKID_SWAP, 0, "swap", "ed50cf14-4ef4-4339-9bbd-c8656c532ad7", None, False),
        (BLKID_LVM, 0, "LVM2_member", "GNfBaB-Ki8V-fcTg-xuUo-QTsZ-RtfM-Etj5LF", None, False),
        (BLKID_MD, 0, "linux_raid_member", "a2bb2603-9e7e-4cc9-b931-4bcfc8960911", None, False),
        (BLKID_BTRFS, 0, "btrfs", "700c582c-f994-4f34-82ba-164ab467e754", None, False),
        (BLKID_EXT4, 0, "ext4", "90771df8-2248-4bc8-9e59-f6b02972b744", None, False),
        (BLKID_LUKS, 0, "crypto_LUKS", "3c2b8c4e-6b0f-4b51-9a27-2f7a0a0c1d11", None, False),
        ("", 2, None, None, None, True),
    ],
)
def test_parse_blkid_export(text, rc, type_, uuid, pttype, empty):
    probe = f.parse_blkid_export(text, rc)
    assert (probe.type, probe.uuid, probe.pttype, probe.empty) == (type_, uuid, pttype, empty)


def test_blkid_unescapes_values_and_keeps_label():
    assert f.parse_blkid_export(BLKID_LVM).values["VERSION"] == "LVM2 001"
    assert f.parse_blkid_export(BLKID_MD).label == "node:data"
    assert "gpt partition table" in f.parse_blkid_export(BLKID_GPT).describe()


@pytest.mark.parametrize(
    ("text", "rc", "message"),
    [
        ("blkid: error: /dev/x: No such file or directory", 4, "exit status 4"),
        ("no equals sign here", 0, "unexpected blkid export line"),
    ],
)
def test_parse_blkid_export_errors(text, rc, message):
    with pytest.raises(RemoteError, match=message):
        f.parse_blkid_export(text, rc)


@pytest.mark.parametrize(
    ("parser", "text", "expected"),
    [
        (
            f.parse_wipefs_json,
            WIPEFS_GPT_JSON,
            [(0x200, "gpt"), (0x13FFFE00, "gpt"), (0x1FE, "PMBR")],
        ),
        (f.parse_wipefs_json, WIPEFS_EMPTY_JSON, []),
        (f.parse_wipefs_json, "", []),
        (f.parse_wipefs_json, WIPEFS_MD_JSON, [(0x1000, "linux_raid_member")]),
        (
            f.parse_wipefs_table,
            WIPEFS_GPT_TABLE,
            [(0x200, "gpt"), (0x13FFFE00, "gpt"), (0x1FE, "PMBR")],
        ),
        (f.parse_wipefs_table, WIPEFS_XFS_TABLE, [(0, "xfs")]),
        (f.parse_wipefs_table, "", []),
    ],
)
def test_parse_wipefs(parser, text, expected):
    assert [(s.offset, s.type) for s in parser(text)] == expected


def test_wipefs_keeps_uuid_and_label():
    (sig,) = f.parse_wipefs_json(WIPEFS_MD_JSON)
    assert (sig.uuid, sig.label) == ("a2bb2603-9e7e-4cc9-b931-4bcfc8960911", "node:data")
    (sig,) = f.parse_wipefs_table(WIPEFS_XFS_TABLE)
    assert sig.uuid == "05c8dde3-1580-4df8-b0e1-07b615e85c09"


@pytest.mark.parametrize(
    ("parser", "text"),
    [(f.parse_wipefs_json, "not json"), (f.parse_wipefs_json, "{}"), (f.parse_wipefs_table, "x y")],
)
def test_parse_wipefs_errors(parser, text):
    with pytest.raises(RemoteError):
        parser(text)


@pytest.mark.parametrize(
    ("text", "rc", "name", "short", "devices"),
    [
        (MDADM_EXAMINE, 0, "node:data", "data", 2),
        (MDADM_NAME_LOCAL, 0, "gpu07:data", "data", 2),
    ],
)
def test_parse_mdadm_examine(text, rc, name, short, devices):
    sb = f.parse_mdadm_examine(text, rc)
    assert sb is not None
    assert (sb.name, sb.short_name, sb.raid_devices, sb.level) == (name, short, devices, "raid0")
    assert sb.array_uuid == "a2bb2603:9e7e4cc9:b9314bcf:c8960911"


def test_parse_mdadm_examine_no_superblock_and_errors():
    assert f.parse_mdadm_examine(MDADM_NONE, 1) is None
    with pytest.raises(RemoteError, match="exit status 2"):
        f.parse_mdadm_examine("mdadm: cannot open /dev/x: Permission denied", 2)
    with pytest.raises(RemoteError, match="no array UUID"):
        f.parse_mdadm_examine("/dev/x:\n  Magic : a92b4efc\n", 0)


def test_parse_lsblk_tree_flattens_with_parents():
    nodes = f.parse_lsblk_json(LSBLK_NVME)
    by_name = {n.name: n for n in nodes}
    assert by_name["nvme0n1"].size == 3840755982336
    assert by_name["nvme0n1"].mountpoints == ()
    assert by_name["nvme3n1p2"].parents == ((259, 3),)
    assert by_name["nvme3n1p2"].mountpoints == ("/",)
    assert by_name["nvme3n1"].children == ((259, 4), (259, 5))
    assert f.devnums_under(nodes, [(259, 3)]) == {(259, 3), (259, 4), (259, 5)}


def test_parse_lsblk_old_format():
    (node,) = f.parse_lsblk_json(LSBLK_OLD)
    assert (node.size, node.mountpoints, node.devnum) == (480103981056, ("[SWAP]",), (8, 0))


@pytest.mark.parametrize("text", ["[]", "nope", '{"blockdevices": 3}'])
def test_parse_lsblk_errors(text):
    with pytest.raises(RemoteError):
        f.parse_lsblk_json(text)


def test_parse_proc_mounts_unescapes():
    mounts = f.parse_proc_mounts(PROC_MOUNTS)
    assert [(m.target, m.fstype) for m in mounts][-1] == ("/mnt/old disk", "xfs")
    assert mounts[2].source == "/dev/loop1"
    assert all(m.devnum is None for m in mounts)


def test_parse_mountinfo_device_numbers():
    mounts = {m.target: m for m in f.parse_mountinfo(MOUNTINFO)}
    assert mounts["/"].devnum == (254, 0)
    assert mounts["/proc"].devnum is None  # anonymous
    assert mounts["/tmp/disksrec/mnt"].devnum is None  # btrfs: anonymous device number
    assert mounts["/tmp/disksrec/mnt"].source == "/dev/loop1"
    assert mounts["/mnt/old disk"].devnum == (8, 17)
    assert mounts["/mnt/old disk"].fstype == "xfs"


def test_parse_mountinfo_error():
    with pytest.raises(RemoteError):
        f.parse_mountinfo("1 2 3:4 / /x rw no separator here")


def test_parse_proc_swaps():
    swaps = f.parse_proc_swaps(PROC_SWAPS)
    assert [(s.filename, s.kind) for s in swaps] == [
        ("/dev/loop2", "partition"),
        ("/swap file", "file"),
    ]
    assert f.parse_proc_swaps("Filename Type Size Used Priority\n") == []
    with pytest.raises(RemoteError):
        f.parse_proc_swaps("garbage\n")


def test_parse_by_id():
    links = f.parse_by_id(BY_ID)
    assert [(x.name, x.devnum, x.is_partition) for x in links] == [
        ("nvme-Lab_NVMe_LAB0001", (7, 5), False),
        ("nvme-eui.0025388b11223344", (259, 0), False),
        ("nvme-Lab_NVMe_LAB0001-part1", (259, 1), True),
    ]
    assert links[0].path == "/dev/disk/by-id/nvme-Lab_NVMe_LAB0001"
    with pytest.raises(RemoteError):
        f.parse_by_id("/dev/disk/by-id/x 7 5")


@pytest.mark.parametrize(
    ("name", "serial", "model"),
    [
        (
            "nvme-SAMSUNG_MZQL23T8HCLS-00A07_S64HNE0R100001",
            "S64HNE0R100001",
            "SAMSUNG_MZQL23T8HCLS-00A07",
        ),
        (
            "nvme-SAMSUNG_MZQL23T8HCLS-00A07_S64HNE0R100001_1",
            "S64HNE0R100001",
            "SAMSUNG_MZQL23T8HCLS-00A07",
        ),
        (
            "nvme-Amazon_EC2_NVMe_Instance_Storage_AWS1A2B3C4D",
            "AWS1A2B3C4D",
            "Amazon_EC2_NVMe_Instance_Storage",
        ),
        ("ata-INTEL_SSDSC2KB480G8_BTYF00001", "BTYF00001", "INTEL_SSDSC2KB480G8"),
        ("nvme-LAB0001", "LAB0001", ""),
        ("nvme-Lab_NVMe_XLAB0001", "LAB0001", None),  # a serial is a whole field
        ("nvme-Lab_NVMe_LAB0001-part1", "LAB0001", None),
        ("nvme-eui.0025388b11223344", "LAB0001", None),
        ("wwn-0x5002538e40a1b2c3", "LAB0001", None),
        ("nvme-Model_WITH_SPACE_SER_1_2", "SER 1", "Model_WITH_SPACE"),
    ],
)
def test_by_id_serial_model(name, serial, model):
    assert f.by_id_serial_model(name, serial) == model


def test_stat_parsers():
    text = "/dev/loop2\t7\t2\tblock special file\n/tmp\t0\t0\tdirectory\n"
    assert f.parse_stat_devnums(text) == {"/dev/loop2": (7, 2)}
    # 0x10301 is makedev(259, 1) in glibc's encoding; 0x802 is makedev(8, 2).
    assert f.parse_stat_st_dev("/swap file\t10301\n/swap2\t802\n") == {
        "/swap file": (259, 1),
        "/swap2": (8, 2),
    }


@pytest.mark.parametrize(("text", "num"), [("259:1", (259, 1)), (" 7:12 ", (7, 12))])
def test_parse_devnum(text, num):
    assert f.parse_devnum(text) == num
    assert f.format_devnum(num) == text.strip()


def test_parse_devnum_error():
    with pytest.raises(RemoteError, match="major:minor"):
        f.parse_devnum("sda")
