"""The runner's command line (see the package's docstring for the subcommands); exit codes: 0 the
result was written (whatever it says), 2 bad arguments, 3 it could not run."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any

from .collective import launch_ranks
from .common import import_torch, torch_installed, write_json
from .fabric import compare, container_view, fabric_error
from .probe import nccl_probe
from .rank import worker
from .storage import remove_storage
from .train import prepare_loop


def main(argv: list[str] | None = None) -> int:
    """Entry point of the runner."""
    parser = argparse.ArgumentParser(prog="gpunode-node-runner")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("--spec", required=True)
    p_run.add_argument("--out", required=True)
    p_framework = sub.add_parser("framework", help="the framework's checks only (in an image)")
    p_framework.add_argument("--spec", required=True)
    p_framework.add_argument("--out", required=True)
    sub.add_parser("nccl-probe", help="print which NCCL the framework loads, as JSON")
    for name in ("allreduce", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--sizes", type=int, nargs="*", required=True)
        p.add_argument("--iters", type=int, default=20)
        p.add_argument("--warmup", type=int, default=5)
        p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
        p.add_argument("--timeout", type=float, default=600)
        p.add_argument("--p2p", action="store_true")
        p.add_argument("--train", help="spec file of the training-shaped checks (JSON)")
        p.add_argument("--out")
        if name == "allreduce":
            p.add_argument(
                "--train-from",
                help="the node's runner spec (JSON): write the loop's data set on its data "
                "path and run the loop at every scaling point across the nodes",
            )
            p.add_argument("--nnodes", type=int, required=True)
            p.add_argument("--node-rank", type=int, required=True)
            p.add_argument("--nproc", type=int, default=0, help="0: one per GPU, else CPU ranks")
            p.add_argument("--master-addr", required=True)
            p.add_argument("--master-port", type=int, required=True)
            p.add_argument(
                "--host-fabric",
                help="the host's side of the host-to-container contract (JSON, "
                "fabric.host_fabric): the ranks start only if they see it all",
            )
    args = parser.parse_args(argv)
    if args.cmd in ("run", "framework"):
        try:
            with open(args.spec, encoding="utf-8") as handle:
                spec = json.load(handle)
        except (OSError, ValueError) as err:
            print(f"cannot read spec {args.spec}: {err}", file=sys.stderr)
            return 2
        # Only a node's run needs the node's checks (facts, GPUs): a rank starts without them.
        from .node import run_framework, run_node

        write_json(args.out, run_node(spec) if args.cmd == "run" else run_framework(spec))
        return 0
    if args.cmd == "worker":
        return worker(args)
    if args.cmd == "nccl-probe":
        print(json.dumps(nccl_probe(import_torch()), sort_keys=True))
        return 0
    if getattr(args, "host_fabric", None):
        stopped = _fabric_stop(args.host_fabric)
        if stopped is not None:
            if args.out:
                write_json(args.out, stopped)
            return 0
    # The ranks import torch themselves; this process asks it only for the GPUs when they
    # decide the device or the number of ranks (an import of torch takes seconds).
    device = args.device
    counts_gpus = device == "auto" or (device == "cuda" and not args.nproc)
    torch = import_torch() if counts_gpus else None
    installed = torch is not None if counts_gpus else torch_installed()
    cuda_gpus = 0
    if torch is not None and torch.cuda.is_available():
        cuda_gpus = torch.cuda.device_count()
    if device == "auto":
        device = "cuda" if cuda_gpus else "cpu"
    nproc = args.nproc or cuda_gpus or 1
    loop: dict[str, Any] = {"storage": None, "file": args.train, "error": None}
    if not installed:
        result: dict[str, Any] = {"engine": "torch", "rows": [], "error": "torch is not installed"}
    else:
        if args.train_from:
            loop = prepare_loop(args.train_from, args.sizes)
        out_file = f"{args.out}.rank0" if args.out else None
        result = launch_ranks(
            args.nnodes,
            args.node_rank,
            nproc,
            args.master_addr,
            args.master_port,
            args.sizes,
            args.iters,
            args.warmup,
            device,
            args.timeout,
            out_file,
            p2p=args.p2p,
            train=loop["file"],
        )
        if loop["error"] and result.get("train") is None:
            result["train"] = {"error": loop["error"]}
        remove_storage(loop["storage"])
        if args.train_from and loop["file"]:
            with contextlib.suppress(OSError):
                os.unlink(loop["file"])
    if args.out:
        write_json(args.out, result)
    return 0


def _fabric_stop(path: str) -> dict[str, Any] | None:
    """The all-reduce's result when the ranks' container lacks what the host has (a harness
    error naming it), else None: the ranks may start."""
    try:
        with open(path, encoding="utf-8") as handle:
            host = json.load(handle)
    except (OSError, ValueError) as err:
        return {"engine": "torch", "rows": [], "error": f"harness: cannot read {path}: {err}"}
    seen = container_view()
    compared = compare(host, seen)
    if compared["ok"]:
        return None
    return {
        "engine": "torch",
        "rows": [],
        "error": fabric_error(compared),
        "fabric": {"container": seen, "check": compared},
    }


if __name__ == "__main__":
    sys.exit(main())
