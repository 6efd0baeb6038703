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
from collections.abc import Iterator
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


PATTERN_PERIOD = 7


# Elements per step of the pattern: a step's temporaries (the comparison's booleans, and on a
# mismatch the differences) stay a fraction of a 16 GiB message.
PATTERN_CHUNK = 1 << 24


# float32's significand holds every integer up to 2**24 exactly (IEEE 754 binary32).
FLOAT32_EXACT_INTEGERS = 1 << 24


P2P_MAX_BYTES = 256 << 20


def reduced_scale(world: int, rounds: int) -> float | None:
    """The scale of the pattern after ``rounds`` all-reduces (sum) of a buffer in which rank
    ``r`` put ``r + 1`` times it, or None when float32 could not add it up exactly.

    The first round gives ``world * (world + 1) / 2`` times the pattern on every rank, each
    later one ``world`` times what every rank then holds alike. All values are positive
    integers, so every partial sum a backend forms, in whatever order or grouping it adds, is
    an integer no larger than the last round's largest element, ``7 * scale``: while that is at
    most 2**24, float32 holds every one of them exactly and the check may demand equality.
    """
    if rounds < 1:
        return None
    scale = world * (world + 1) // 2 * world ** (rounds - 1)
    return float(scale) if PATTERN_PERIOD * scale <= FLOAT32_EXACT_INTEGERS else None


def pattern_pieces(torch: Any, buf: Any, scale: float) -> Iterator[tuple[Any, Any]]:
    """``buf`` a chunk at a time as views paired with the values the pattern puts there
    (element i: ``scale * (i % 7 + 1)``): a ``(-1, 7)`` view with the 7-value row it repeats,
    then the chunk's last ``< 7`` elements with the row's start; no index tensors."""
    row = torch.arange(1, PATTERN_PERIOD + 1, device=buf.device, dtype=buf.dtype) * scale
    n = buf.numel()
    for start in range(0, n, PATTERN_CHUNK):
        end = min(n, start + PATTERN_CHUNK)
        phased = torch.roll(row, -(start % PATTERN_PERIOD))
        body = start + (end - start) // PATTERN_PERIOD * PATTERN_PERIOD
        if body > start:
            yield buf[start:body].view(-1, PATTERN_PERIOD), phased
        if end > body:
            yield buf[body:end], phased[: end - body]


def fill_pattern(torch: Any, buf: Any, scale: float) -> None:
    """Element i becomes ``scale * (i % 7 + 1)`` (see :func:`pattern_value`), one pass."""
    for view, expected in pattern_pieces(torch, buf, scale):
        view.copy_(expected.expand_as(view))


def check_pattern(torch: Any, buf: Any, scale: float) -> tuple[int, float]:
    """Elements that differ from ``scale * (i % 7 + 1)``, and the largest difference: one
    comparison pass, the differences only where some element is wrong."""
    wrong = 0
    max_err = 0.0
    for view, expected in pattern_pieces(torch, buf, scale):
        bad = int(view.ne(expected).sum().item())
        if bad:
            wrong += bad
            max_err = max(max_err, float((view - expected).abs().max().item()))
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
