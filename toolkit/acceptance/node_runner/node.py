"""One node's run: the facts, then the framework's checks in this Python or inside the training
image (``docker run`` of this runner, the way a training job runs)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import time
from typing import Any

from .collective import find_nccl_tests, free_port, launch_ranks, run_nccl_tests
from .common import ARCHIVE, import_torch, now_iso, sh, write_json
from .fabric import compare, container_view, fabric_error, fabric_options, host_fabric
from .facts import (
    DEFAULT_KERNEL_LOG_COMMAND,
    DMI_DIR,
    RDMA_DIR,
    query_dcgm,
    query_gpus,
    query_identity,
    query_topology,
    query_versions,
    read_kernel_log,
    read_state,
)
from .gpu import gpu_perf
from .probe import nccl_probe
from .storage import data_throughput, remove_storage, run_storage_checks
from .train import training_results, write_train_spec

SCHEMA = 1


def run_node(spec: dict[str, Any]) -> dict[str, Any]:
    """Every single-node check; returns the result document."""
    started = time.perf_counter()
    # CUDA numbers GPUs fastest first unless told otherwise; nvidia-smi numbers them by PCI
    # bus id (CUDA C Programming Guide, "CUDA Environment Variables": CUDA_DEVICE_ORDER).
    # One order keeps the per-GPU results and the nvidia-smi samples about the same GPU.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "host": socket.gethostname(),
        "started": now_iso(),
        "errors": [],
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        result["gpus"] = query_gpus(smi)
    else:
        result["gpus"] = {
            "ok": False,
            "error": "nvidia-smi not found",
            "count": 0,
            "list": [],
            "unsupported_fields": [],
            "memory_error": None,
        }
    result["versions"] = query_versions(smi, list(spec.get("packages", [])))
    result["topology"] = query_topology(smi, str(spec.get("rdma_dir") or RDMA_DIR))
    dcgm = query_dcgm(spec.get("dcgm_diag_level"), float(spec.get("dcgm_timeout_s") or 900))
    if dcgm is not None:
        result["dcgm"] = dcgm
    result["kernel_log"] = read_kernel_log(
        spec.get("kernel_log_command") or DEFAULT_KERNEL_LOG_COMMAND
    )
    result["state"] = read_state(spec["state_file"])
    result["identity"] = query_identity(str(spec.get("dmi_dir") or DMI_DIR))
    # What the multi-node ranks' containers are given too (``steps.accept``).
    result["imex_channels"] = imex_channels()
    # The host's side of the host-to-container contract; the container's side is added by
    # run_in_container (what the ranks saw, and the two compared).
    result["fabric"] = {"host": host_fabric(result["topology"].get("rdma"))}
    container = spec.get("container")
    if container:
        framework = run_in_container(spec, container, result["fabric"]["host"])
        result["fabric"]["container"] = framework.pop("fabric_seen", None)
        result["fabric"]["check"] = framework.pop("fabric_check", None)
    else:
        framework = run_framework(spec)
    result["versions"].update(framework.pop("versions", {}))
    result.update(framework)
    result["duration_s"] = time.perf_counter() - started
    return result


# The options NVIDIA's PyTorch containers are documented to need for NCCL (NGC PyTorch
# release notes, "Running PyTorch": --ipc=host --ulimit memlock=-1 --ulimit stack=67108864);
# the inventory may replace them (gpunode_accept_container_options).
DEFAULT_CONTAINER_OPTIONS = ("--ipc=host", "--ulimit=memlock=-1", "--ulimit=stack=67108864")

# IMEX channels (GB200/GB300 NVL): CUDA's multi-node NVLink memory needs one in the container
# (NVIDIA IMEX guide, "IMEX Channels"; the container toolkit passes them only on request,
# NVIDIA_IMEX_CHANNELS). The imex role creates channel0; only those present on the host are
# passed, so a node without IMEX gets none.
IMEX_CHANNELS_GLOB = "/dev/nvidia-caps-imex-channels/channel*"


def imex_channels(pattern: str = IMEX_CHANNELS_GLOB) -> list[str]:
    """The IMEX channel devices on this host, sorted (none where IMEX is not set up)."""
    return sorted(glob.glob(pattern))


def device_options(devices: list[str] | tuple[str, ...]) -> list[str]:
    """``docker run`` options passing each host device at the same path."""
    return [f"--device={path}" for path in devices]


def container_argv(
    image: str,
    workdir: str,
    data_path: str | None = None,
    env: dict[str, str] | None = None,
    options: list[str] | tuple[str, ...] = DEFAULT_CONTAINER_OPTIONS,
    devices: list[str] | tuple[str, ...] = (),
) -> list[str]:
    """``docker run`` of this runner inside the training image, the way a training job runs.

    GPUs are passed as the NVIDIA Container Toolkit does it for Docker (``--gpus all``), the
    host's network serves the multi-node rendezvous, and the work folder (this runner, spec
    and results) and the data disk are mounted at the same paths; ``devices`` (the host's IMEX
    channels, :func:`imex_channels`) are passed at their own paths.
    """
    argv = ["docker", "run", "--rm", "--network=host", "--gpus=all", *options]
    argv += device_options(devices)
    argv += ["-v", f"{workdir}:{workdir}"]
    if data_path:
        argv += ["-v", f"{data_path}:{data_path}"]
    for key, value in sorted((env or {}).items()):
        argv += ["-e", f"{key}={value}"]
    return [*argv, "--entrypoint", "python3", image, os.path.join(workdir, ARCHIVE)]


def run_in_container(
    spec: dict[str, Any], container: dict[str, Any], host: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The framework's checks inside the training image (``framework`` in the container).

    ``host`` (``fabric.host_fabric``): the RDMA devices the container is given (each device
    file and IPC_LOCK, beside the site's options) and that the ranks must then see; the
    framework compares before its all-reduce (``fabric_seen``, ``fabric_check``).
    """
    workdir = str(spec.get("workdir", "/tmp"))
    spec_path = os.path.join(workdir, "framework-spec.json")
    out_path = os.path.join(workdir, f"framework-{os.getpid()}.json")
    inner = {k: v for k, v in spec.items() if k != "container"}
    if host is not None:
        inner["host_fabric"] = host
    write_json(spec_path, inner)
    options = list(container.get("options") or DEFAULT_CONTAINER_OPTIONS)
    options += fabric_options((host or {}).get("rdma_files") or [])
    argv = container_argv(
        str(container["image"]), workdir, spec.get("data_path"), None, options, imex_channels()
    )
    argv += ["framework", "--spec", spec_path, "--out", out_path]
    info: dict[str, Any] = {"image": container["image"], "ok": False, "error": None}
    rc, stdout, stderr = sh(argv, timeout=float(spec.get("timeout_s", 600)) + 300)
    framework: dict[str, Any] = {}
    if rc == 0:
        try:
            with open(out_path, encoding="utf-8") as handle:
                framework = json.load(handle)
            info["ok"] = True
        except (OSError, ValueError) as err:
            info["error"] = f"no result from the container: {err}"
    else:
        info["error"] = f"docker run exited {rc}: {(stderr or stdout).strip()[-600:]}"
    if not info["ok"]:
        framework = {
            "cuda_device_count": 0,
            "allreduce": {"engine": "torch", "rows": [], "error": f"container: {info['error']}"},
            "gpu_perf": None,
            "data": None,
        }
    framework["container"] = info
    return framework


