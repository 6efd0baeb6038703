"""Reading inventory directories: groups, variables, connection settings, patterns."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from shared_fixtures import REPO

from toolkit.errors import ConfigError
from toolkit.inventory import load_inventory

SAMPLE = REPO / "inventories" / "sample"

STACK = """\
stack:
  driver: {version: "580.95.05", flavour: open}
  cuda: "12.8.1"
  nccl: "2.26.2-1+cuda12.8"
  fabric_manager: auto
  container_toolkit: "1.17.8"
"""
HARDWARE = "hardware:\n  gpu: {model: H100, count: 8, nvswitch: true}\n"

HOSTS = """\
all:
  vars:
    site: inline-all
    level: inline-all
  hosts:
    loner: {ansible_host: 10.0.0.9}
  children:
    gpu:
      vars:
        level: inline-gpu
        only_inline: gpu
      children:
        h100:
          vars:
            level: inline-h100
          hosts:
            node[01:03]:
            node-special:
              ansible_host: 10.0.0.50
              ansible_port: 2222
              ansible_user: admin
              level: host-inline
        l40s:
          hosts:
            pcie-a: {ansible_host: 10.0.1.1}
            pcie-b: {ansible_host: 10.0.1.2}
    rack1:
      hosts:
        node01:
        pcie-a:
