"""The lab's side of the host-to-container contract: each node with RDMA NICs carries their
/dev/infiniband devices with the real numbers (in the device list the boot unit makes,
toolkit/lab/devices.py), and the `no-rdma-passthrough` fault takes them out of the containers
the node's runtime starts."""

from __future__ import annotations

import importlib.util
import json
import os
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from toolkit.lab import devices, lab, nodes
from toolkit.lab.faults import FAULTS
from toolkit.lab.hardware import NodeHardware
from toolkit.lab.spec import build_spec
from toolkit.lab.state import NodeState

SCRIPT = resources.files("toolkit.lab").joinpath("node_files").joinpath("gpunode_lab_runc.py")


def _files(faults: tuple[str, ...]) -> dict[str, nodes.NodeFile]:
    spec = build_spec(name="t", nodes=1, faults=tuple((1, f) for f in faults))
    hw = NodeHardware.for_node("H100", 8, True, faults, seed="t", index=1)
    return lab._fault_files(spec, NodeState(index=1, name="t-node-1", ip="10.0.0.2"), hw)


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpunode_lab_runc", str(SCRIPT))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_nic_has_its_verbs_device_and_the_host_one_rdma_cm() -> None:
    hw = NodeHardware.for_node("H100", 8, True, seed="t", index=1)
    assert len(hw.nics) == 4
    assert devices.rdma_devices(hw) == [
        ("/dev/infiniband/uverbs0", 231, 192),
        ("/dev/infiniband/uverbs1", 231, 193),
        ("/dev/infiniband/uverbs2", 231, 194),
        ("/dev/infiniband/uverbs3", 231, 195),
        ("/dev/infiniband/rdma_cm", 10, 58),
    ]
    # In the one device list the boot unit makes (a node's /dev starts empty), after the GPUs'.
    listed = _files(())[devices.LIST_FILE].content.decode().splitlines()
    assert listed[-5:] == [
        f"{path} {major} {minor} 666" for path, major, minor in devices.rdma_devices(hw)
    ]
    assert listed[0] == "/dev/nvidia0 195 0 666"


def test_the_fault_is_known_and_switches_the_strip_on() -> None:
    assert "no-rdma-passthrough" in FAULTS and "harness" in FAULTS["no-rdma-passthrough"]
    assert _files(())[nodes.RDMA_PASSTHROUGH_FILE].content == b""
    assert _files(("no-rdma-passthrough",))[nodes.RDMA_PASSTHROUGH_FILE].content == b"strip\n"
    # The node keeps its devices: only the containers lose them.
    assert (
        "/dev/infiniband/rdma_cm"
        in _files(("no-rdma-passthrough",))[devices.LIST_FILE].content.decode()
    )


def test_the_wrapper_is_the_nodes_runc_with_or_without_the_fault() -> None:
    for faults in ((), ("no-rdma-passthrough",)):
        wrapper = _files(faults)[nodes.RUNC_WRAPPER]
        assert wrapper.mode == 0o755 and wrapper.content == SCRIPT.read_bytes()


