"""Launching the ranks of a multi-node all-reduce on every member of a set at once, each in
its node's training image (or the host's Python) with the devices its own run found on the host
(``node_runner.fabric``); the sets themselves are ``toolkit.acceptance.multinode``'s."""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Callable, Sequence
from typing import Any

from toolkit.acceptance import payload
from toolkit.acceptance.node_runner.fabric import fabric_options
from toolkit.acceptance.node_runner.node import container_argv
from toolkit.acceptance.plan import NodePlan
from toolkit.acceptance.staging import REMOTE_DIR, container_options, data_path
from toolkit.acceptance.thresholds import sweep_sizes
from toolkit.errors import RemoteError
from toolkit.profile.floors import AcceptanceSpec
from toolkit.progress import Progress

DEFAULT_PORT_BASE = 29500


def container_lacks_fabric(plan: NodePlan) -> bool:
    """Whether the node's own run found its container short of the host's devices."""
    compared = ((plan.result or {}).get("fabric") or {}).get("check")
    return isinstance(compared, dict) and compared.get("ok") is False


_port_lock = threading.Lock()
_port_counter = iter(range(1, 1_000_000))


def set_runner(
    by_name: dict[str, NodePlan], spec: AcceptanceSpec, run_id: str, progress: Progress
) -> Callable[[Sequence[str], bool], dict[str, Any]]:
    sizes = sweep_sizes(spec, multi_node=True)

    def run_set(names: Sequence[str], p2p: bool) -> dict[str, Any]:
        with _port_lock:
            tag = next(_port_counter)
        progress(f"multi-node test {tag}: {' + '.join(names)}")
        members = [by_name[n] for n in names]
        # A fresh port per set: a previous set's listener may linger in TIME_WAIT.
        port = DEFAULT_PORT_BASE + tag % 1000
        return _launch_set(members, sizes, spec, p2p, port, run_id, tag)

    return run_set


def _launch_set(
    members: list[NodePlan],
    sizes: list[int],
    spec: AcceptanceSpec,
    p2p: bool,
    port: int,
    run_id: str,
    tag: int,
) -> dict[str, Any]:
    """Start the ranks of one all-reduce on every member at once; rank 0's section back."""
    master = members[0].address
    out = f"{REMOTE_DIR}/multinode-{tag}.json"
    results: dict[int, Any] = {}
    # The training loop across the nodes, each reading its own data path: only where every
    # member could write its data set in its own run (a member without one would leave the
    # others waiting in the loop's collectives).
    no_data = [p.host.name for p in members if not _wrote_data_set(p)]
    train = "" if no_data else f" --train-from {REMOTE_DIR}/spec.json"

    def launch(index: int) -> None:
        plan = members[index]
        assert plan.node is not None and plan.result is not None
        # No GPU seen by the node's own run: one CPU rank, named so that the launcher does
        # not import torch to count GPUs; with GPUs, one rank per GPU (the launcher counts).
        gpus = int(plan.result.get("cuda_device_count") or 0)
        ranks = "--nproc 0" if gpus else "--nproc 1 --device cpu"
        ifname = plan.host.vars.get("gpunode_accept_socket_ifname")
        env = (
            {"GLOO_SOCKET_IFNAME": str(ifname), "NCCL_SOCKET_IFNAME": str(ifname)} if ifname else {}
        )
        host_fabric = (plan.result.get("fabric") or {}).get("host") or {}
        if plan.image:
            # The site's options, then the node's RDMA devices and IPC_LOCK as its run found
            # them on the host (the contract its own run checked inside the container).
            options = container_options(plan.host) + fabric_options(
                host_fabric.get("rdma_files") or []
            )
            # The node's own IMEX channels, as its run found them on the host.
            channels = [str(c) for c in plan.result.get("imex_channels") or []]
            argv = container_argv(
                plan.image,
                REMOTE_DIR,
                data_path(plan.spec, plan.hardware.data_disks),
                env,
                options,
                channels,
            )
            start = shlex.join(argv)
        else:
            prefix = (
                "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) if env else ""
            )
            start = f"{prefix} {plan.python} {REMOTE_DIR}/{payload.ARCHIVE}".strip()
        check_fabric = ""
        if plan.image and host_fabric:
            # The ranks compare what they see with the host before the all-reduce.
            try:
                plan.node.put_text(json.dumps(host_fabric), f"{REMOTE_DIR}/host-fabric.json")
                check_fabric = f" --host-fabric {REMOTE_DIR}/host-fabric.json"
            except RemoteError as err:
                results[index] = {"error": f"{plan.host.name}: {err}"}
                return
        command = (
            f"{start} allreduce --nnodes {len(members)} "
            f"--node-rank {index} {ranks} --master-addr {shlex.quote(str(master))} "
            f"--master-port {port} --iters {spec.iters} --warmup {spec.warmup_iters} "
            f"--timeout 120 --out {out} --sizes {' '.join(str(s) for s in sizes)}"
            + (" --p2p" if p2p else "")
            + train
            + check_fabric
        )
        try:
            res = plan.node.run(command, timeout=300)
            if not res.ok:
                results[index] = {
                    "error": f"{plan.host.name}: exit {res.returncode}: "
                    f"{(res.stderr or res.stdout)[-400:]}"
                }
                return
            results[index] = json.loads(plan.node.get_text(out))
        except (RemoteError, ValueError) as err:
            results[index] = {"error": f"{plan.host.name}: {err}"}

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(len(members))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [str(r.get("error")) for r in results.values() if r.get("error")]
    section = dict(results.get(0) or {})
    if errors:
        section.update(rows=[], error="; ".join(errors))
    if no_data and not section.get("train"):
        section["train"] = {
            "error": f"no loop across nodes: no data set on {', '.join(no_data)} "
            "(see its storage check)"
        }
    section["run_id"] = run_id
    return section


def _wrote_data_set(plan: NodePlan) -> bool:
    """Whether the node's own run wrote its data set (its storage check says why not)."""
    storage = (plan.result or {}).get("storage") or {}
    return bool(storage) and not storage.get("error")
