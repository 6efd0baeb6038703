"""The host-to-container contract: what the ranks' container is given (the host's RDMA device
files and IPC_LOCK), what the ranks see inside it compared with the host's, the checks and
failure classes that come of it, and GPUDirect RDMA's kernel side."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from toolkit.acceptance import failure
from toolkit.acceptance.fabric_checks import CONTAINER_FABRIC, GPUDIRECT_KERNEL, fabric_checks
from toolkit.acceptance.node_runner import fabric, node
from toolkit.profile.floors import AcceptanceSpec, TransportSpec

# What a real host with two ConnectX ports shows (Mellanox/k8s-rdma-shared-dev-plugin issue
# #64: rdma_cm 10, 57; uverbs0-1 231, 192-193).
HOST_RDMA = [
    {"path": "/dev/infiniband/rdma_cm", "major": 10, "minor": 57},
    {"path": "/dev/infiniband/uverbs0", "major": 231, "minor": 192},
    {"path": "/dev/infiniband/uverbs1", "major": 231, "minor": 193},
]
HOST_GPUS = [{"path": f"/dev/nvidia{i}", "major": 195, "minor": i} for i in range(2)]
HOST = {"rdma_devices": ["mlx5_0", "mlx5_1"], "rdma_files": HOST_RDMA, "gpu_files": HOST_GPUS}
OPEN_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:35:33 UTC 2025\n"
)
PROPRIETARY_580 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Release Build\n"


def seen(**changes: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rdma_files": list(HOST_RDMA),
        "gpu_files": list(HOST_GPUS),
        "memlock_bytes": 8 << 20,
        "ipc_lock": True,
    }
    out.update(changes)
    return out


def test_the_ranks_get_each_rdma_device_file_and_ipc_lock() -> None:
    options = fabric.fabric_options(HOST_RDMA)
    assert options[0] == "--cap-add=IPC_LOCK"
    assert options[1:] == [f"--device={f['path']}" for f in HOST_RDMA]
    assert fabric.fabric_options([]) == []  # no RDMA device: nothing asked for
    argv = node.container_argv(
        "sha256:abc", "/opt/gpunode/accept", options=["--ipc=host", *options]
    )
    assert "--device=/dev/infiniband/uverbs1" in argv and "--cap-add=IPC_LOCK" in argv
    assert argv.index("--device=/dev/infiniband/uverbs1") < argv.index("sha256:abc")


@pytest.mark.parametrize(
    ("view", "missing"),
    [
        (seen(), []),
        # Unlimited memlock stands in for IPC_LOCK (ib_umem_get's rule).
        (seen(ipc_lock=False, memlock_bytes=None), []),
        (
            seen(rdma_files=[]),
            [
                "/dev/infiniband/rdma_cm (10:57, --device)",
                "/dev/infiniband/uverbs0 (231:192, --device)",
                "/dev/infiniband/uverbs1 (231:193, --device)",
            ],
        ),
        (seen(rdma_files=HOST_RDMA[:2]), ["/dev/infiniband/uverbs1 (231:193, --device)"]),
        # The same path with other numbers is another device.
        (
            seen(rdma_files=[*HOST_RDMA[:2], {**HOST_RDMA[2], "minor": 199}]),
            ["/dev/infiniband/uverbs1 (231:193, --device)"],
        ),
        (seen(gpu_files=HOST_GPUS[:1]), ["/dev/nvidia1 (195:1, --device)"]),
        (
            seen(ipc_lock=False),
            [
                "IPC_LOCK (--cap-add=IPC_LOCK) or an unlimited memlock limit "
                "(--ulimit=memlock=-1): the ranks may lock 8388608 bytes"
            ],
        ),
    ],
)
def test_what_the_ranks_see_is_held_against_the_host(
    view: dict[str, Any], missing: list[str]
) -> None:
    assert fabric.compare(HOST, view) == {"ok": not missing, "missing": missing}


def test_a_host_without_rdma_needs_no_ipc_lock() -> None:
    host = {"rdma_devices": [], "rdma_files": [], "gpu_files": []}
    assert fabric.compare(host, seen(rdma_files=[], gpu_files=[], ipc_lock=False))["ok"]


@pytest.mark.parametrize(
    ("peermem", "release", "version", "missing"),
    [
        (True, "5.4.0-150-generic", PROPRIETARY_580, None),
        (False, "6.8.0-45-generic", OPEN_580, None),  # DMA-BUF
        (
            False,
            "6.8.0-45-generic",
            PROPRIETARY_580,
            "nvidia_peermem is not loaded, and DMA-BUF needs the open GPU kernel module",
        ),
        (
            False,
            "5.4.0-150-generic",
            OPEN_580,
            "nvidia_peermem is not loaded, and DMA-BUF needs Linux >= 5.12 "
            "(runs 5.4.0-150-generic)",
        ),
        (
            False,
            "6.1.0-18-amd64",
            "",
            "nvidia_peermem is not loaded, and DMA-BUF needs a loaded NVIDIA driver "
            "(no /proc/driver/nvidia/version)",
        ),
    ],
)
def test_gpudirect_rdma_kernel_side_names_what_is_missing(
    tmp_path: Path, peermem: bool, release: str, version: str, missing: str | None
) -> None:
    module = tmp_path / "nvidia_peermem"
    if peermem:
        module.mkdir()
    found = fabric.gpudirect_kernel(str(module), release, version)
    assert found["missing"] == missing
    assert found["nvidia_peermem"] is peermem


def test_device_files_are_listed_with_their_numbers(tmp_path: Path) -> None:
    (tmp_path / "umad0").write_text("")  # not a character device, and not NCCL's
    try:
        os.mknod(tmp_path / "uverbs0", 0o20666, os.makedev(231, 192))
        os.mknod(tmp_path / "rdma_cm", 0o20666, os.makedev(10, 58))
        os.mknod(tmp_path / "issm0", 0o20600, os.makedev(231, 64))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    assert fabric.rdma_device_files(str(tmp_path)) == [
        {"path": str(tmp_path / "rdma_cm"), "major": 10, "minor": 58},
        {"path": str(tmp_path / "uverbs0"), "major": 231, "minor": 192},
    ]
    assert fabric.rdma_device_files(str(tmp_path / "absent")) == []


def test_a_container_short_of_the_hosts_devices_measures_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(node, "container_view", lambda: seen(rdma_files=[]))
    out = node.run_framework({"host_fabric": HOST, "workdir": "/nonexistent"})
    assert out["fabric_check"]["ok"] is False
    assert out["allreduce"]["rows"] == []
    assert out["allreduce"]["error"].startswith("harness: the ranks' container lacks ")
    assert "/dev/infiniband/uverbs0 (231:192, --device)" in out["allreduce"]["error"]


def result(compared: dict[str, Any] | None, gpudirect: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "fabric": {
            "host": {**HOST, "gpudirect": gpudirect},
            "container": seen(),
            "check": compared,
        }
    }


def test_a_container_without_the_fabric_is_a_harness_problem_naming_it() -> None:
    missing = ["/dev/infiniband/uverbs0 (231:192, --device)"]
    (check,) = fabric_checks(result({"ok": False, "missing": missing}, None), AcceptanceSpec())
    assert check.name == CONTAINER_FABRIC and check.outcome == "failed"
    assert "uverbs0" in check.message
    assert failure.advice_for(check.name).failure_class == failure.HARNESS
    (good,) = fabric_checks(result({"ok": True, "missing": []}, None), AcceptanceSpec())
    assert good.outcome == "passed" and "rdma_cm, uverbs0, uverbs1" in good.message
    # A host with no device file at all: both sides empty agree, and that measured nothing.
    bare = result({"ok": True, "missing": []}, None)
    bare["fabric"]["host"] = {"rdma_files": [], "gpu_files": []}
    (empty,) = fabric_checks(bare, AcceptanceSpec())
    assert empty.outcome == "not_measured" and "no RDMA or GPU device files" in empty.message
    # The ranks on the host (--engine host): nothing to compare, no check.
    assert fabric_checks(result(None, None), AcceptanceSpec()) == []
    assert fabric_checks({}, AcceptanceSpec()) == []


def test_gpudirect_kernel_side_is_judged_only_where_the_profile_requires_it() -> None:
    lacking = {"nvidia_peermem": False, "dmabuf": False, "missing": "nvidia_peermem is not loaded"}
    loose = AcceptanceSpec()
    strict = AcceptanceSpec(transport=TransportSpec(gpudirect_rdma="required"))
    (shown,) = fabric_checks(result(None, lacking), loose)
    assert shown.name == GPUDIRECT_KERNEL and shown.outcome == "not_measured"
    assert "nvidia_peermem is not loaded" in shown.message
    (judged,) = fabric_checks(result(None, lacking), strict)
    assert judged.outcome == "failed"
    assert failure.advice_for(judged.name).failure_class == failure.CONFIGURATION
    loaded = {"nvidia_peermem": True, "dmabuf": False, "missing": None}
    (passed,) = fabric_checks(result(None, loaded), strict)
    assert passed.outcome == "passed" and "nvidia_peermem loaded" in passed.message


def test_multi_node_ranks_do_not_start_in_a_container_short_of_the_fabric(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from toolkit.acceptance.node_runner import __main__ as runner_main

    host = tmp_path / "host-fabric.json"
    host.write_text(json.dumps(HOST))
    out = tmp_path / "out.json"
    argv = [
        "allreduce",
        "--sizes",
        "1024",
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "10.0.0.1",
        "--master-port",
        "29500",
        "--host-fabric",
        str(host),
        "--out",
        str(out),
    ]
    monkeypatch.setattr(runner_main, "container_view", lambda: seen(rdma_files=HOST_RDMA[1:]))
    assert runner_main.main(argv) == 0
    stopped = json.loads(out.read_text())
    assert stopped["rows"] == [] and stopped["fabric"]["check"]["ok"] is False
    assert stopped["error"] == (
        "harness: the ranks' container lacks /dev/infiniband/rdma_cm (10:57, --device)"
    )
