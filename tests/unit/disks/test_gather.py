# ruff: noqa: E501
"""The node probe script and its output, recorded on a converged lab node.

RECORDED is what ``gather_script`` printed on a lab node (Debian 12 container, util-linux
2.38.1, loop-device "NVMe" disks, a btrfs RAID0 at /data made by gpunode), captured with
``docker exec <node> sh -c "$(gather_script spec)"`` (long mountinfo lines kept as recorded).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from toolkit.disks.gather import gather_script, node_facts, parse_sections
from toolkit.disks.planner import plan
from toolkit.disks.spec import DataDisksSpec
from toolkit.errors import RemoteError

SPEC = DataDisksSpec.model_validate(
    {
        "disks": [
            {"serial": "S1AEDN01D00", "by_id": "nvme-LAB_NVMe_SSD_S1AEDN01D00", "size": "2048MiB"},
            {"serial": "S1AEDN01D01", "by_id": "nvme-LAB_NVMe_SSD_S1AEDN01D01", "size": "2048MiB"},
        ],
        "layout": "btrfs-raid0",
        "filesystem": "xfs",
        "mount_point": "/data",
    }
)

RECORDED = r"""
@@gpunode-fact by-id@@
/dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D00	7	4	block special file
/dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D01	7	5	block special file
/dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D02	7	8	block special file
/dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D03	7	9	block special file

@@gpunode-fact-end 0@@

@@gpunode-fact lsblk@@
{
   "blockdevices": [
      {
         "name": "loop0",
         "kname": "loop0",
         "path": "/dev/loop0",
         "maj:min": "7:0",
         "type": "loop",
         "size": 1073741824,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             null
         ]
      },{
         "name": "loop1",
         "kname": "loop1",
         "path": "/dev/loop1",
         "maj:min": "7:1",
         "type": "loop",
         "size": 1073741824,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             null
         ]
      },{
         "name": "loop4",
         "kname": "loop4",
         "path": "/dev/loop4",
         "maj:min": "7:4",
         "type": "loop",
         "size": 2147483648,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             null
         ]
      },{
         "name": "loop5",
         "kname": "loop5",
         "path": "/dev/loop5",
         "maj:min": "7:5",
         "type": "loop",
         "size": 2147483648,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             null
         ]
      },{
         "name": "loop6",
         "kname": "loop6",
         "path": "/dev/loop6",
         "maj:min": "7:6",
         "type": "loop",
         "size": 2147483648,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             null
         ]
      },{
         "name": "loop7",
         "kname": "loop7",
         "path": "/dev/loop7",
         "maj:min": "7:7",
         "type": "loop",
         "size": 2147483648,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             null
         ]
      },{
         "name": "loop8",
         "kname": "loop8",
         "path": "/dev/loop8",
         "maj:min": "7:8",
         "type": "loop",
         "size": 335544320,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             null
         ]
      },{
         "name": "loop9",
         "kname": "loop9",
         "path": "/dev/loop9",
         "maj:min": "7:9",
         "type": "loop",
         "size": 335544320,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             null
         ]
      },{
         "name": "zram0",
         "kname": "zram0",
         "path": "/dev/zram0",
         "maj:min": "253:0",
         "type": "disk",
         "size": 0,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             null
         ]
      },{
         "name": "vda",
         "kname": "vda",
         "path": "/dev/vda",
         "maj:min": "254:0",
         "type": "disk",
         "size": 274877906944,
         "serial": null,
         "model": null,
         "fstype": null,
         "uuid": null,
         "pttype": null,
         "mountpoints": [
             "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"
         ]
      }
   ]
}

@@gpunode-fact-end 0@@

