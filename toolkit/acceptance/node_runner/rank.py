"""One rank (``worker``, started by :func:`.collective.launch_ranks`): the timed and checked
all-reduce per size, two-node p2p, then the training-shaped checks (:func:`.train.train_phase`)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from .collective import (
    P2P_MAX_BYTES,
    busbw_factor,
    check_pattern,
    fill_pattern,
    reduced_scale,
    timed_allreduce,
)
from .common import import_torch, write_json
from .probe import nccl_probe
from .train import train_phase


def worker(args: argparse.Namespace) -> int:
    """One rank: time the all-reduce per size, check the reduced values, time p2p if asked."""
    torch = import_torch()
    if torch is None:
        print("torch is not installed", file=sys.stderr)
        return 3
    import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda"
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    from datetime import timedelta

    dist.init_process_group(
        backend=backend, rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout)
    )

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize(device)

    rows = []
    factor = busbw_factor(world)
    # Correctness on a pattern whose sum is known exactly, written into the timed buffer
    # itself (a 16 GiB message must not need more 16 GiB tensors). Where float32 adds up every
    # timed round exactly (reduced_scale), the timed rounds reduce the pattern and are checked
    # (no pass of their own); else one more all-reduce of the pattern is.
    timed_scale = reduced_scale(world, args.warmup + args.iters)
    for size in args.sizes:
        count = max(1, size // 4)
        scratch = torch.empty(count, dtype=torch.float32, device=device)
        if timed_scale is not None:
            fill_pattern(torch, scratch, float(rank + 1))
        else:
            scratch.zero_()
        elapsed = timed_allreduce(torch, dist, scratch, args.iters, args.warmup, device)
        if timed_scale is None:
            fill_pattern(torch, scratch, float(rank + 1))
            dist.all_reduce(scratch)
        wrong, max_err = check_pattern(torch, scratch, timed_scale or world * (world + 1) / 2.0)
        # The slowest rank's time is the collective's time.
        t = torch.tensor([elapsed], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        w = torch.tensor([wrong], dtype=torch.int64, device=device)
        dist.all_reduce(w)
        elapsed = float(t.item())
        algbw = count * 4 / elapsed / 1e9
        rows.append(
            {
                "size_bytes": count * 4,
                "time_us": elapsed * 1e6,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * factor,
                "wrong": int(w.item()),
                "max_abs_error": max_err,
                "correct": int(w.item()) == 0,
            }
        )
        del scratch
    p2p = None
    if args.p2p and world == 2:
        p2p = {}
        size = min(args.sizes[-1], P2P_MAX_BYTES)
        buf = torch.zeros(max(1, size // 4), dtype=torch.float32, device=device)
        for src in (0, 1):
            dist.barrier()
            sync()
            start = time.perf_counter()
            for _ in range(args.iters):
                if rank == src:
                    dist.send(buf, dst=1 - src)
                else:
                    dist.recv(buf, src=src)
            sync()
            # A send may return before the bytes arrive: the receiver's clock counts.
            t = torch.tensor(
                [time.perf_counter() - start if rank != src else 0.0],
                dtype=torch.float64,
                device=device,
            )
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            p2p[f"{src}->{1 - src}"] = buf.numel() * 4 * args.iters / float(t.item()) / 1e9
    train = None
    if args.train:
        with open(args.train, encoding="utf-8") as handle:
            train_spec = json.load(handle)
        started = time.perf_counter()
        try:
            per_node = int(os.environ.get("LOCAL_WORLD_SIZE") or world)
            train = train_phase(
                torch, dist, rank, world, per_node, device, train_spec, shutil.which("nvidia-smi")
            )
        except Exception as err:
            train = {"checkpoint": None, "loop": None, "scaling": None}
            train["error"] = f"rank {rank}: {type(err).__name__}: {err}"[:600]
        if train is not None:
            train["duration_s"] = time.perf_counter() - started
    dist.destroy_process_group()
    if rank == 0 and args.out:
        result = {
            "engine": f"torch-{backend}",
            "backend": backend,
            "ranks": world,
            "device": "cuda" if use_cuda else "cpu",
            "rows": rows,
            "p2p_gbps": p2p,
            "error": None,
            "torch": torch.__version__,
            "nccl": nccl_probe(torch),
            "train": train,
        }
        write_json(args.out, result)
    return 0