def test_a_gpu_container_gets_the_nodes_nvidia_devices_as_the_hook_gives_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script()
    infos = {"nvidia0": (195, 0), "nvidia1": (195, 1), "nvidiactl": (195, 255), "null": (1, 3)}
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in infos:
        (dev / name).touch()

    class Stat:
        def __init__(self, name: str) -> None:
            self.st_mode = 0o020666
            self.st_rdev = script.os.makedev(*infos[name])

    # The wrapper's `os` is the one module: only the emulated /dev answers with device numbers,
    # every other path (pytest's own) is stat'ed for real.
    real_stat = os.stat
    monkeypatch.setattr(
        script.os,
        "stat",
        lambda path, *a, **k: (
            Stat(Path(path).name) if str(path).startswith(str(dev)) else real_stat(path, *a, **k)
        ),
    )
    hardware = tmp_path / "hardware.json"
    gpus = [{"index": i, "minor_number": i, "uuid": f"GPU-{i}aaa"} for i in (0, 1)]
    hardware.write_text(json.dumps({"gpus": gpus}))
    hook = {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook", "args": []}]}

    def edited(env: list[str], hooks: dict[str, Any] | None = hook) -> dict[str, Any]:
        spec: dict[str, Any] = {"process": {"env": env}, "linux": {"devices": []}}
        if hooks:
            spec["hooks"] = hooks
        (tmp_path / "config.json").write_text(json.dumps(spec))
        script.edit_spec(str(tmp_path), strip=False, dev=str(dev), hardware=str(hardware))
        return json.loads((tmp_path / "config.json").read_text())

    spec = edited(["NVIDIA_VISIBLE_DEVICES=all"])
    paths = [d["path"] for d in spec["linux"]["devices"]]
    assert paths == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]
    assert {
        (r["major"], r["minor"], r["access"]) for r in spec["linux"]["resources"]["devices"]
    } == {
        (195, 0, "rwm"),
        (195, 1, "rwm"),
        (195, 255, "rwm"),
    }
    one = edited(["NVIDIA_VISIBLE_DEVICES=1"])
    assert [d["path"] for d in one["linux"]["devices"]] == ["/dev/nvidia1", "/dev/nvidiactl"]
    # No hook (no --gpus), or no GPU asked for: nothing added.
    assert edited(["NVIDIA_VISIBLE_DEVICES=all"], hooks=None)["linux"]["devices"] == []
    assert edited(["NVIDIA_VISIBLE_DEVICES=void"])["linux"]["devices"] == []
    assert edited(["NVIDIA_VISIBLE_DEVICES=none"])["linux"]["devices"] == []
    # A GPU by its UUID (`--gpus device=GPU-...`) is the same GPU as by its index.
    by_uuid = edited(["NVIDIA_VISIBLE_DEVICES=GPU-1aaa"])
    assert [d["path"] for d in by_uuid["linux"]["devices"]] == ["/dev/nvidia1", "/dev/nvidiactl"]
    # A GPU the node lacks fails the start, as the hook does, and names it.
    for missing in ("2", "GPU-9zzz", "0,7"):
        with pytest.raises(script.UnknownDevice, match=missing.split(",")[-1]):
            edited([f"NVIDIA_VISIBLE_DEVICES={missing}"])


def test_the_wrapper_strips_the_rdma_devices_from_the_oci_spec(tmp_path: Path) -> None:
    script = _script()
    assert (
        script.bundle_of(["--root", "/r", "create", "--bundle", "/b", "--pid-file", "p", "c"])
        == "/b"
    )
    assert script.bundle_of(["create", "--bundle=/b", "c"]) == "/b"
    assert (
        script.bundle_of(["start", "c"]) is None and script.bundle_of(["state", "-b", "x"]) is None
    )
    devices = [
        {"path": "/dev/infiniband/uverbs0", "type": "c", "major": 231, "minor": 192},
        {"path": "/dev/infiniband/rdma_cm", "type": "c", "major": 10, "minor": 58},
        {"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229},
    ]
    (tmp_path / "config.json").write_text(json.dumps({"linux": {"devices": devices}, "x": 1}))
    script.edit_spec(str(tmp_path), strip=True, dev=str(tmp_path))
    spec = json.loads((tmp_path / "config.json").read_text())
    assert spec == {"linux": {"devices": devices[2:]}, "x": 1}


def test_the_wrapper_runs_the_real_runc_with_the_arguments_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script()
    real = tmp_path / "sbin" / "runc"
    real.parent.mkdir()
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    switch = tmp_path / "rdma-passthrough"
    switch.write_text("strip\n")
    monkeypatch.setattr(script, "PASSTHROUGH_FILE", str(switch))
    monkeypatch.setattr("sys.argv", [str(tmp_path / "local" / "runc")])
    monkeypatch.setenv("PATH", f"{tmp_path / 'local'}:{real.parent}")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    devices = [{"path": "/dev/infiniband/uverbs0", "type": "c", "major": 231, "minor": 192}]
    (bundle / "config.json").write_text(json.dumps({"linux": {"devices": devices}}))
    ran: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(script.os, "execv", lambda path, argv: ran.append((path, argv)))
    argv = ["create", "--bundle", str(bundle), "c1"]
    script.runc(argv)
    assert ran == [(str(real), [str(real), *argv])]
    assert json.loads((bundle / "config.json").read_text())["linux"]["devices"] == []