def run_framework(spec: dict[str, Any]) -> dict[str, Any]:
    """The checks that run with the framework: versions, all-reduce, GPU speed, /data."""
    # CUDA numbers GPUs fastest first unless told otherwise; nvidia-smi by PCI bus id.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    # In the training image, the NVIDIA runtime mounts nvidia-smi (the utility capability).
    smi = shutil.which("nvidia-smi")
    result: dict[str, Any] = {"versions": {}}
    host = spec.get("host_fabric")
    if host is not None:
        # Before anything is measured: do the ranks see what the host has? A container that
        # lacks a device measures the harness, not the node.
        result["fabric_seen"] = container_view()
        result["fabric_check"] = compare(host, result["fabric_seen"])
        if not result["fabric_check"]["ok"]:
            error = fabric_error(result["fabric_check"])
            result.update(
                cuda_device_count=0,
                allreduce={"engine": "torch", "rows": [], "error": error},
                gpu_perf=None,
                data=None,
            )
            return result
    torch = import_torch()
    cuda_gpus = 0
    if torch is not None:
        result["versions"]["torch"] = torch.__version__
        result["versions"]["torch_cuda"] = getattr(torch.version, "cuda", None)
        try:
            cuda_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception:
            cuda_gpus = 0
        probe = nccl_probe(torch)
        result["versions"]["nccl"] = probe
        result["versions"]["nccl_loaded"] = probe["version"]
    result["cuda_device_count"] = cuda_gpus
    sizes = [int(s) for s in spec.get("sizes", [1 << 20])]
    iters = int(spec.get("iters", 20))
    warmup = int(spec.get("warmup_iters", 5))
    timeout = float(spec.get("timeout_s", 600))
    engine = spec.get("engine", "auto")
    data_path = spec.get("data_path")
    storage = train_file = None
    if data_path and spec.get("storage") and os.path.isdir(data_path):
        storage = run_storage_checks(spec, torch, data_path)
        train_file = write_train_spec(spec, storage, sizes)
    nccl_tests = find_nccl_tests() if cuda_gpus and engine in ("auto", "nccl-tests") else None
    if nccl_tests:
        result["allreduce"] = run_nccl_tests(
            # Factor 2 from the smallest size reaches every power-of-two floor size.
            nccl_tests,
            cuda_gpus,
            sizes,
            iters,
            warmup,
            2,
            timeout,
        )
    elif engine == "nccl-tests":
        result["allreduce"] = {
            "engine": "nccl-tests",
            "rows": [],
            "error": "engine nccl-tests asked for, but all_reduce_perf or a GPU is missing",
        }
    elif torch is None:
        result["allreduce"] = {"engine": "torch", "rows": [], "error": "torch is not installed"}
    else:
        device = "cuda" if cuda_gpus else "cpu"
        nproc = cuda_gpus or int(spec.get("cpu_ranks_per_node", 2))
        out_file = os.path.join(spec.get("workdir", "/tmp"), f"allreduce-{os.getpid()}.json")
        result["allreduce"] = launch_ranks(
            1,
            0,
            nproc,
            "127.0.0.1",
            free_port(),
            sizes,
            iters,
            warmup,
            device,
            timeout,
            out_file,
            train=train_file,
        )
    train = result["allreduce"].pop("train", None) if train_file else None
    if train_file and torch is not None and nccl_tests:
        # all_reduce_perf ran the all-reduce: the ranks are launched for the loop alone.
        out_file = os.path.join(spec.get("workdir", "/tmp"), f"train-{os.getpid()}.json")
        launched = launch_ranks(
            1,
            0,
            cuda_gpus,
            "127.0.0.1",
            free_port(),
            [],
            iters,
            warmup,
            "cuda",
            timeout,
            out_file,
            train=train_file,
        )
        train = launched.get("train") or {"error": launched.get("error") or "no result"}
    elif train_file and train is None:
        train = {"error": result["allreduce"].get("error") or "the ranks ran no training loop"}
    result.update(training_results(storage, train, torch is not None))
    remove_storage(storage)
    if train_file:
        with contextlib.suppress(OSError):
            os.unlink(train_file)
    if torch is not None and cuda_gpus:
        result["gpu_perf"] = gpu_perf(torch, cuda_gpus, spec, smi)
    else:
        result["gpu_perf"] = None
    result["data"] = (
        data_throughput(data_path, int(spec.get("data_size_bytes", 1 << 30))) if data_path else None
    )
    return result
