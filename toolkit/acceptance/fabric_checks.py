"""The host-to-container contract as checks (design.md): what the ranks saw inside the
container against what the host has (``node_runner.fabric``), and GPUDirect RDMA's kernel side.

- ``container.fabric``: every RDMA device file (``/dev/infiniband/uverbs*``, ``rdma_cm``) and
  GPU device file of the host reached the ranks, with ``IPC_LOCK`` or an unlimited memlock
  limit where there are RDMA devices. A miss is a harness problem (``failure.py``) naming what
  is missing: the node is not blamed for a container that was not given its fabric.
- ``gpudirect.kernel``: ``nvidia_peermem`` loaded, or DMA-BUF possible. Shown on every node
  with RDMA devices; judged only where the profile requires ``transport.gpudirect_rdma``.
"""

from __future__ import annotations

from typing import Any

from toolkit.acceptance.check import Check, not_measured
from toolkit.profile.floors import AcceptanceSpec

CONTAINER_FABRIC = "container.fabric"
GPUDIRECT_KERNEL = "gpudirect.kernel"


def _names(files: list[dict[str, Any]] | None) -> str:
    names = [str(f.get("path", "")).rsplit("/", 1)[-1] for f in files or []]
    return ", ".join(names) or "none"


def fabric_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    """The contract's checks from one node's runner result (none from a runner that predates
    them, and no ``container.fabric`` where the ranks ran on the host)."""
    fabric = result.get("fabric")
    if not isinstance(fabric, dict):
        return []
    host = fabric.get("host") or {}
    checks: list[Check] = []
    compared = fabric.get("check")
    if isinstance(compared, dict):
        seen = fabric.get("container") or {}
        if compared.get("ok") and not (host.get("rdma_files") or host.get("gpu_files")):
            # Two empty lists agree, but nothing reached the ranks that could be compared.
            reason = "the host has no RDMA or GPU device files to compare"
            checks.append(not_measured(CONTAINER_FABRIC, reason, f"not measured: {reason}"))
        elif compared.get("ok"):
            message = (
                f"the ranks saw the host's RDMA devices ({_names(host.get('rdma_files'))}) and "
                f"{len(host.get('gpu_files') or [])} GPU device file(s)"
            )
            if host.get("rdma_files"):
                message += ", with IPC_LOCK" if seen.get("ipc_lock") else ", with unlimited memlock"
            checks.append(
                Check(CONTAINER_FABRIC, True, message, measured=_names(seen.get("rdma_files")))
            )
        else:
            missing = list(compared.get("missing") or [])
            checks.append(
                Check(
                    CONTAINER_FABRIC,
                    False,
                    "the ranks' container lacks " + "; ".join(missing) + " (the host has them)",
                    measured=missing,
                )
            )
    gpudirect = host.get("gpudirect")
    if isinstance(gpudirect, dict):
        missing_gdr = gpudirect.get("missing")
        state = missing_gdr or (
            "nvidia_peermem loaded" if gpudirect.get("nvidia_peermem") else "DMA-BUF"
        )
        required = spec.transport is not None and spec.transport.gpudirect_rdma == "required"
        if required:
            checks.append(
                Check(
                    GPUDIRECT_KERNEL,
                    missing_gdr is None,
                    f"GPUDirect RDMA's kernel side: {state}",
                    measured=state,
                )
            )
        else:
            checks.append(
                not_measured(
                    GPUDIRECT_KERNEL,
                    "the profile does not require transport.gpudirect_rdma",
                    f"not judged (the profile does not require transport.gpudirect_rdma): {state}",
                    measured=state,
                )
            )
    return checks
