"""Pure parts of the lab's disks: losetup parsing, the node's disks file, kernel names."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.errors import LabError
from toolkit.lab.disks import (
    free_kernel_name,
    new_disk,
    parse_losetup_json,
    render_backing_file,
    render_disks_file,
)
from toolkit.lab.state import DiskState


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("   \n", {}),
        ('{"loopdevices": []}', {}),
        (
            '{"loopdevices": [{"name": "/dev/loop0", "back-file": "/x/a.img"},'
            ' {"name": "/dev/loop3", "back-file": "/x/b.img (deleted)"}]}',
            {"/dev/loop0": "/x/a.img", "/dev/loop3": "/x/b.img (deleted)"},
        ),
        # A loop device set up without a file (losetup prints null).
        ('{"loopdevices": [{"name": "/dev/loop1", "back-file": null}]}', {"/dev/loop1": ""}),
    ],
)
def test_parse_losetup_json(text: str, expected: dict[str, str]) -> None:
    assert parse_losetup_json(text) == expected


@pytest.mark.parametrize("text", ["not json", '{"devices": []}', '{"loopdevices": [{}]}'])
def test_parse_losetup_json_rejects_other_output(text: str) -> None:
    with pytest.raises(LabError, match="losetup"):
        parse_losetup_json(text)


def _disk(index: int, kernel: str, minor: int | None) -> DiskState:
    disk = new_disk("gpunode", Path("/lab"), 1, index, 1024**3, kernel)
    if minor is not None:
        disk.major, disk.minor, disk.loop = 7, minor, f"/dev/loop{minor}"
    return disk


def test_new_disk_names_image_serial_and_by_id() -> None:
    disk = new_disk("gpunode", Path("/lab"), 2, 1, 1024**3, "nvme1n1")
    assert disk.image == Path("/lab/disks/node-2-disk-1.img")
    assert disk.serial.endswith("N02D01")
    assert disk.by_id == f"nvme-LAB_NVMe_SSD_{disk.serial}"
    assert disk.loop is None and disk.major is None


def test_disks_file_lists_attached_disks_by_kernel_name() -> None:
    disks = [_disk(1, "nvme1n1", 5), _disk(0, "nvme0n1", 4), _disk(2, "nvme2n1", None)]
    lines = render_disks_file(disks).splitlines()
    assert lines[0].startswith("#")
    assert lines[1].split()[:3] == ["nvme0n1", "7", "4"]
    assert lines[2].split()[:3] == ["nvme1n1", "7", "5"]
    assert lines[1].split()[3] == "LAB_NVMe_SSD"
    assert lines[1].split()[4].endswith("N01D00")
    assert len(lines) == 3  # the detached disk is not visible in the node


def test_disks_file_after_a_swap_keeps_serials_with_their_devices() -> None:
    a, b = _disk(0, "nvme0n1", 4), _disk(1, "nvme1n1", 5)
    a.kernel_name, b.kernel_name = b.kernel_name, a.kernel_name
    rows = [line.split() for line in render_disks_file([a, b]).splitlines()[1:]]
    assert rows[0][0] == "nvme0n1" and rows[0][2] == "5" and rows[0][4].endswith("D01")
    assert rows[1][0] == "nvme1n1" and rows[1][2] == "4" and rows[1][4].endswith("D00")


@pytest.mark.parametrize(
    ("used", "expected"),
    [
        ([], "nvme0n1"),
        (["nvme0n1"], "nvme1n1"),
        (["nvme1n1"], "nvme0n1"),
        (["nvme0n1", "nvme1n1"], "nvme2n1"),
    ],
)
def test_free_kernel_name(used: list[str], expected: str) -> None:
    disks = [_disk(i, name, i) for i, name in enumerate(used)]
    assert free_kernel_name(disks) == expected


def test_backing_file_names_each_attached_disk_image() -> None:
    disks = [_disk(1, "nvme1n1", 5), _disk(0, "nvme0n1", 4), _disk(2, "nvme2n1", None)]
    assert render_backing_file(disks).splitlines() == [
        f"nvme0n1 {Path('/lab/disks/node-1-disk-0.img').resolve()}",
        f"nvme1n1 {Path('/lab/disks/node-1-disk-1.img').resolve()}",
    ]
