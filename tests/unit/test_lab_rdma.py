"""The lab's side of the host-to-container contract: each node with RDMA NICs carries their
/dev/infiniband devices with the real numbers, created at boot by gpunode-lab-rdma, and the
`no-rdma-passthrough` fault takes them out of the containers the node's runtime starts."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from toolkit.lab import lab, nodes
from toolkit.lab.faults import FAULTS
from toolkit.lab.hardware import NodeHardware, rdma_device_files
from toolkit.lab.package_spec import render
from toolkit.lab.spec import build_spec
from toolkit.lab.state import NodeState

SCRIPT = resources.files("toolkit.lab").joinpath("node_files").joinpath("gpunode_lab_rdma.py")


def _files(faults: tuple[str, ...]) -> dict[str, nodes.NodeFile]:
    spec = build_spec(name="t", nodes=1, faults=tuple((1, f) for f in faults))
    hw = NodeHardware.for_node("H100", 8, True, faults, seed="t", index=1)
    return lab._fault_files(spec, NodeState(index=1, name="t-node-1", ip="10.0.0.2"), hw)


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpunode_lab_rdma", str(SCRIPT))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_nic_has_its_verbs_device_and_the_host_one_rdma_cm() -> None:
    hw = NodeHardware.for_node("H100", 8, True, seed="t", index=1)
    devices = rdma_device_files(hw)
    assert len(hw.nics) == 4
    assert devices == {
        "uverbs0": (231, 192),
        "uverbs1": (231, 193),
        "uverbs2": (231, 194),
        "uverbs3": (231, 195),
        "rdma_cm": (10, 58),
    }
    text = _files(()).get(nodes.RDMA_DEVICES_FILE)
    assert text is not None
    assert text.content.decode().splitlines() == [
        f"{name} {major} {minor}" for name, (major, minor) in devices.items()
    ]
    # Run at every boot, after the udev stand-in (a node's /dev starts empty).
    drop_in = _files(())[nodes.RDMA_DROP_IN].content.decode()
    assert f"ExecStartPost={nodes.RDMA_SCRIPT} devices" in drop_in


def test_the_fault_is_known_and_switches_the_strip_on() -> None:
    assert "no-rdma-passthrough" in FAULTS and "harness" in FAULTS["no-rdma-passthrough"]
    assert _files(())[nodes.RDMA_PASSTHROUGH_FILE].content == b""
    assert _files(("no-rdma-passthrough",))[nodes.RDMA_PASSTHROUGH_FILE].content == b"strip\n"
    # The node keeps its devices: only the containers lose them.
    assert _files(("no-rdma-passthrough",))[nodes.RDMA_DEVICES_FILE].content


def test_strip_removes_the_devices_from_the_container_runc_prepared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script()
    switch = tmp_path / "rdma-passthrough"
    monkeypatch.setattr(script, "PASSTHROUGH_FILE", str(switch))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(script.subprocess, "run", run)
    state = json.dumps({"pid": 77, "bundle": str(bundle), "id": "inner7"})
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(state))
    assert script.strip() == 0 and calls == []  # no fault: nothing removed
    switch.write_text("strip\n")
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(state))
    assert script.strip() == 0
    assert calls == [
        ["nsenter", "-t", "77", "-m", "--", "rm", "-rf", f"{bundle}/rootfs/dev/infiniband"]
    ]


def test_the_runtime_hook_hands_the_container_state_to_the_strip(tmp_path: Path) -> None:
    hook = tmp_path / "usr/bin/nvidia-container-runtime-hook"
    hook.parent.mkdir(parents=True)
    hook.write_text(render("nvidia-container-runtime-hook.sh.j2", version="1.16.2", commit="x"))
    hook.chmod(0o755)
    seen = tmp_path / "seen"
    strip = tmp_path / "usr/local/sbin/gpunode-lab-rdma"
    strip.parent.mkdir(parents=True)
    strip.write_text(f'#!/bin/sh\necho "$1" >"{seen}"\ncat >>"{seen}"\n')
    strip.chmod(0o755)
    state = json.dumps({"ociVersion": "1.0.2", "id": "inner7", "pid": 77, "bundle": "/b"})
    done = subprocess.run(
        [str(hook), "prestart"],
        input=state,
        text=True,
        capture_output=True,
        env={"GPUNODE_LAB_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert seen.read_text() == f"strip\n{state}\n"
