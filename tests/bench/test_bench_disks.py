"""Benchmark: parsing a big node's disk probe and planning it (prints figures; asserts sanity).

A DGX-class node: 8 data NVMe disks plus a mirrored system pair, 300 mounts (containers,
overlays), all of it read from one probe output as on a real node.
"""

from __future__ import annotations

import base64
import json
import time

from toolkit.disks.gather import node_facts, parse_sections
from toolkit.disks.planner import plan
from toolkit.disks.spec import DataDisksSpec

DATA = 8
SIZE = 3_840_755_982_336


def sec(name: str, body: str, rc: int | str = 0, arg: str = "") -> str:
    head = f"{name} {arg}".strip()
    return f"\n@@gpunode-fact {head}@@\n{body}\n@@gpunode-fact-end {rc}@@\n"


def big_node() -> tuple[DataDisksSpec, str]:
    serials = [f"S64HNE0R{i:06d}" for i in range(DATA)]
    by_id = "".join(
        f"/dev/disk/by-id/nvme-SAMSUNG_MZQL23T8HCLS-00A07_{s}\t103\t{i}\tblock special file\n"
        for i, s in enumerate(serials)
    )
    blocks = [
        {
            "name": f"nvme{i}n1",
            "maj:min": f"259:{i}",
            "type": "disk",
            "size": SIZE,
            "model": "SAMSUNG MZQL23T8HCLS-00A07",
            "serial": s,
            "mountpoints": [None],
        }
        for i, s in enumerate(serials)
    ]
    for k in (8, 9):  # the system disks, a mirror with / on it
        blocks.append(
            {
                "name": f"nvme{k}n1",
                "maj:min": f"259:{k * 10}",
                "type": "disk",
                "size": 1_920_383_410_176,
                "children": [
                    {
                        "name": "md0",
                        "maj:min": "9:0",
                        "type": "raid1",
                        "size": 1_900_000_000_000,
                        "mountpoints": ["/"],
                    }
                ],
            }
        )
    mountinfo = "1 0 9:0 / / rw - ext4 /dev/md0 rw\n" + "".join(
        f"{i + 10} 1 0:{i + 40} / /var/lib/docker/overlay2/{i:04x}/merged rw - overlay overlay rw\n"
        for i in range(300)
    )
    out = sec("by-id", by_id)
    out += sec("lsblk", json.dumps({"blockdevices": blocks}))
    out += sec("mountinfo", mountinfo)
    out += sec("mounts", "")
    out += sec("mount-sources", "/dev/md0\t9\t0\tblock special file\n")
    out += sec("swaps", "Filename\tType\tSize\tUsed\tPriority\n")
    out += sec("swap-devices", "")
    out += sec("swap-files", "")
    out += sec("mdstat", "Personalities : [raid0] [raid1]\n")
    for s in serials:
        path = f"/dev/disk/by-id/nvme-SAMSUNG_MZQL23T8HCLS-00A07_{s}"
        out += sec("size", str(SIZE), arg=path)
        out += sec("blkid", "", 2, arg=path)
        out += sec("wipefs", '{"signatures": []}', arg=path)
        out += sec("mdadm", f"mdadm: No md superblock detected on {path}.", 1, arg=path)
    out += sec("md-device", "", "missing")
    out += sec("mount-point-entries", "0")
    out += sec("group", "", 2)
    out += sec("file", base64.b64encode(b"# mdadm.conf\n").decode(), arg="/etc/mdadm/mdadm.conf")
    spec = DataDisksSpec.model_validate(
        {
            "disks": [
                {"serial": s, "size": "3.84TB", "model": "SAMSUNG MZQL23T8HCLS-00A07"}
                for s in serials
            ]
        }
    )
    return spec, out


def test_bench_parse_and_plan_a_big_node():
    spec, output = big_node()
    rounds = 200
    start = time.perf_counter()
    for _ in range(rounds):
        facts = node_facts(parse_sections(output), spec)
        result = plan(spec, facts, "0b6d1a54-7c1f-4d3e-9a55-2d5ad9c3e111")
    elapsed = time.perf_counter() - start
    print(
        f"\nparse + plan of a node with {DATA} data disks, {len(facts.mounts)} mounts, "
        f"{len(output)} bytes of probe output: {elapsed / rounds * 1000:.2f} ms per node "
        f"({rounds} rounds)"
    )
    assert not result.refused, result.reasons
    assert result.layout == "md-raid0" and len(result.disks) == DATA
    assert result.actions[0].argv[:2] == ("mdadm", "--create")
