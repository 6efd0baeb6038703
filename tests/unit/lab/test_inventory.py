"""The inventory a lab writes: layout, connection settings, per-host data disks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from toolkit.errors import LabError
from toolkit.lab import inventory
from toolkit.lab.disks import new_disk
from toolkit.lab.spec import build_spec
from toolkit.lab.state import NodeState
from toolkit.profile.hardware import HardwareProfile
from toolkit.stack.models import Stack

REPO_VARS = {
    "gpunode_nvidia_repo_url": "http://10.213.1.2/compute/cuda/repos/debian12/x86_64/",
    "gpunode_nvidia_repo_key_url": "http://10.213.1.2/compute/cuda/repos/debian12/x86_64/k.pub",
    "gpunode_container_toolkit_repo_url": "http://10.213.1.2/libnvidia-container/stable/deb/amd64/",
    "gpunode_container_toolkit_repo_key_url": "http://10.213.1.2/libnvidia-container/gpgkey",
    "gpunode_pip_find_links": "http://10.213.1.2/wheels/",
}


def _nodes(count: int, disks: int) -> list[NodeState]:
    nodes = []
    for i in range(1, count + 1):
        node = NodeState(index=i, name=f"lab1-node-{i}", ip=f"10.213.1.{10 + i}")
        node.disks = [
            new_disk("lab1", Path("/lab"), i, d, 2 * 1024**3, f"nvme{d}n1") for d in range(disks)
        ]
        nodes.append(node)
    return nodes


def _render(disks: int = 2, md: bool = False, ca: Path | None = None) -> dict[str, object]:
    files = inventory.render(
        spec=build_spec(name="lab1", nodes=2, disks=disks),
        nodes=_nodes(2, disks),
        key_file=Path("/state/id_ed25519"),
        known_hosts=Path("/state/known_hosts"),
        repo_vars=REPO_VARS,
        ca_bundle=ca,
        md_available=md,
    )
    for text in files.values():
        assert text.startswith("---\n# Written by `gpunode lab up` for lab lab1")
    return {path: yaml.safe_load(text) for path, text in files.items()}


def test_layout_follows_the_architecture() -> None:
    files = _render()
    assert sorted(files) == [
        "group_vars/all/lab.yml",
        "group_vars/all/repos.yml",
        "group_vars/all/ssh.yml",
        "group_vars/lab/hardware.yml",
        "group_vars/lab/stack.yml",
        "host_vars/lab1-node-1/hardware.yml",
        "host_vars/lab1-node-2/hardware.yml",
        "hosts.yml",
    ]


def test_hosts_are_in_group_lab_with_their_addresses() -> None:
    hosts = _render()["hosts.yml"]
    assert hosts == {
        "all": {
            "children": {
                "lab": {
                    "hosts": {
                        "lab1-node-1": {"ansible_host": "10.213.1.11"},
                        "lab1-node-2": {"ansible_host": "10.213.1.12"},
                    }
                }
            }
        }
    }


def test_ssh_settings_keep_host_key_checking_on() -> None:
    ssh = _render()["group_vars/all/ssh.yml"]
    assert isinstance(ssh, dict)
    assert ssh["ansible_user"] == "debian"  # the cloud image's sudo user, not root
    assert ssh["ansible_ssh_private_key_file"] == "/state/id_ed25519"
    args = ssh["ansible_ssh_common_args"]
    assert "-o UserKnownHostsFile=/state/known_hosts" in args
    assert "-o StrictHostKeyChecking=yes" in args
    assert "StrictHostKeyChecking=no" not in args and "/dev/null" not in args
    assert ssh["ansible_python_interpreter"] == "/usr/bin/python3"


def test_repository_variables_and_ca_bundle() -> None:
    repos = _render(ca=Path("/etc/ssl/certs/ca-certificates.crt"))["group_vars/all/repos.yml"]
    assert isinstance(repos, dict)
    assert {k: repos[k] for k in REPO_VARS} == REPO_VARS
    assert repos["gpunode_ca_bundle"] == "/etc/ssl/certs/ca-certificates.crt"
    without = _render()["group_vars/all/repos.yml"]
    assert isinstance(without, dict) and "gpunode_ca_bundle" not in without


def test_lab_commands_read_the_nodes_own_journal_and_boot_id() -> None:
    lab = _render()["group_vars/all/lab.yml"]
    assert isinstance(lab, dict)
    assert "-t kernel" in lab["gpunode_kernel_log_command"]
    assert lab["gpunode_reboot_boot_time_command"] == "cat /run/gpunode-lab/boot_id"


def test_stack_and_hardware_validate_against_the_schemas() -> None:
    files = _render()
    stack = files["group_vars/lab/stack.yml"]
    assert isinstance(stack, dict)
    resolved = Stack.model_validate(stack["stack"])
    assert str(resolved.driver.version) == "550.127.05"
    group = files["group_vars/lab/hardware.yml"]
    assert isinstance(group, dict)
    assert HardwareProfile.model_validate(group["hardware"]).data_disks is None
    host = files["host_vars/lab1-node-2/hardware.yml"]
    assert isinstance(host, dict)
    profile = HardwareProfile.model_validate(host["hardware"])
    assert profile.gpu.count == 8 and profile.gpu.nvswitch is True
    assert profile.data_disks is not None
    serials = [d.serial for d in profile.data_disks.disks]
    assert len(serials) == 2 and all(s.endswith(("N02D00", "N02D01")) for s in serials)


@pytest.mark.parametrize(
    ("disks", "md", "layout"), [(2, True, "auto"), (2, False, "btrfs-raid0"), (1, False, "auto")]
)
def test_layout_fits_the_host_kernel(disks: int, md: bool, layout: str) -> None:
    host = _render(disks=disks, md=md)["host_vars/lab1-node-1/hardware.yml"]
    assert isinstance(host, dict)
    assert host["hardware"]["data_disks"]["layout"] == layout


def test_no_host_vars_without_disks() -> None:
    assert not any(path.startswith("host_vars") for path in _render(disks=0))


def test_write_replaces_own_inventory_and_refuses_foreign(tmp_path: Path) -> None:
    target = tmp_path / "inv"
    inventory.write(target, "lab1", {"hosts.yml": "---\n", "host_vars/old/hardware.yml": "---\n"})
    inventory.write(target, "lab1", {"hosts.yml": "---\n"})
    assert not (target / "host_vars" / "old").exists()
    assert inventory.owner_of(target) == "lab1"
    with pytest.raises(LabError, match="lab lab1's inventory"):
        inventory.write(target, "lab2", {"hosts.yml": "---\n"})
    assert inventory.remove(target, "lab2") is False and target.exists()
    assert inventory.remove(target, "lab1") is True and not target.exists()


def test_write_refuses_a_directory_gpunode_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "mine.yml").write_text("x: 1\n")
    with pytest.raises(LabError, match="files gpunode did not write"):
        inventory.write(tmp_path, "lab1", {"hosts.yml": "---\n"})
    assert (tmp_path / "mine.yml").exists()


def test_files_pass_the_projects_yamllint(repo_root: Path) -> None:
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    config = YamlLintConfig(file=str(repo_root / ".yamllint"))
    files = inventory.render(
        spec=build_spec(name="lab1", nodes=2),
        nodes=_nodes(2, 2),
        key_file=Path("/root/.cache/gpunode/lab/a-rather-long-lab-name/id_ed25519"),
        known_hosts=Path("/root/.cache/gpunode/lab/a-rather-long-lab-name/known_hosts"),
        repo_vars=REPO_VARS,
        ca_bundle=Path("/etc/ssl/certs/ca-certificates.crt"),
        md_available=False,
    )
    for path, text in files.items():
        problems = [f"{p.line}:{p.column} {p.message}" for p in linter.run(text, config)]
        assert problems == [], f"{path}: {problems}"


def test_the_lab_writes_its_own_floors_into_the_hardware_profile() -> None:
    """The lab's floors (toolkit/lab/acceptance.yml) are the inventory's, as a site writes its
    own: no product profile is named, and the floors in force are the lab's, sources kept."""
    from toolkit.acceptance.thresholds import effective
    from toolkit.lab.inventory import lab_profile
    from toolkit.profile.floors import shipped_profiles

    files = _render()
    for path in ("group_vars/lab/hardware.yml", "host_vars/lab1-node-2/hardware.yml"):
        data = files[path]
        assert isinstance(data, dict)
        profile = HardwareProfile.model_validate(data["hardware"])
        assert profile.acceptance is not None and profile.acceptance.profile is None
        in_force = effective(profile.acceptance)
        assert in_force == lab_profile().acceptance
        assert [f.min_busbw_gbps for f in in_force.allreduce] == [pytest.approx(0.047)]
        assert all(f.source for f in in_force.allreduce + in_force.multi_node_allreduce)
    assert "lab" not in shipped_profiles()
    assert lab_profile().sources
