"""The hardware.data_disks schema: sizes, layouts and every rule with the key it names."""

from __future__ import annotations

import pytest

from toolkit.config import validate
from toolkit.disks.spec import DataDisksSpec, parse_size
from toolkit.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("3.84TB", 3_840_000_000_000),
        ("16GiB", 16 * 1024**3),
        ("320MiB", 320 * 1024**2),
        ("1024", 1024),
        ("2 gb", 2_000_000_000),
        ("1.5TiB", int(1.5 * 1024**4)),
    ],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "lots", "3.84 XB", "-1GB", "1e9"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="is not a number with a unit"):
        parse_size(text)


@pytest.mark.parametrize(
    ("data", "layout", "filesystem"),
    [
        ({"disks": [{"serial": "A"}]}, "single", "xfs"),
        ({"disks": [{"serial": "A"}, {"serial": "B"}]}, "md-raid0", "xfs"),
        ({"disks": [{"serial": "A"}], "filesystem": "ext4"}, "single", "ext4"),
        (
            {"disks": [{"serial": "A"}, {"serial": "B"}], "layout": "btrfs-raid0"},
            "btrfs-raid0",
            "btrfs",
        ),
    ],
)
def test_effective_layout(data, layout, filesystem):
    spec = DataDisksSpec.model_validate(data)
    assert (spec.effective_layout, spec.effective_filesystem) == (layout, filesystem)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"disks": []}, "data_disks.disks: List should have at least 1 item"),
        ({"disks": [{"serial": "A"}, {"serial": "A"}]}, "serial listed more than once: A"),
        (
            {"disks": [{"serial": "A"}], "allow_wipe": ["B"]},
            "allow_wipe names serials that are not in disks: B",
        ),
        (
            {"disks": [{"serial": "A"}, {"serial": "B"}], "layout": "single"},
            "layout single takes exactly one disk",
        ),
        (
            {"disks": [{"serial": "A"}], "layout": "md-raid0"},
            "layout md-raid0 takes two or more disks",
        ),
        (
            {"disks": [{"serial": "A"}], "layout": "btrfs-raid0"},
            "layout btrfs-raid0 takes two or more",
        ),
        ({"disks": [{"serial": "A"}], "layout": "raid5"}, "data_disks.layout: Input should be"),
        (
            {"disks": [{"serial": "A"}], "mount_point": "/"},
            "mount_point / belongs to the operating system",
        ),
        (
            {"disks": [{"serial": "A"}], "mount_point": "/boot/efi"},
            "belongs to the operating system",
        ),
        (
            {"disks": [{"serial": "A"}], "mount_point": "/usr/local/data"},
            "belongs to the operating system",
        ),
        ({"disks": [{"serial": "A"}], "mount_point": "data"}, "absolute, normalised path"),
        ({"disks": [{"serial": "A"}], "mount_point": "/data/../etc"}, "absolute, normalised path"),
        ({"disks": [{"serial": "A"}], "mount_point": "/da ta"}, "may only contain"),
        ({"disks": [{"serial": "A", "size": "big"}]}, "data_disks.disks[0].size: size 'big'"),
        ({"disks": [{"serial": " A"}]}, "data_disks.disks[0].serial: a serial has no leading"),
        ({"disks": [{"serial": "A", "by_id": "/dev/disk/by-id/x"}]}, "by_id is a name under"),
        ({"disks": [{"serial": "A"}], "device_timeout_s": 0}, "device_timeout_s"),
        ({"disks": [{"serial": "A"}], "group": "Data Users"}, "group must be a system group name"),
        ({"disks": [{"serial": "A"}], "force": True}, "data_disks.force: unknown key"),
        ({"disks": [{"serial": "A", "serail": "B"}]}, "did you mean 'serial'"),
    ],
)
def test_rules_name_the_key(data, message):
    with pytest.raises(ConfigError) as info:
        validate(DataDisksSpec, data, "hardware.yml", prefix=("hardware", "data_disks"))
    assert message in info.value.message
    assert "hardware.data_disks" in info.value.message


def test_size_bytes():
    spec = DataDisksSpec.model_validate({"disks": [{"serial": "A", "size": "3.84TB"}]})
    assert spec.disks[0].size_bytes == 3_840_000_000_000
    assert DataDisksSpec.model_validate({"disks": [{"serial": "A"}]}).disks[0].size_bytes is None