@@gpunode-fact mountinfo@@
136 62 0:52 / / rw,relatime master:3 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/BC6L6PDNAASV4H5TU3VVBPH432:/var/lib/docker/overlay2/l/DTXH3AF3FA6Q6ZDLT7ZG2EDDEW,upperdir=/var/lib/docker/overlay2/9e28aa3ab5a0b4572df82b073ace900829cd09a08b339cf6fd7311f3a6e43858/diff,workdir=/var/lib/docker/overlay2/9e28aa3ab5a0b4572df82b073ace900829cd09a08b339cf6fd7311f3a6e43858/work
137 136 0:80 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
138 136 0:81 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
139 138 0:82 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5,mode=620,ptmxmode=666
140 136 0:83 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
141 138 0:54 / /dev/mqueue rw,nosuid,nodev,noexec,relatime - mqueue mqueue rw
142 138 0:84 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k
144 136 0:85 / /run rw,nosuid,nodev,relatime - tmpfs tmpfs rw,mode=755
145 136 254:0 /var/lib/docker/containers/de791cc9b019bbfd7d86d355ce17f7717535709485bced7339f60b1345cdae4b/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
146 136 254:0 /var/lib/docker/containers/de791cc9b019bbfd7d86d355ce17f7717535709485bced7339f60b1345cdae4b/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
147 136 254:0 /var/lib/docker/containers/de791cc9b019bbfd7d86d355ce17f7717535709485bced7339f60b1345cdae4b/hosts /etc/hosts rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534
148 144 0:86 / /run/lock rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw
149 140 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,size=4096k,nr_inodes=1024,mode=755
150 149 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
151 149 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
152 149 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
153 149 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
154 149 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
155 149 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
156 149 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
157 149 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
158 149 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
159 149 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
63 137 0:80 /bus /proc/bus ro,nosuid,nodev,noexec,relatime - proc proc rw
64 137 0:80 /fs /proc/fs ro,nosuid,nodev,noexec,relatime - proc proc rw
65 137 0:80 /irq /proc/irq ro,nosuid,nodev,noexec,relatime - proc proc rw
66 137 0:80 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
67 137 0:87 / /proc/acpi ro,relatime - tmpfs tmpfs ro
68 137 0:81 /null /proc/keys rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
69 137 0:81 /null /proc/timer_list rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
70 140 0:88 / /sys/firmware ro,relatime - tmpfs tmpfs ro
71 149 0:64 / /sys/fs/cgroup/perf_event rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,perf_event
72 149 0:67 / /sys/fs/cgroup/hugetlb rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,hugetlb
113 149 0:63 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,net_cls,net_prio
115 136 0:103 / /data rw,noatime - btrfs /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D00 rw,discard=async,space_cache=v2,subvolid=5,subvol=/

@@gpunode-fact-end 0@@

@@gpunode-fact mounts@@
overlay / overlay rw,relatime,lowerdir=/var/lib/docker/overlay2/l/BC6L6PDNAASV4H5TU3VVBPH432:/var/lib/docker/overlay2/l/DTXH3AF3FA6Q6ZDLT7ZG2EDDEW,upperdir=/var/lib/docker/overlay2/9e28aa3ab5a0b4572df82b073ace900829cd09a08b339cf6fd7311f3a6e43858/diff,workdir=/var/lib/docker/overlay2/9e28aa3ab5a0b4572df82b073ace900829cd09a08b339cf6fd7311f3a6e43858/work 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /dev tmpfs rw,nosuid,size=65536k,mode=755 0 0
devpts /dev/pts devpts rw,nosuid,noexec,relatime,gid=5,mode=620,ptmxmode=666 0 0
sysfs /sys sysfs ro,nosuid,nodev,noexec,relatime 0 0
mqueue /dev/mqueue mqueue rw,nosuid,nodev,noexec,relatime 0 0
shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0
tmpfs /run tmpfs rw,nosuid,nodev,relatime,mode=755 0 0
/dev/vda /etc/resolv.conf ext4 rw,relatime,discard,resv_strict,resuid=65534,resgid=65534 0 0
/dev/vda /etc/hostname ext4 rw,relatime,discard,resv_strict,resuid=65534,resgid=65534 0 0
/dev/vda /etc/hosts ext4 rw,relatime,discard,resv_strict,resuid=65534,resgid=65534 0 0
tmpfs /run/lock tmpfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,size=4096k,nr_inodes=1024,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/devices cgroup rw,relatime,devices 0 0
cgroup /sys/fs/cgroup/freezer cgroup rw,relatime,freezer 0 0
cgroup /sys/fs/cgroup/blkio cgroup rw,relatime,blkio 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
proc /proc/bus proc ro,nosuid,nodev,noexec,relatime 0 0
proc /proc/fs proc ro,nosuid,nodev,noexec,relatime 0 0
proc /proc/irq proc ro,nosuid,nodev,noexec,relatime 0 0
proc /proc/sys proc ro,nosuid,nodev,noexec,relatime 0 0
tmpfs /proc/acpi tmpfs ro,relatime 0 0
tmpfs /proc/keys tmpfs rw,nosuid,size=65536k,mode=755 0 0
tmpfs /proc/timer_list tmpfs rw,nosuid,size=65536k,mode=755 0 0
tmpfs /sys/firmware tmpfs ro,relatime 0 0
cgroup /sys/fs/cgroup/perf_event cgroup rw,nosuid,nodev,noexec,relatime,perf_event 0 0
cgroup /sys/fs/cgroup/hugetlb cgroup rw,nosuid,nodev,noexec,relatime,hugetlb 0 0
cgroup /sys/fs/cgroup/net_cls,net_prio cgroup rw,nosuid,nodev,noexec,relatime,net_cls,net_prio 0 0
/dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D00 /data btrfs rw,noatime,discard=async,space_cache=v2,subvolid=5,subvol=/ 0 0

