"""The emulated hardware's device files in a lab node (toolkit/lab/devices.py).

The files themselves are made in a running node (tests/integration/test_08_slurm.py, where
slurmd's GRES plugin needs them).
"""

from __future__ import annotations

import subprocess

from toolkit.lab import devices, nodes
from toolkit.lab.hardware import NodeHardware


def _hardware(count: int = 8, faults: tuple[str, ...] = ()) -> NodeHardware:
    return NodeHardware.for_node("H100", count, count == 8, faults, seed="lab", index=1)


def test_every_gpu_has_its_device_and_the_control_device_is_there() -> None:
    # NVIDIA's CUDA Installation Guide: /dev/nvidia<i> c 195 <i>, /dev/nvidiactl c 195 255
    assert devices.gpu_devices(_hardware()) == [
        *((f"/dev/nvidia{i}", 195, i) for i in range(8)),
        ("/dev/nvidiactl", 195, 255),
    ]
    # The one list the boot unit makes: the GPUs', then the RDMA NICs' (2 here).
    assert devices.render_list(_hardware(2)) == (
        "/dev/nvidia0 195 0 666\n/dev/nvidia1 195 1 666\n/dev/nvidiactl 195 255 666\n"
        "/dev/infiniband/uverbs0 231 192 666\n/dev/infiniband/uverbs1 231 193 666\n"
        "/dev/infiniband/rdma_cm 10 58 666\n"
    )


def test_a_gpu_off_the_bus_has_no_device_and_the_minors_close_up() -> None:
    found = devices.gpu_devices(_hardware(faults=("missing-gpu",)))
    assert [path for path, _major, _minor in found] == [
        *(f"/dev/nvidia{i}" for i in range(7)),
        "/dev/nvidiactl",
    ]


def test_gres_file_expression() -> None:
    assert devices.gpu_device_paths(8) == "/dev/nvidia[0-7]"
    assert devices.gpu_device_paths(1) == "/dev/nvidia0"


def test_a_node_may_make_nvidia_devices_but_never_open_them() -> None:
    assert "c 195:* m" in nodes.DEVICE_RULES
    assert [r.split()[-1] for r in nodes.DEVICE_RULES if r.startswith("c ")] == ["m"]


def test_the_boot_unit_runs_before_slurmd_and_its_script_is_sh() -> None:
    assert "Before=sysinit.target slurmd.service" in devices.UNIT
    assert f"ExecStart={devices.SCRIPT_PATH}" in devices.UNIT
    text = devices.script().decode()
    assert devices.LIST_FILE in text and "mknod -m" in text
    subprocess.run(["sh", "-n", "-c", text], check=True)
