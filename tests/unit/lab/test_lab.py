"""Docker-free parts of the lab API: inventory defaults, CA bundles, node references."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.errors import ConfigError, LabError
from toolkit.lab import lab
from toolkit.lab.spec import build_spec
from toolkit.lab.state import LabState, NodeState, ServerState


def _state() -> LabState:
    return LabState(
        name="gpunode",
        spec=build_spec(nodes=2),
        image="gpunode-lab-node:x",
        network="gpunode-net",
        subnet="10.213.1.0/24",
        gateway="10.213.1.1",
        server=ServerState(name="gpunode-repo", ip="10.213.1.2"),
        nodes=[
            NodeState(index=1, name="gpunode-node-1", ip="10.213.1.11"),
            NodeState(index=2, name="gpunode-node-2", ip="10.213.1.12"),
        ],
    )


def test_default_inventory_dir() -> None:
    assert lab.default_inventory_dir("gpunode", Path("/w")) == Path("/w/inventories/lab")
    assert lab.default_inventory_dir("mine", Path("/w")) == Path("/w/inventories/lab-mine")


@pytest.mark.parametrize("ref", [2, "2", "gpunode-node-2", "node-2"])
def test_find_node_by_index_or_name(ref: str | int) -> None:
    assert lab.find_node(_state(), ref).ip == "10.213.1.12"


@pytest.mark.parametrize("ref", [0, "3", "node-3", "other-node-1"])
def test_find_node_names_the_known_nodes(ref: str | int) -> None:
    with pytest.raises(ConfigError, match="nodes: gpunode-node-1, gpunode-node-2"):
        lab.find_node(_state(), ref)


def test_check_ca_bundle(tmp_path: Path) -> None:
    good = tmp_path / "good.crt"
    good.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    assert lab.check_ca_bundle(good) == good.resolve()
    bad = tmp_path / "bad.crt"
    bad.write_text("hello\n")
    with pytest.raises(ConfigError, match="not a PEM file"):
        lab.check_ca_bundle(bad)
    with pytest.raises(ConfigError, match="cannot read it"):
        lab.check_ca_bundle(tmp_path / "missing.crt")


def test_state_round_trips_and_require_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUNODE_LAB_HOME", str(tmp_path))
    with pytest.raises(LabError, match="gpunode lab up --name gpunode"):
        lab.require("gpunode")
    lab.lab_state.save(_state())
    assert lab.require("gpunode") == _state()
    assert lab.list_labs() == ["gpunode"]
    (tmp_path / "gpunode" / "state.json").write_text("{broken")
    with pytest.raises(LabError, match="gpunode lab down --name gpunode"):
        lab.require("gpunode")


def test_ssh_argv_is_strict_and_uses_the_lab_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUNODE_LAB_HOME", str(tmp_path))
    lab.lab_state.save(_state())
    argv = lab.ssh_argv("gpunode", 2, ["hostname"])
    assert argv[0] == "ssh" and argv[-2:] == ["root@10.213.1.12", "hostname"]
    assert argv[argv.index("-i") + 1] == str(tmp_path / "gpunode" / "id_ed25519")
    assert "StrictHostKeyChecking=yes" in argv
    assert f"UserKnownHostsFile={tmp_path / 'gpunode' / 'known_hosts'}" in argv
    assert "BatchMode=yes" in argv
    assert "BatchMode=yes" not in lab.ssh_argv("gpunode", 2)