@@gpunode-fact-end 0@@

@@gpunode-fact mount-sources@@
/dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D00	7	4	block special file

@@gpunode-fact-end 0@@

@@gpunode-fact swaps@@
Filename				Type		Size		Used		Priority

@@gpunode-fact-end 0@@

@@gpunode-fact swap-devices@@

@@gpunode-fact-end 0@@

@@gpunode-fact swap-files@@

@@gpunode-fact-end 0@@

@@gpunode-fact mdstat@@

@@gpunode-fact-end 1@@

@@gpunode-fact size /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D00@@
2147483648

@@gpunode-fact-end 0@@

@@gpunode-fact blkid /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D00@@
DEVNAME=/dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D00
LABEL=data
UUID=931f793b-35f6-43b4-a42e-1a1063bfeb96
UUID_SUB=24550e94-dc4f-4ca6-873f-6afb074db48a
BLOCK_SIZE=4096
TYPE=btrfs
USAGE=filesystem

@@gpunode-fact-end 0@@

@@gpunode-fact wipefs /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D00@@
{
   "signatures": [
      {
         "device": "nvme-LAB_NVMe_SSD_S1AEDN01D00",
         "offset": "0x10040",
         "type": "btrfs",
         "uuid": "931f793b-35f6-43b4-a42e-1a1063bfeb96",
         "label": "data"
      }
   ]
}

@@gpunode-fact-end 0@@

@@gpunode-fact mdadm /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D00@@

@@gpunode-fact-end missing@@

@@gpunode-fact size /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D01@@
2147483648

@@gpunode-fact-end 0@@

@@gpunode-fact blkid /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D01@@
DEVNAME=/dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D01
LABEL=data
UUID=931f793b-35f6-43b4-a42e-1a1063bfeb96
UUID_SUB=58e7a635-2564-44f1-b8a1-a5ba7b3d776d
BLOCK_SIZE=4096
TYPE=btrfs
USAGE=filesystem

@@gpunode-fact-end 0@@

@@gpunode-fact wipefs /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D01@@
{
   "signatures": [
      {
         "device": "nvme-LAB_NVMe_SSD_S1AEDN01D01",
         "offset": "0x10040",
         "type": "btrfs",
         "uuid": "931f793b-35f6-43b4-a42e-1a1063bfeb96",
         "label": "data"
      }
   ]
}

@@gpunode-fact-end 0@@

@@gpunode-fact mdadm /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D01@@

@@gpunode-fact-end missing@@

@@gpunode-fact size /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D02@@
335544320

@@gpunode-fact-end 0@@

@@gpunode-fact blkid /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D02@@
DEVNAME=/dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D02
LABEL=data
UUID=d2682ad5-4e76-465c-b0bc-dda6a3f28c0b
BLOCK_SIZE=512
TYPE=xfs
USAGE=filesystem

@@gpunode-fact-end 0@@

@@gpunode-fact wipefs /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D02@@
{
   "signatures": [
      {
         "device": "nvme-LAB_NVMe_SSD_S1AEDN01D02",
         "offset": "0x0",
         "type": "xfs",
         "uuid": "d2682ad5-4e76-465c-b0bc-dda6a3f28c0b",
         "label": "data"
      }
   ]
}

@@gpunode-fact-end 0@@

@@gpunode-fact mdadm /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D02@@

@@gpunode-fact-end missing@@

@@gpunode-fact size /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D03@@
335544320

@@gpunode-fact-end 0@@

