"""The files the layout writes: systemd names, units, drop-ins and the ephemeral script."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from toolkit.disks import units
from toolkit.disks.planner import Action

UUID = "0b6d1a54-7c1f-4d3e-9a55-2d5ad9c3e111"


@pytest.mark.parametrize(
    ("path", "escaped"),
    [
        # Expected values: `systemd-escape --path PATH` (systemd 252, Debian 12), recorded.
        ("/data", "data"),
        ("/mnt/fast-data", "mnt-fast\\x2ddata"),
        ("/mnt/a.b", "mnt-a.b"),
        ("/srv/.hidden", "srv-.hidden"),  # only a leading dot of the whole name is escaped
        ("/.data", "\\x2edata"),
        ("/mnt/a b", "mnt-a\\x20b"),
        ("/data/", "data"),
        ("/", "-"),
        (f"/dev/disk/by-uuid/{UUID}", "dev-disk-by\\x2duuid-" + UUID.replace("-", "\\x2d")),
        ("/mnt/data_1:x", "mnt-data_1:x"),
        ("/mnt/ü", "mnt-\\xc3\\xbc"),
    ],
)
def test_escape_path(path, escaped):
    assert units.escape_path(path) == escaped


@pytest.mark.skipif(shutil.which("systemd-escape") is None, reason="systemd-escape not installed")
@pytest.mark.parametrize("path", ["/data", "/mnt/fast-data", "/srv/.hidden", "/mnt/a b"])
def test_escape_path_agrees_with_systemd(path):
    out = subprocess.run(["systemd-escape", "--path", path], capture_output=True, text=True)
    assert units.escape_path(path) == out.stdout.strip()


def test_mount_unit_xfs():
    text = units.mount_unit("/data", UUID, "xfs", 45, ["/dev/disk/by-id/nvme-A"])
    assert text.startswith(units.HEADER)
    assert f"What=/dev/disk/by-uuid/{UUID}\n" in text
    assert "Where=/data\n" in text
    assert "Type=xfs\n" in text
    assert "Options=noatime,nofail,x-systemd.device-timeout=45s\n" in text
    assert "Before=docker.service containerd.service\n" in text
    assert "WantedBy=local-fs.target" in text
    assert "device=" not in text


def test_mount_unit_btrfs_names_every_member():
    text = units.mount_unit("/data", UUID, "btrfs", 30, ["/dev/disk/by-id/a", "/dev/disk/by-id/b"])
    assert "device=/dev/disk/by-id/a,device=/dev/disk/by-id/b\n" in text


def test_dropins_and_tree_unit():
    assert "RequiresMountsFor=/data\n" in units.runtime_dropin("/data")
    assert "JobRunningTimeoutSec=30s\n" in units.device_timeout_dropin(30)
    tree = units.tree_unit("/data", "data")
    assert "Requires=data.mount\nAfter=data.mount\n" in tree
    assert "ExecStart=/usr/bin/install -d -m 2775 -o root -g data /data/datasets\n" in tree
    assert "ExecStart=/usr/bin/install -d -m 711 -o root -g root /data/containers\n" in tree


def test_ephemeral_unit_orders_before_mount_and_runtimes():
    text = units.ephemeral_unit("/data", ["/dev/disk/by-id/nvme-A_S1"])
    assert "DefaultDependencies=no\n" in text
    assert "Before=data.mount docker.service containerd.service local-fs.target\n" in text
    assert "After=local-fs-pre.target dev-disk-by\\x2did-nvme\\x2dA_S1.device\n" in text


def test_ephemeral_script_is_valid_sh_and_guards_blankness(tmp_path):
    script = units.ephemeral_script(
        ["/dev/disk/by-id/a", "/dev/disk/by-id/b"],
        [("mkfs.btrfs", "-L", "data", "-U", UUID, "/dev/disk/by-id/a", "/dev/disk/by-id/b")],
        UUID,
        "udevadm settle",
    )
    path = tmp_path / "script"
    path.write_text(script)
    subprocess.run(["sh", "-n", str(path)], check=True)
    assert 'if [ "$blank" -eq 0 ]; then exit 0; fi' in script
    assert 'if [ "$blank" -ne "$total" ]' in script
    assert f"mkfs.btrfs -L data -U {UUID} /dev/disk/by-id/a /dev/disk/by-id/b\n" in script
    # The mkfs line comes after both guards.
    assert script.index("mkfs.btrfs") > script.index('"$blank" -ne "$total"')


def test_write_file_action_round_trips_through_sh(tmp_path):
    target = tmp_path / "sub dir" / "unit's file"
    content = "[Unit]\nRequiresMountsFor=/data\n# odd chars: $HOME `x` 'q' \\ \n"
    action = Action("write-file", "Write it", path=str(target), content=content, mode="0640")
    subprocess.run(["sh", "-c", action.shell()], check=True)
    assert target.read_text() == content
    assert oct(target.stat().st_mode & 0o777) == "0o640"
    assert not (tmp_path / "sub dir" / "unit's file.gpunode-tmp").exists()


def test_record_path_per_mount_point():
    assert units.record_path("/data") == "/etc/gpunode/data-disks/data.json"
    assert units.record_path("/mnt/x-y") == "/etc/gpunode/data-disks/mnt-x\\x2dy.json"
