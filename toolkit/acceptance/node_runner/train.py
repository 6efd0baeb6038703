"""The training-shaped checks the ranks run: the data-loader wait and GPU utilisation of a short
data-parallel loop fed by a DataLoader reading ``/data``, and its scaling from 1 to all ranks;
and the framework process's side of them (the ranks' train spec, the result's sections)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from toolkit.facts import nvidia

from .collective import busbw_factor, timed_allreduce
from .common import write_json
from .storage import checkpoint_restore, drop_cache, loop_dataset

# How often utilization.gpu (toolkit/facts/nvidia.py UTIL_FIELDS) is sampled.
UTIL_INTERVAL_MS = 100


# The loop's model input: each sample's bytes are reduced to this many floats on the worker.
TRAIN_FEATURES = 1024


class FileSamples:
    """A map-style data set for ``torch.utils.data.DataLoader``: sample ``i`` is the first
    ``sample_bytes`` of file ``i % len(paths)``, read after dropping the file's cached pages
    (so every epoch reads the disk) and reduced to ``features`` floats on the worker."""

    def __init__(self, paths: list[str], sample_bytes: int, features: int, length: int) -> None:
        self.paths = paths
        self.sample_bytes = sample_bytes
        self.features = features
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        import torch  # type: ignore[import-not-found,unused-ignore]

        fd = os.open(self.paths[index % len(self.paths)], os.O_RDONLY)
        try:
            drop_cache(fd)
            data = bytearray()
            while len(data) < self.sample_bytes:
                block = os.read(fd, self.sample_bytes - len(data))
                if not block:
                    break
                data += block
        finally:
            os.close(fd)
        usable = len(data) // self.features * self.features
        raw = torch.frombuffer(data, dtype=torch.uint8)[:usable]
        x = raw.to(torch.float32).view(self.features, -1).mean(1) / 255.0
        return x, x.sum().reshape(1) / self.features


def scaling_points(world: int) -> list[int]:
    """1, 2, 4 ... up to ``world`` ranks, and ``world`` itself."""
    points = []
    k = 1
    while k < world:
        points.append(k)
        k *= 2
    return [*points, world]


def sample_utilisation(smi: str | None) -> tuple[Any, Callable[[], dict[str, Any]]]:
    """Start nvidia-smi sampling ``utilization.gpu`` every 100 ms; the returned function
    stops it and gives the mean per GPU index."""
    if smi is None:
        return None, lambda: {"measured": False, "reason": "nvidia-smi not found", "per_gpu": {}}
    proc = subprocess.Popen(
        nvidia.query_gpu(smi, nvidia.UTIL_FIELDS, loop_ms=UTIL_INTERVAL_MS),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )

    def stop() -> dict[str, Any]:
        proc.terminate()
        try:
            stdout, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
        samples: dict[int, list[float]] = {}
        for row in nvidia.parse_smi_csv(stdout, nvidia.UTIL_FIELDS):
            index, value = nvidia.smi_int(row["index"]), nvidia.smi_int(row["utilization.gpu"])
            if index is not None and value is not None:
                samples.setdefault(index, []).append(float(value))
        if not samples:
            return {"measured": False, "reason": "nvidia-smi gave no sample", "per_gpu": {}}
        return {
            "measured": True,
            "reason": None,
            "per_gpu": {str(i): sum(v) / len(v) for i, v in sorted(samples.items())},
            "samples": sum(len(v) for v in samples.values()),
        }

    return proc, stop


def train_loop(
    torch: Any,
    dist: Any,
    group: Any,
    ranks: int,
    rank: int,
    device: Any,
    train: dict[str, Any],
    compute: Callable[[], None] | None = None,
) -> dict[str, float]:
    """A short data-parallel loop over ``group`` fed by a DataLoader with workers reading
    ``/data``; the first step (workers starting) is not counted, as MLPerf Storage excludes
    it. Returns this rank's step time, data wait, time in ``compute`` and samples.

    ``compute`` runs in every step after the model's: the accelerator's compute of the step,
    emulated (:func:`emulated_compute`) or real (:func:`gemm_compute`).

    Data parallel the way DistributedDataParallel is by default: the same initial weights on
    every rank (broadcast from rank 0), and after each backward pass the gradients averaged
    over the ranks with one all-reduce, then a plain SGD step. Neither DDP nor torch.optim is
    used: their constructors import torch._dynamo, 5-8 s of CPU per rank in the training
    image (it carries no .pyc files, so every module is compiled at import), more than the
    whole loop. Without DDP's overlap of gradient buckets with the backward pass, the
    measured scaling is a lower bound.
    """
    from torch.utils.data import DataLoader  # type: ignore[import-not-found,unused-ignore]
    from torch.utils.data.distributed import DistributedSampler  # type: ignore[import-not-found,unused-ignore]

    features, hidden = TRAIN_FEATURES, int(train["hidden"])
    batch, steps = int(train["batch"]), int(train["steps"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(features, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(hidden, 1),
    ).to(device)
    params = list(model.parameters())
    for param in params:
        dist.broadcast(param.data, src=0, group=group)
    samples = FileSamples(
        list(train["files"]), int(train["sample_bytes"]), features, (steps + 1) * batch * ranks
    )
    sampler: Any = DistributedSampler(
        samples,  # type: ignore[arg-type]  # map-style: __len__ and __getitem__
        num_replicas=ranks,
        rank=rank,
        shuffle=True,
        seed=0,
    )
    workers = int(train["loader_workers"])
    loader: Any = DataLoader(
        samples,  # type: ignore[arg-type]
        batch_size=batch,
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        prefetch_factor=2 if workers else None,
    )

    def average_gradients() -> None:
        grads = [p.grad for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=group)
        flat /= ranks
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    wait = busy = computing = 0.0
    it = iter(loader)
    for step in range(steps + 1):
        start = time.perf_counter()
        x, y = next(it)
        got = time.perf_counter()
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True)
        for param in params:
            param.grad = None
        torch.nn.functional.mse_loss(model(x), y).backward()
        if ranks > 1:
            average_gradients()
        with torch.no_grad():
            for param in params:
                param.add_(param.grad, alpha=-0.01)
        sync()
        computed = time.perf_counter()
        if compute is not None:
            compute()
        if step:
            wait += got - start
            busy += time.perf_counter() - start
            computing += time.perf_counter() - computed
    del it, loader
    return {
        "step_s": busy,
        "wait_s": wait,
        "compute_s": computing,
        "samples": float(steps * batch),
    }


def emulated_compute(seconds: float) -> Callable[[], None]:
    """MLPerf Storage's accelerator: a sleep of the step's compute time (DLIO's
    ``train.computation_time``), so the loop measures the storage and the loader alone."""
    return lambda: time.sleep(seconds)


# The GPU-utilisation loop's step (issue 23): bf16 GEMMs of GPU_STEP_GEMM_N x GPU_STEP_GEMM_N
# (the runner's gemm_n), as many as take at least GPU_STEP_MIN_S at the profile's GEMM floor,
# and at least the emulated compute of a step (`train_compute_s`), so that the loader has the
# same time per batch as in the storage check and a GPU at its floor is busy for tens of
# milliseconds per step, not microseconds. Sized on the controller (thresholds.gpu_step) and
# by scripts/gpu-proof, from the floor in force.
GPU_STEP_GEMM_N = 8192
GPU_STEP_MIN_S = 0.05


def size_gpu_step(floor_tflops: float, compute_s: float | None = None) -> dict[str, Any]:
    """The GPU step for a GEMM floor: ``gemm_n``, ``gemms``, ``tflop`` (the step's work) and
    ``at_floor_s`` (its time at the floor: computed, never measured)."""
    target = max(GPU_STEP_MIN_S, compute_s or 0.0)
    tflop = 2 * GPU_STEP_GEMM_N**3 / 1e12  # one n x n by n x n product: 2 n^3 FLOPs
    gemms = max(1, math.ceil(target * floor_tflops / tflop))
    return {
        "gemm_n": GPU_STEP_GEMM_N,
        "gemms": gemms,
        "tflop": gemms * tflop,
        "at_floor_s": gemms * tflop / floor_tflops,
    }


def gemm_compute(torch: Any, device: Any, n: int, gemms: int) -> Callable[[], None]:
    """A real step on the GPU: ``gemms`` bf16 products of two n x n matrices, waited for."""
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    c = torch.empty_like(a)

    def run() -> None:
        for _ in range(gemms):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize(device)

    return run


def train_phase(
    torch: Any,
    dist: Any,
    rank: int,
    world: int,
    per_node: int,
    device: Any,
    train: dict[str, Any],
    smi: str | None,
) -> dict[str, Any] | None:
    """On every rank: restore the checkpoint (rank 0, a process that did not write it), then
    the loop and the all-reduce at 1, 2, 4 ... ``world`` ranks, ``per_node`` ranks on each
    node (ranks are numbered node by node, so a point of ``k`` ranks spans the first
    ``ceil(k / per_node)`` nodes). Rank 0 returns the result."""
    out: dict[str, Any] = {"checkpoint": None, "loop": None, "scaling": None, "error": None}
    checkpoint = train.get("checkpoint")
    if rank == 0 and checkpoint:
        out["checkpoint"] = checkpoint_restore(torch, checkpoint["path"], checkpoint["manifest"])
    dist.barrier()
    points: list[dict[str, Any]] = []
    compute_s = train.get("compute_s")
    emulated = emulated_compute(float(compute_s)) if compute_s else None
    for k in scaling_points(world):
        point_started = time.perf_counter()
        group = None if k == world else dist.new_group(ranks=list(range(k)))
        mine = torch.zeros(3, dtype=torch.float64, device=device)
        busbw = None
        if rank < k:
            figures = train_loop(torch, dist, group, k, rank, device, train, emulated)
            mine = torch.tensor(
                [figures["step_s"], figures["wait_s"] / max(figures["step_s"], 1e-9), 0.0],
                dtype=torch.float64,
                device=device,
            )
            # The slowest rank sets the pace; its share of waiting is the one reported.
            dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=group)
            size = int(train["allreduce_bytes"])
            if 2 <= k < world:
                buf = torch.zeros(max(1, size // 4), dtype=torch.float32, device=device)
                local = timed_allreduce(
                    torch, dist, buf, int(train["iters"]), int(train["warmup"]), device, group
                )
                slowest = torch.tensor([local], dtype=torch.float64, device=device)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
                busbw = buf.numel() * 4 / float(slowest.item()) / 1e9 * busbw_factor(k)
        dist.barrier()
        if rank == 0:
            step_s = float(mine[0].item())
            points.append(
                {
                    "ranks": k,
                    "nodes": -(-k // per_node),
                    "samples_per_s": k * int(train["steps"]) * int(train["batch"]) / step_s
                    if step_s > 0
                    else None,
                    "data_wait_share": float(mine[1].item()),
                    "allreduce_busbw_gbps": busbw,
                    "duration_s": time.perf_counter() - point_started,
                }
            )
    util, gpu_step = gpu_phase(torch, dist, rank, world, device, train, smi)
    if rank != 0:
        return None
    base = points[0]["samples_per_s"]
    for point in points:
        rate = point["samples_per_s"]
        point["efficiency"] = (
            float(rate) / (point["ranks"] * float(base)) if rate and base else None
        )
    full = points[-1]
    out["loop"] = {
        "ranks": full["ranks"],
        "device": device.type,
        "steps": int(train["steps"]),
        "batch": int(train["batch"]),
        "sample_bytes": int(train["sample_bytes"]),
        "loader_workers": int(train["loader_workers"]),
        "nodes": full["nodes"],
        "samples_per_s": full["samples_per_s"],
        "data_wait_share": full["data_wait_share"],
        # What the step's compute was: emulated (a sleep of the profile's figure, MLPerf
        # Storage's method: accelerator utilisation = 1 - data_wait_share), or the model only.
        "compute": {"kind": "emulated", "step_s": float(compute_s)}
        if compute_s
        else {"kind": "model", "step_s": None},
        "gpu_util": util,
        "gpu_step": gpu_step,
    }
    out["scaling"] = {
        "points": points,
        "allreduce_size_bytes": int(train["allreduce_bytes"]),
        "note": "all-reduce busbw at all ranks is the all-reduce section's row",
    }
    return out


def gpu_phase(
    torch: Any,
    dist: Any,
    rank: int,
    world: int,
    device: Any,
    train: dict[str, Any],
    smi: str | None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """GPU utilisation: the loop at all ranks once more, each step's compute real bf16 GEMMs
    sized on the controller from the profile's GEMM floor (``train.gpu_step``), nvidia-smi
    sampling every GPU while it runs (rank 0). Returns the utilisation and the step: its size,
    its time at the floor (computed there) and its time here (measured, the slowest rank)."""
    step = train.get("gpu_step")
    if device.type != "cuda":
        reason = (
            "the loop ran on CPU ranks (no CUDA device): there is no GPU utilisation "
            "to sample, and an emulated nvidia-smi's figure would describe no work"
        )
        return {"measured": False, "reason": reason, "per_gpu": {}}, None
    if not step:
        reason = "the profile sets no GEMM floor: the GPU step cannot be sized"
        return {"measured": False, "reason": reason, "per_gpu": {}}, None
    compute = gemm_compute(torch, device, int(step["gemm_n"]), int(step["gemms"]))
    compute()  # cuBLAS picks its kernel outside the sampled loop
    stop = None
    if rank == 0:
        _proc, stop = sample_utilisation(smi)
    figures = train_loop(torch, dist, None, world, rank, device, train, compute)
    util = stop() if stop is not None else {}
    slowest = torch.tensor(
        [figures["compute_s"] / max(1, int(train["steps"]))], dtype=torch.float64, device=device
    )
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    measured = {
        "gemm_n": int(step["gemm_n"]),
        "gemms": int(step["gemms"]),
        "at_floor_s": float(step["at_floor_s"]),
        "measured_s": float(slowest.item()),
    }
    return util, measured


def write_train_spec(spec: dict[str, Any], storage: dict[str, Any], sizes: list[int]) -> str | None:
    """The ranks' part of the training-shaped checks, as a file for ``worker --train``."""
    if storage.get("error") or not storage.get("files"):
        return None
    train = dict(spec["train"])
    checkpoint = storage.get("checkpoint") or {}
    train.update(
        files=storage["files"],
        iters=int(spec.get("iters", 20)),
        warmup=int(spec.get("warmup_iters", 5)),
        # The scaling points' all-reduce: the largest size the all-reduce section runs.
        allreduce_bytes=int(train.get("allreduce_bytes") or max(sizes)),
        checkpoint=None
        if checkpoint.get("error") or not checkpoint.get("manifest")
        else {"path": checkpoint["path"], "manifest": checkpoint["manifest"]},
    )
    path = os.path.join(str(spec.get("workdir", "/tmp")), f"train-spec-{os.getpid()}.json")
    write_json(path, train)
    return path


def training_results(
    storage: dict[str, Any] | None, train: dict[str, Any] | None, have_torch: bool
) -> dict[str, Any]:
    """The ``storage``, ``checkpoint`` and ``train`` sections of the result."""
    if storage is None:
        return {"storage": None, "checkpoint": None, "train": None}
    reads = storage.get("reads") or {}
    written = storage.get("checkpoint")
    restored = (train or {}).get("checkpoint")
    if not have_torch:
        checkpoint: dict[str, Any] | None = {"error": "torch is not installed"}
    elif written is None or written.get("error"):
        checkpoint = {"error": (written or {}).get("error") or "no checkpoint was written"}
    else:
        checkpoint = {k: v for k, v in written.items() if k != "manifest"}
        checkpoint["fresh_process"] = True
        if restored is None:
            checkpoint["error"] = (train or {}).get("error") or "the checkpoint was not restored"
        else:
            checkpoint.update(restored)
            checkpoint["error"] = restored.get("error")
    return {
        "storage": {
            "path": storage.get("dir"),
            "dataset": storage.get("dataset"),
            "reads": reads or None,
            "duration_s": storage.get("duration_s"),
            "error": storage.get("error") or reads.get("error"),
        },
        "checkpoint": checkpoint,
        "train": train if have_torch else {"error": "torch is not installed"},
    }


def prepare_loop(spec_path: str, sizes: list[int]) -> dict[str, Any]:
    """The multi-node loop's part on this node: its data set on the spec's data path and the
    ranks' train spec (no checkpoint: each node's was restored in its own run).

    Returns:
        ``storage`` (for :func:`remove_storage`), ``file`` (the train spec, None when the
        data set could not be written) and ``error``.
    """
    try:
        with open(spec_path, encoding="utf-8") as handle:
            spec = json.load(handle)
    except (OSError, ValueError) as err:
        return {"storage": None, "file": None, "error": f"cannot read spec {spec_path}: {err}"}
    data_path = spec.get("data_path")
    if not data_path or not spec.get("storage") or not os.path.isdir(data_path):
        return {"storage": None, "file": None, "error": f"no data path {data_path} here"}
    storage = loop_dataset(spec, data_path)
    if storage["error"]:
        return {"storage": storage, "file": None, "error": storage["error"]}
    return {"storage": storage, "file": write_train_spec(spec, storage, sizes), "error": None}