@@gpunode-fact blkid /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D03@@

@@gpunode-fact-end 2@@

@@gpunode-fact wipefs /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D03@@
{
   "signatures": [

   ]
}

@@gpunode-fact-end 0@@

@@gpunode-fact mdadm /dev/disk/by-id/nvme-LAB_NVMe_SSD_S1AEDN01D03@@

@@gpunode-fact-end missing@@

@@gpunode-fact md-device@@

@@gpunode-fact-end missing@@

@@gpunode-fact mount-point-entries@@
0

@@gpunode-fact-end 0@@

@@gpunode-fact group@@
data:x:997:

@@gpunode-fact-end 0@@

@@gpunode-fact file /etc/gpunode/data-disks/data.json@@
ewogICJmaWxlc3lzdGVtIjogImJ0cmZzIiwKICAibGF5b3V0IjogImJ0cmZzLXJhaWQwIiwKICAibWRfdXVpZCI6IG51bGwsCiAgIm1vdW50X3BvaW50IjogIi9kYXRhIiwKICAic2VyaWFscyI6IFsKICAgICJTMUFFRE4wMUQwMCIsCiAgICAiUzFBRUROMDFEMDEiCiAgXSwKICAidXVpZCI6ICI5MzFmNzkzYi0zNWY2LTQzYjQtYTQyZS0xYTEwNjNiZmViOTYiCn0K
@@gpunode-fact-end 0@@

@@gpunode-fact file /etc/systemd/system/data.mount@@
IyBNYW5hZ2VkIGJ5IGdwdW5vZGUgKHJvbGUgZGF0YV9kaXNrcyk7IGNoYW5nZXMgYXJlIG92ZXJ3cml0dGVuLgpbVW5pdF0KRGVzY3JpcHRpb249Z3B1bm9kZSBkYXRhIGZpbGVzeXN0ZW0gYXQgL2RhdGEKQmVmb3JlPWRvY2tlci5zZXJ2aWNlIGNvbnRhaW5lcmQuc2VydmljZQoKW01vdW50XQpXaGF0PS9kZXYvZGlzay9ieS11dWlkLzkzMWY3OTNiLTM1ZjYtNDNiNC1hNDJlLTFhMTA2M2JmZWI5NgpXaGVyZT0vZGF0YQpUeXBlPWJ0cmZzCk9wdGlvbnM9bm9hdGltZSxub2ZhaWwseC1zeXN0ZW1kLmRldmljZS10aW1lb3V0PTMwcyxkZXZpY2U9L2Rldi9kaXNrL2J5LWlkL252bWUtTEFCX05WTWVfU1NEX1MxQUVETjAxRDAwLGRldmljZT0vZGV2L2Rpc2svYnktaWQvbnZtZS1MQUJfTlZNZV9TU0RfUzFBRUROMDFEMDEKCltJbnN0YWxsXQpXYW50ZWRCeT1sb2NhbC1mcy50YXJnZXQK
@@gpunode-fact-end 0@@

@@gpunode-fact file /usr/local/sbin/gpunode-data-ephemeral@@

@@gpunode-fact-end 1@@

@@gpunode-fact file /etc/systemd/system/gpunode-data-ephemeral.service@@

@@gpunode-fact-end 1@@

@@gpunode-fact file /etc/systemd/system/gpunode-data-tree.service@@

@@gpunode-fact-end 1@@

@@gpunode-fact file /etc/systemd/system/docker.service.d/gpunode-data-mount.conf@@
IyBNYW5hZ2VkIGJ5IGdwdW5vZGUgKHJvbGUgZGF0YV9kaXNrcyk7IGNoYW5nZXMgYXJlIG92ZXJ3cml0dGVuLgpbVW5pdF0KUmVxdWlyZXNNb3VudHNGb3I9L2RhdGEK
@@gpunode-fact-end 0@@

@@gpunode-fact file /etc/systemd/system/containerd.service.d/gpunode-data-mount.conf@@
IyBNYW5hZ2VkIGJ5IGdwdW5vZGUgKHJvbGUgZGF0YV9kaXNrcyk7IGNoYW5nZXMgYXJlIG92ZXJ3cml0dGVuLgpbVW5pdF0KUmVxdWlyZXNNb3VudHNGb3I9L2RhdGEK
@@gpunode-fact-end 0@@

