"""The lab's `slow-data` fault: its node files, and the throttle script and OCI hook writing the
read limits into the right blkio cgroups (run for real under a relocated root,
``GPUNODE_LAB_ROOT``, as the lab's stand-ins are)."""

from __future__ import annotations

import json
import os
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from toolkit.lab import lab, nodes
from toolkit.lab.faults import FAULTS
from toolkit.lab.hardware import NodeHardware
from toolkit.lab.package_spec import render
from toolkit.lab.spec import SLOW_DATA_READ_BPS, SLOW_DATA_READ_IOPS, build_spec
from toolkit.lab.state import NodeState

SCRIPT = (
    resources.files("toolkit.lab").joinpath("node_files").joinpath("gpunode-lab-data-throttle.sh")
)
NODE_CG = "/docker/node1"
INNER_CG = "/docker/inner7"


def _files(faults: tuple[str, ...]) -> dict[str, nodes.NodeFile]:
    spec = build_spec(name="t", nodes=1, faults=tuple((1, f) for f in faults))
    hw = NodeHardware.for_node("H100", 8, True, faults, seed="t", index=1)
    return lab._fault_files(spec, NodeState(index=1, name="t-node-1", ip="10.0.0.2"), hw)


def test_slow_data_is_a_known_fault_with_its_limits_in_a_node_file() -> None:
    assert "slow-data" in FAULTS and "throttled" in FAULTS["slow-data"]
    files = _files(("slow-data",))
    limits = files[nodes.DATA_THROTTLE_FILE].content.decode()
    assert limits == (
        f"read_bps_device {SLOW_DATA_READ_BPS}\nread_iops_device {SLOW_DATA_READ_IOPS}\n"
    )
    script = files[nodes.DATA_THROTTLE_SCRIPT]
    assert script.mode == 0o755 and script.content == SCRIPT.read_bytes()
    # Cleared: the file is empty (the script then removes the rules), the script stays.
    cleared = _files(())
    assert cleared[nodes.DATA_THROTTLE_FILE].content == b""
    assert nodes.DATA_THROTTLE_SCRIPT in cleared


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A node's / with two data disks, PID 1 in the node's cgroup, PID 77 in a container's."""
    root = tmp_path / "node"
    state = root / "var/lib/gpunode-lab"
    state.mkdir(parents=True)
    (state / "disks").write_text(
        "# kernel-name major minor model serial (written by gpunode lab)\n"
        "nvme0n1 7 3 LAB_NVMe_SSD S1N01D00\nnvme1n1 7 4 LAB_NVMe_SSD S1N01D01\n"
    )
    for pid, cgroup in (("1", NODE_CG), ("77", INNER_CG)):
        (root / "proc" / pid).mkdir(parents=True)
        (root / "proc" / pid / "cgroup").write_text(f"8:pids:{cgroup}\n7:blkio:{cgroup}\n")
        blkio = root / "sys/fs/cgroup/blkio" / cgroup.lstrip("/")
        blkio.mkdir(parents=True)
        for name in ("read_bps_device", "read_iops_device"):
            (blkio / f"blkio.throttle.{name}").write_text("")
    sbin = root / "usr/local/sbin"
    sbin.mkdir(parents=True)
    (sbin / "gpunode-lab-data-throttle").write_bytes(SCRIPT.read_bytes())
    (sbin / "gpunode-lab-data-throttle").chmod(0o755)
    return root


def _run(root: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    # No docker on PATH: the node's engine is not what these tests look at.
    env = {**os.environ, "GPUNODE_LAB_ROOT": str(root), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, env=env, check=False, timeout=30
    )


def _limits(root: Path, cgroup: str) -> tuple[str, str]:
    blkio = root / "sys/fs/cgroup/blkio" / cgroup.lstrip("/")
    return (
        (blkio / "blkio.throttle.read_bps_device").read_text(),
        (blkio / "blkio.throttle.read_iops_device").read_text(),
    )


def test_throttle_script_writes_and_clears_the_node_limits(root: Path) -> None:
    limits = root / "var/lib/gpunode-lab/data-throttle"
    limits.write_text("read_bps_device 8388608\nread_iops_device 40\n")
    script = str(root / "usr/local/sbin/gpunode-lab-data-throttle")
    done = _run(root, script, "node")
    assert done.returncode == 0, done.stderr
    # One write per data disk; the cgroup file is the last one written (the kernel keeps all).
    assert _limits(root, NODE_CG) == ("7:4 8388608\n", "7:4 40\n")
    limits.write_text("")
    assert _run(root, script, "node").returncode == 0
    assert _limits(root, NODE_CG) == ("7:4 0\n", "7:4 0\n")
    assert _run(root, script, "frobnicate").returncode == 2


def test_hook_throttles_the_container_it_starts(root: Path) -> None:
    hook = root / "usr/bin/nvidia-container-runtime-hook"
    hook.parent.mkdir(parents=True)
    hook.write_text(render("nvidia-container-runtime-hook.sh.j2", version="1.16.2", commit="x"))
    hook.chmod(0o755)
    state = json.dumps({"ociVersion": "1.0.2", "id": "inner7", "status": "creating", "pid": 77})
    # No fault: the container's limits are left alone.
    assert _run(root, str(hook), "prestart", stdin=state).returncode == 0
    assert _limits(root, INNER_CG) == ("", "")
    (root / "var/lib/gpunode-lab/data-throttle").write_text(
        "read_bps_device 8388608\nread_iops_device 40\n"
    )
    done = _run(root, str(hook), "prestart", stdin=state)
    assert done.returncode == 0, done.stderr
    assert _limits(root, INNER_CG) == ("7:4 8388608\n", "7:4 40\n")
    assert _limits(root, NODE_CG) == ("", "")  # the hook touches only the container's cgroup