"""


def make_inventory(tmp_path: Path, files: dict[str, str], hosts: str = HOSTS) -> Path:
    root = tmp_path / "inv"
    root.mkdir()
    (root / "hosts.yml").write_text(hosts, encoding="utf-8")
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.fixture
def inventory_dir(tmp_path: Path) -> Path:
    return make_inventory(
        tmp_path,
        {
            "group_vars/all/connection.yml": (
                "ansible_user: ubuntu\n"
                "ansible_ssh_private_key_file: /keys/id\n"
                "ansible_ssh_common_args: '-o UserKnownHostsFile=/keys/known_hosts"
                " -o StrictHostKeyChecking=yes'\n"
                "level: group_vars-all\n"
            ),
            "group_vars/all/stack.yml": STACK,
            "group_vars/h100/stack.yml": STACK.replace("580.95.05", "580.82.07"),
            "group_vars/h100/hardware.yml": HARDWARE,
            "group_vars/l40s.yml": HARDWARE.replace("H100, count: 8, nvswitch: true",
                                                    "L40S, count: 4, nvswitch: false")
            + "level: group_vars-l40s\n",
            "host_vars/node02.yml": "level: host_vars-node02\n",
        },
    )  # fmt: skip


def test_groups_and_hierarchy(inventory_dir: Path) -> None:
    inventory = load_inventory(inventory_dir)
    assert set(inventory.groups) == {"all", "gpu", "h100", "l40s", "rack1", "ungrouped"}
    assert inventory.groups["h100"].parents == ("gpu",)
    assert inventory.groups["gpu"].children == ("h100", "l40s")
    assert inventory.groups["h100"].hosts == ("node01", "node02", "node03", "node-special")
    assert inventory.group_hosts("gpu") == [
        "node01", "node02", "node03", "node-special", "pcie-a", "pcie-b",
    ]  # fmt: skip
    assert inventory.groups["ungrouped"].hosts == ("loner",)
    assert inventory.host_groups("node01") == ["all", "gpu", "rack1", "h100"]


def test_variable_precedence_follows_ansible(inventory_dir: Path) -> None:
    inventory = load_inventory(inventory_dir)
    # group_vars/all (a file) beats every inline group var of hosts.yml.
    assert inventory.groups["h100"].vars["level"] == "group_vars-all"
    assert inventory.groups["l40s"].vars["level"] == "group_vars-l40s"
    assert inventory.groups["h100"].vars["only_inline"] == "gpu"  # from the parent
    assert inventory.hosts["node-special"].vars["level"] == "host-inline"
    assert inventory.hosts["node02"].vars["level"] == "host_vars-node02"
    assert inventory.hosts["node01"].vars["site"] == "inline-all"


def test_a_vars_file_beside_a_vars_folder_is_not_read_as_ansible_does_not(
    inventory_dir: Path,
) -> None:
    """ansible-core reads the first of host_vars/<host> (a folder), <host>.yml, .yaml, .json
    that exists (DataLoader.find_vars_files): a node01.yml beside node01/ is ignored by
    Ansible, so it must not count here either; hidden files in the folder are skipped."""
    folder = inventory_dir / "host_vars" / "node01"
    folder.mkdir()
    (folder / "b.yml").write_text("level: folder-b\n")
    (folder / "a.yml").write_text("level: folder-a\nonly_a: 1\n")
    (folder / ".hidden.yml").write_text("level: hidden\n")
    (inventory_dir / "host_vars" / "node01.yml").write_text("level: beside\nbeside: 1\n")
    host = load_inventory(inventory_dir).hosts["node01"]
    assert host.vars["level"] == "folder-b" and host.vars["only_a"] == 1
    assert "beside" not in host.vars


def test_child_stack_replaces_the_parent_stack(inventory_dir: Path) -> None:
    inventory = load_inventory(inventory_dir)
    stack, hardware = inventory.group_config("h100")
    assert stack.driver.version == "580.82.07"
    assert hardware.gpu.count == 8
    stack, hardware = inventory.group_config("l40s")
    assert stack.driver.version == "580.95.05"  # from group_vars/all
    assert hardware.gpu.model == "L40S"
    stack, hardware = inventory.host_config("pcie-a")
    assert hardware.gpu.model == "L40S"


def test_stack_groups_are_those_with_hosts_and_a_stack(inventory_dir: Path) -> None:
    inventory = load_inventory(inventory_dir)
    # `all`'s stack reaches every group; rack1 and ungrouped have hosts too.
    assert inventory.stack_groups() == ["h100", "l40s", "rack1", "ungrouped"]
    with pytest.raises(ConfigError) as info:
        inventory.group_config("rack1")
    assert "group 'rack1' has no hardware" in info.value.message


def test_connection_settings(inventory_dir: Path) -> None:
    inventory = load_inventory(inventory_dir)
    special = inventory.hosts["node-special"]
    assert (special.address, special.port, special.user) == ("10.0.0.50", 2222, "admin")
    node = inventory.hosts["node01"]
    assert (node.address, node.port, node.user) == ("node01", 22, "ubuntu")
    assert node.private_key_file == Path("/keys/id")
    assert node.known_hosts_file == Path("/keys/known_hosts")
    assert inventory.hosts["pcie-b"].address == "10.0.1.2"


def test_sample_inventory() -> None:
    inventory = load_inventory(SAMPLE)
    assert inventory.stack_groups() == ["h100_sxm", "l40s_pcie"]
    h100 = inventory.hosts["h100-01"]
    assert h100.address == "192.0.2.11"
    assert h100.user == "ubuntu"
    assert h100.known_hosts_file == Path("~/.ssh/gpunode_known_hosts").expanduser()
    stack, hardware = inventory.group_config("h100_sxm")
    assert hardware.gpu.nvswitch is True and hardware.gpu.count == 8
    assert hardware.data_disks is not None and len(hardware.data_disks.disks) == 8
    assert stack.fabric_manager == "auto"
    stack, hardware = inventory.group_config("l40s_pcie")
    assert hardware.gpu.info.model == "L40S"
    assert inventory.groups["h100_sxm"].vars["gpunode_nvidia_repo_url"].startswith("https://")


# (pattern, expected hosts in inventory order)
PATTERNS = [
    (None, ["loner", "node01", "node02", "node03", "node-special", "pcie-a", "pcie-b"]),
    ("all", ["loner", "node01", "node02", "node03", "node-special", "pcie-a", "pcie-b"]),
    ("node02", ["node02"]),
    ("l40s", ["pcie-a", "pcie-b"]),
    ("gpu", ["node01", "node02", "node03", "node-special", "pcie-a", "pcie-b"]),
    ("node01,pcie-b", ["node01", "pcie-b"]),
    ("node01:pcie-b", ["node01", "pcie-b"]),
    ("gpu,!h100", ["pcie-a", "pcie-b"]),
    ("gpu:!node0*", ["node-special", "pcie-a", "pcie-b"]),
    ("gpu,&rack1", ["node01", "pcie-a"]),
    ("!rack1", ["loner", "node02", "node03", "node-special", "pcie-b"]),
    ("node0[12]", ["node01", "node02"]),
    ("pcie-?", ["pcie-a", "pcie-b"]),
    ("~node0[23]", ["node02", "node03"]),
    ("h1*", ["node01", "node02", "node03", "node-special"]),
]


@pytest.mark.parametrize(("pattern", "expected"), PATTERNS)
def test_hosts_for(inventory_dir: Path, pattern: str | None, expected: list[str]) -> None:
    inventory = load_inventory(inventory_dir)
    assert [h.name for h in inventory.hosts_for(pattern)] == expected


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [("h10", "did you mean 'h100'"), ("gpu,!nodeX", "'nodeX' matches no host or group"),
     ("~[", "bad regular expression")],
)  # fmt: skip
def test_hosts_for_errors(inventory_dir: Path, pattern: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_inventory(inventory_dir).hosts_for(pattern)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ansible_ssh_common_args: '-o StrictHostKeyChecking=no'\n", "StrictHostKeyChecking=no"),
        ("ansible_ssh_common_args: '-oStrictHostKeyChecking=off'\n", "StrictHostKeyChecking=off"),
        ("ansible_ssh_extra_args: '-o \"StrictHostKeyChecking no\"'\n", "turns host key"),
        ("ansible_ssh_common_args: '-o UserKnownHostsFile=/dev/null'\n", "/dev/null"),
        ("ansible_host_key_checking: false\n", "ansible_host_key_checking"),
        ("ansible_ssh_host_key_checking: 'False'\n", "ansible_ssh_host_key_checking"),
        # Issue 27: Ansible reads these as false (convert_bool.boolean, strict=False).
        *(
            (f"ansible_host_key_checking: {v}\n", "which Ansible reads as false")
            for v in ("n", "f", "N", "F", "0.0", "'0.0'", "maybe", "''", "null")
        ),
        ("ansible_paramiko_host_key_checking: off\n", "ansible_paramiko_host_key_checking"),
        # ... and OpenSSH reads these as StrictHostKeyChecking off.
        ("ansible_ssh_common_args: '-4o StrictHostKeyChecking=no'\n", "=no turns host key"),
        (
            "ansible_ssh_common_args: \"-o 'StrictHostKeyChecking\\taccept-new'\"\n",
            "=accept-new turns host key",
        ),
        ("ansible_ssh_common_args: '-vo StrictHostKeyChecking=false'\n", "=false turns"),
        ("ansible_ssh_common_args: '-o stricthostkeychecking=\"no\"'\n", "=no turns"),
        ("ansible_ssh_common_args: '-o StrictHostKeyChecking'\n", "= turns host key"),
        ("ansible_ssh_args: '-C -o ControlMaster=auto -oStrictHostKeyChecking=off'\n", "=off"),
        ("ansible_ssh_extra_args: '-p 22 -o StrictHostKeyChecking=no'\n", "=no turns"),
        ("ansible_scp_extra_args: '-o StrictHostKeyChecking=no'\n", "=no turns"),
        ("ansible_sftp_extra_args: '-o StrictHostKeyChecking=no'\n", "=no turns"),
        ("ansible_ssh_common_args: '-F /tmp/ssh_config'\n", "-F /tmp/ssh_config names"),
        ("ansible_ssh_common_args: '-4F/tmp/ssh_config'\n", "-F /tmp/ssh_config names"),
        ("ansible_port: 70000\n", "not a TCP port"),
        ('ansible_user: \'{{ lookup("env", "USER") }}\'\n', "templated values"),
    ],
)
def test_unsafe_or_bad_connection_settings_are_refused(
    tmp_path: Path, text: str, expected: str
) -> None:
    root = make_inventory(tmp_path, {"group_vars/l40s/ssh.yml": text})
    with pytest.raises(ConfigError) as info:
        load_inventory(root)
    assert expected in info.value.message
    assert "group_vars/l40s/ssh.yml" in info.value.message


@pytest.mark.parametrize(
    "text",
    [
        "ansible_host_key_checking: y\n",
        "ansible_host_key_checking: 'True'\n",
        "ansible_ssh_host_key_checking: 1\n",
        "ansible_ssh_common_args: '-p 2222 -4o StrictHostKeyChecking=ask'\n",
        "ansible_ssh_common_args: '-oStrictHostKeyChecking=yes -o UserKnownHostsFile=/k'\n",
        # -o's argument is a word of its own: the next word is not an option (ProxyCommand,
        # which runs a command here, is refused since issue 41: inventory/test_hostile.py)
        "ansible_ssh_common_args: '-o ServerAliveInterval=30 -l -F'\n",
    ],
)
def test_settings_that_keep_host_key_checking_on_are_read(tmp_path: Path, text: str) -> None:
    root = make_inventory(tmp_path, {"group_vars/l40s/ssh.yml": text})
    assert load_inventory(root).hosts_for(None)


def test_malformed_stack_names_group_vars_file_and_key(tmp_path: Path) -> None:
    root = make_inventory(
        tmp_path,
        {
            "group_vars/h100/stack.yml": STACK.replace("flavour: open", "flavor: open"),
            "group_vars/h100/hardware.yml": HARDWARE,
        },
    )
    inventory = load_inventory(root)
    with pytest.raises(ConfigError) as info:
        inventory.group_config("h100")
    message = info.value.message
    assert f"{root / 'group_vars/h100/stack.yml'}:2: stack.driver.flavor: unknown key" in message
    assert "did you mean 'flavour'" in message


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        ("all:\n  children:\n    g:\n      host:\n        a:\n",
         "all.children.g.host: unknown key in group 'g'; did you mean 'hosts'"),
        ("all:\n  children:\n    g:\n      hosts: [a, b]\n", "all.children.g.hosts: expected"),
        ("all: [x]\n", "a group must be a mapping"),
        ("- a\n", "expected a mapping of groups"),
        ("all:\n  children:\n    'bad name':\n", "not a valid group name"),
        ("all:\n  children:\n    a:\n      children:\n        b:\n          children:\n"
         "            a:\n", "group cycle"),
    ],
)  # fmt: skip
def test_malformed_hosts_file(tmp_path: Path, hosts: str, expected: str) -> None:
    root = make_inventory(tmp_path, {}, hosts=hosts)
    with pytest.raises(ConfigError) as info:
        load_inventory(root)
    assert expected in info.value.message
    assert "hosts.yml" in info.value.message


def test_bad_yaml_in_group_vars_names_the_file(tmp_path: Path) -> None:
    root = make_inventory(tmp_path, {"group_vars/h100/stack.yml": "stack: [oops\n"})
    with pytest.raises(ConfigError) as info:
        load_inventory(root)
    assert "group_vars/h100/stack.yml" in info.value.message
    assert "invalid YAML" in info.value.message


def test_not_an_inventory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no hosts\.yml"):
        load_inventory(tmp_path)


def test_host_ranges_keep_zero_padding_and_letters(tmp_path: Path) -> None:
    hosts = "all:\n  hosts:\n    gpu[08:10]:\n    rack-[a:c]:\n    n[0:6:3]:\n"
    inventory = load_inventory(make_inventory(tmp_path, {}, hosts=hosts))
    assert list(inventory.hosts) == [
        "gpu08", "gpu09", "gpu10", "rack-a", "rack-b", "rack-c", "n0", "n3", "n6",
    ]  # fmt: skip


def test_hosts_file_path_is_accepted(inventory_dir: Path) -> None:
    inventory = load_inventory(inventory_dir / "hosts.yml")
    assert inventory.path == inventory_dir
    assert "node01" in inventory.hosts


def test_unknown_group_and_host(inventory_dir: Path) -> None:
    inventory = load_inventory(inventory_dir)
    with pytest.raises(ConfigError, match="did you mean 'h100'"):
        inventory.group_config("h10")
    with pytest.raises(ConfigError, match="did you mean 'node01'"):
        inventory.host_config("node1")