@@gpunode-fact file /etc/mdadm/mdadm.conf@@

@@gpunode-fact-end 1@@

@@gpunode-fact file /etc/mdadm.conf@@

@@gpunode-fact-end 1@@

@@gpunode-fact file /etc/systemd/system/dev-disk-by\x2duuid-931f793b\x2d35f6\x2d43b4\x2da42e\x2d1a1063bfeb96.device.d/gpunode-data-mount.conf@@
IyBNYW5hZ2VkIGJ5IGdwdW5vZGUgKHJvbGUgZGF0YV9kaXNrcyk7IGNoYW5nZXMgYXJlIG92ZXJ3cml0dGVuLgpbVW5pdF0KSm9iUnVubmluZ1RpbWVvdXRTZWM9MzBzCg==
@@gpunode-fact-end 0@@

@@gpunode-fact dir /data/datasets@@
2775 root data

@@gpunode-fact-end 0@@

@@gpunode-fact dir /data/checkpoints@@
2775 root data

@@gpunode-fact-end 0@@

@@gpunode-fact dir /data/scratch@@
3777 root data

@@gpunode-fact-end 0@@

@@gpunode-fact dir /data/containers@@
711 root root

@@gpunode-fact-end 0@@

@@gpunode-fact enabled data.mount@@
enabled

@@gpunode-fact-end 0@@

@@gpunode-fact enabled gpunode-data-ephemeral.service@@

@@gpunode-fact-end 1@@

@@gpunode-fact enabled gpunode-data-tree.service@@

@@gpunode-fact-end 1@@
"""


def test_script_is_valid_sh_and_read_only(tmp_path):
    script = gather_script(SPEC)
    path = tmp_path / "probe.sh"
    path.write_text(script)
    subprocess.run(["sh", "-n", str(path)], check=True)
    # Only probes: no command that writes a disk, a file or a unit, no redirection to a file.
    writer = re.compile(
        r"(^|[;&|(]\s*|then\s+|do\s+)"
        r"(mkfs\S*|wipefs\s+-a|mdadm\s+--(create|assemble)|mount|umount|dd|rm|mv|tee"
        r"|systemctl\s+(enable|start|stop|daemon-reload))\b"
    )
    redirect = re.compile(r"(?<![0-9&])>(?!\s*/dev/null)|[0-9]>(?!\s*(/dev/null|&1))")
    for raw in script.splitlines():
        line = re.sub(r"'[^']*'", "''", raw).strip()  # quoted awk/printf text is not shell
        assert not writer.search(line), raw
        assert not redirect.search(line), raw


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_recorded_node_is_recognised_as_done(newline):
    facts = node_facts(parse_sections(RECORDED.replace("\n", newline)), SPEC)
    assert {f"{a}:{b}" for a, b in facts.devices} >= {"7:4", "7:5"}
    assert not facts.md_available and facts.group_exists
    data = [m for m in facts.mounts if m.target == "/data"]
    assert data and data[0].fstype == "btrfs" and data[0].devnum in {(7, 4), (7, 5)}
    assert "data.mount" in facts.enabled_units
    result = plan(SPEC, facts, "0b6d1a54-7c1f-4d3e-9a55-2d5ad9c3e111")
    assert result.done, result.describe()
    assert result.existing
    assert {d.state.split(",")[0] for d in result.disks} == {"data filesystem (btrfs"}


def test_recorded_node_refuses_a_foreign_spec_on_the_same_disks():
    foreign = DataDisksSpec.model_validate(
        {"disks": [{"serial": "S1AEDN01D00"}], "layout": "single", "mount_point": "/scratch"}
    )
    facts = node_facts(parse_sections(RECORDED), foreign)
    result = plan(foreign, facts, "0b6d1a54-7c1f-4d3e-9a55-2d5ad9c3e111")
    joined = "\n".join(result.reasons)
    assert "S1AEDN01D00: carries btrfs signature" in joined
    assert "S1AEDN01D00: is mounted" in joined


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "printed no sections"),
        ("sh: 1: lsblk: not found", "printed no sections"),
        ("@@gpunode-fact by-id@@\n\n@@gpunode-fact-end 0@@\n", "no 'lsblk' section"),
    ],
)
def test_broken_probe_output_is_an_error(text, message):
    with pytest.raises(RemoteError, match=message):
        node_facts(parse_sections(text), SPEC)
