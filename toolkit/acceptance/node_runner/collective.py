"""The all-reduce: this node's ranks started as processes (torch.distributed, ``nccl`` on GPUs,
``gloo`` on the CPU), the value pattern they check, and nccl-tests' ``all_reduce_perf`` when
installed (its text is parsed on the controller)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from typing import Any

from .common import runner_process, sh

NCCL_TESTS_CANDIDATES = (
    "all_reduce_perf",
    "/opt/nccl-tests/build/all_reduce_perf",
    "/usr/local/bin/all_reduce_perf",
)


def busbw_factor(ranks: int) -> float:
    """all_reduce bus bandwidth factor 2(n-1)/n (nccl-tests' PERFORMANCE.md)."""
    return 2.0 * (ranks - 1) / ranks if ranks > 0 else 0.0


def pattern_value(rank: int, index_mod: int) -> float:
    """The value rank ``rank`` puts at element ``i`` (``index_mod = i % 7``): small integers,
    so every partial sum is exact in float32 and the reduced value can be checked exactly."""
    return float((rank + 1) * (index_mod + 1))


PATTERN_CHUNK = 1 << 24  # elements per step of the pattern (128 MiB of int64 indices)


P2P_MAX_BYTES = 256 << 20


def fill_pattern(torch: Any, buf: Any, scale: float) -> None:
    """Element i becomes ``scale * (i % 7 + 1)`` (see :func:`pattern_value`)."""
    n = buf.numel()
    for start in range(0, n, PATTERN_CHUNK):
        end = min(n, start + PATTERN_CHUNK)
        idx = torch.arange(start, end, device=buf.device, dtype=torch.int64) % 7
        buf[start:end].copy_((idx + 1).to(buf.dtype) * scale)


def check_pattern(torch: Any, buf: Any, scale: float) -> tuple[int, float]:
    """Elements that differ from ``scale * (i % 7 + 1)``, and the largest difference."""
    n = buf.numel()
    wrong = 0
    max_err = 0.0
    for start in range(0, n, PATTERN_CHUNK):
        end = min(n, start + PATTERN_CHUNK)
        idx = torch.arange(start, end, device=buf.device, dtype=torch.int64) % 7
        expected = (idx + 1).to(buf.dtype) * scale
        diff = (buf[start:end] - expected).abs()
        wrong += int((diff != 0).sum().item())
        max_err = max(max_err, float(diff.max().item()))
    return wrong, max_err


def timed_allreduce(
    torch: Any, dist: Any, buf: Any, iters: int, warmup: int, device: Any, group: Any = None
) -> float:
    """This rank's seconds per all-reduce of ``buf`` over ``group`` (after ``warmup``)."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        dist.all_reduce(buf, group=group)
    sync()
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf, group=group)
    sync()
    return (time.perf_counter() - start) / iters


# NCCL's log of an all-reduce on GPUs says which transports it really used (network plugin,
# GPUDirect RDMA, NVLS, P2P): NCCL_DEBUG=INFO prints it (docs.nvidia.com/deeplearning/nccl,
# user guide, "Logging"); the controller reads it (toolkit/acceptance/nccllog.py). A site's
# own NCCL_DEBUG is kept. At most this much of it travels back in the result.
NCCL_LOG_MAX_BYTES = 4 << 20


def nccl_debug_env(base: dict[str, str]) -> dict[str, str]:
    """``base`` with ``NCCL_DEBUG=INFO`` unless it sets NCCL_DEBUG itself."""
    return {"NCCL_DEBUG": "INFO", **base}


def launch_ranks(
    nnodes: int,
    node_rank: int,
    nproc: int,
    master_addr: str,
    master_port: int,
    sizes: list[int],
    iters: int,
    warmup: int,
    device: str,
    timeout: float,
    out: str | None,
    p2p: bool = False,
    train: str | None = None,
) -> dict[str, Any]:
    """Start this node's ranks as processes and wait for them (``train``: the spec file of
    the training-shaped checks the ranks run after the all-reduce, see :func:`train_phase`).

    Returns:
        On node 0 the result of rank 0; elsewhere ``{"error": None}``; on any failure a
        result with ``error`` set and no rows.
    """
    world = nnodes * nproc
    procs = []
    tmp_out = out or ""
    runner, runner_env = runner_process(dict(os.environ))
    base_env = dict(
        nccl_debug_env(runner_env) if device == "cuda" else runner_env,
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        WORLD_SIZE=str(world),
        # torchrun's name for the ranks of one node: the scaling points say how many nodes
        # they span.
        LOCAL_WORLD_SIZE=str(nproc),
        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
    )
    for local in range(nproc):
        env = dict(base_env, RANK=str(node_rank * nproc + local), LOCAL_RANK=str(local))
        argv = [
            *runner,
            "worker",
            "--device",
            device,
            "--iters",
            str(iters),
            "--warmup",
            str(warmup),
            "--timeout",
            str(int(timeout)),
            "--sizes",
            *[str(s) for s in sizes],
        ]
        if p2p:
            argv.append("--p2p")
        if train:
            argv += ["--train", train]
        if local == 0 and node_rank == 0 and tmp_out:
            argv += ["--out", tmp_out]
        procs.append(
            subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    deadline = time.monotonic() + timeout + 30
    errors = []
    outputs = []
    for local, proc in enumerate(procs):
        try:
            output, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            output, _ = proc.communicate()
            errors.append(f"rank {node_rank * nproc + local}: timed out; {output.strip()[-400:]}")
            continue
        outputs.append(output)
        if proc.returncode != 0:
            errors.append(
                f"rank {node_rank * nproc + local}: exit {proc.returncode}: {output.strip()[-600:]}"
            )
    # The ranks' NCCL log (their output: NCCL prints to stdout); gloo on CPU ranks has none.
    nccl_log = "".join(outputs)[:NCCL_LOG_MAX_BYTES] if device == "cuda" else None
    base = {
        "engine": f"torch-{'nccl' if device == 'cuda' else 'gloo'}",
        "ranks": world,
        "device": device,
        "rows": [],
        "p2p_gbps": None,
    }
    if nccl_log is not None:
        base["nccl_log"] = nccl_log
    if errors:
        return {**base, "error": "; ".join(errors)}
    if node_rank == 0 and tmp_out:
        try:
            with open(tmp_out, encoding="utf-8") as handle:
                loaded = json.load(handle)
        except (OSError, ValueError) as err:
            return {**base, "error": f"rank 0 wrote no result: {err}"}
        if nccl_log is not None and isinstance(loaded, dict):
            loaded["nccl_log"] = nccl_log
        return loaded
    return {**base, "error": None}


def free_port() -> int:
    """A free TCP port on this host for a node-local rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find_nccl_tests() -> str | None:
    """The all_reduce_perf binary, if installed."""
    for candidate in NCCL_TESTS_CANDIDATES:
        found = (
            shutil.which(candidate)
            if "/" not in candidate
            else (candidate if os.access(candidate, os.X_OK) else None)
        )
        if found:
            return found
    return None


def run_nccl_tests(
    binary: str, ngpus: int, sizes: list[int], iters: int, warmup: int, factor: int, timeout: float
) -> dict[str, Any]:
    """all_reduce_perf over the node's GPUs; the text is parsed on the control machine."""
    argv = [
        binary,
        "-b",
        str(min(sizes)),
        "-e",
        str(max(sizes)),
        "-f",
        str(factor),
        "-g",
        str(ngpus),
        "-c",
        "1",
        "-n",
        str(iters),
        "-w",
        str(warmup),
    ]
    rc, stdout, stderr = sh(argv, timeout=timeout, env=nccl_debug_env(dict(os.environ)))
    return {
        "engine": "nccl-tests",
        "ranks": ngpus,
        "device": "cuda",
        "command": argv,
        "exit_code": rc,
        "raw_output": stdout + stderr,
        "rows": [],
        "p2p_gbps": None,
        "error": None if rc == 0 else f"all_reduce_perf exited {rc}",
    }
