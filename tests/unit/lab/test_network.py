"""Lab network addresses and SSH known_hosts lines."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from toolkit.lab.network import (
    LAB_SUPERNET,
    candidate_subnets,
    host_address,
    network_name,
    node_address,
)
from toolkit.lab.ssh import known_hosts_line, ssh_options, write_known_hosts


def test_candidates_are_every_24_of_the_supernet_once() -> None:
    subnets = candidate_subnets("gpunode")
    assert len(subnets) == 256
    assert len(set(subnets)) == 256
    assert all(s.subnet_of(LAB_SUPERNET) and s.prefixlen == 24 for s in subnets)


def test_first_candidate_depends_on_the_name_and_is_stable() -> None:
    assert candidate_subnets("gpunode")[0] == candidate_subnets("gpunode")[0]
    firsts = {candidate_subnets(name)[0] for name in ("a", "b", "c", "d", "e", "f")}
    assert len(firsts) > 1


def test_fixed_addresses() -> None:
    subnet = "10.213.7.0/24"
    assert host_address(subnet, 2) == "10.213.7.2"
    assert node_address(subnet, 1) == "10.213.7.11"
    assert node_address(subnet, 16) == "10.213.7.26"
    assert ipaddress.ip_address(node_address(subnet, 16)) in ipaddress.ip_network(subnet)
    assert network_name("gpunode") == "gpunode-net"


def test_known_hosts_line_drops_the_comment() -> None:
    line = known_hosts_line(["10.0.0.11", "n1"], "ssh-ed25519 AAAAC3Nza root@n1\n")
    assert line == "10.0.0.11,n1 ssh-ed25519 AAAAC3Nza"


def test_write_known_hosts(tmp_path: Path) -> None:
    path = write_known_hosts(
        tmp_path / "known_hosts",
        [(["10.0.0.11", "n1"], "ssh-ed25519 AAAA1 c"), (["10.0.0.12", "n2"], "ssh-ed25519 B c")],
    )
    assert path.read_text().splitlines() == [
        "10.0.0.11,n1 ssh-ed25519 AAAA1",
        "10.0.0.12,n2 ssh-ed25519 B",
    ]


def test_ssh_options_are_strict_and_batch_only_for_commands(tmp_path: Path) -> None:
    options = ssh_options(tmp_path / "kh")
    assert set(options[::2]) == {"-o"}
    pairs = options[1::2]
    assert f"UserKnownHostsFile={tmp_path / 'kh'}" in pairs
    assert "StrictHostKeyChecking=yes" in pairs
    assert "BatchMode=yes" in pairs
    assert "BatchMode=yes" not in ssh_options(tmp_path / "kh", batch=False)
