"""What one node's acceptance result says, in the shape the reports and the node state read.

Pure functions over the runner's ``result.json`` (a dict): the training-shaped measurements,
the all-reduce row the floors judge, the transport NCCL's log names, and the digest that names
a result in the node state and the certificate; and one node's entry of a run's summary
(:func:`node_summary`), the shape every report reads.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from toolkit.acceptance import nccllog, topology
from toolkit.acceptance.perf_checks import normalise_allreduce
from toolkit.acceptance.plan import NodePlan
from toolkit.stack.check import security_report
from toolkit.stack.models import Stack


def training_summary(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The training-shaped measurements of one node for the reports: the random reads'
    latency (with its histogram), the checkpoint round trip, the loop and the scaling curve."""
    if not result or result.get("storage") is None:
        return None
    reads = (result.get("storage") or {}).get("reads") or {}
    ckpt = result.get("checkpoint") or {}
    train = result.get("train") or {}
    return {
        "reads": {
            k: reads.get(k)
            for k in (
                "cache",
                "reads",
                "workers",
                "min_read_bytes",
                "max_read_bytes",
                "p50_ms",
                "p99_ms",
                "max_ms",
                "files_per_s",
                "mbps",
                "histogram",
            )
        },
        "checkpoint": {
            k: ckpt.get(k)
            for k in (
                "bytes",
                "tensors",
                "write_s",
                "write_mbps",
                "restore_s",
                "restore_mbps",
                "identical",
                "fresh_process",
                "error",
            )
        },
        "loop": train.get("loop"),
        "scaling": (train.get("scaling") or {}).get("points") or [],
        "error": (result.get("storage") or {}).get("error") or train.get("error"),
    }


def largest_row(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The all-reduce row of the largest message size (the one the floors judge)."""
    return max(rows, key=lambda r: r["size_bytes"]) if rows else None


def fabric_summary(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """The host-to-container contract of one node's run (``node_runner.fabric``): the RDMA
    device files the host has and those the ranks saw in the container, what was missing, and
    GPUDirect RDMA's kernel side; None from a runner without it."""
    fabric = (result or {}).get("fabric")
    if not isinstance(fabric, dict):
        return None

    def paths(side: dict[str, Any] | None) -> list[str] | None:
        if not isinstance(side, dict):
            return None
        return [str(f.get("path")) for f in side.get("rdma_files") or []]

    host = fabric.get("host") or {}
    compared = fabric.get("check") or {}
    gpudirect = host.get("gpudirect") or {}
    return {
        "rdma_devices": list(host.get("rdma_devices") or []),
        "host_rdma_files": paths(host),
        "container_rdma_files": paths(fabric.get("container")),
        "missing": list(compared.get("missing") or []),
        "gpudirect_missing": gpudirect.get("missing"),
    }


def transport_summary(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the all-reduce's NCCL log says it ran over (None: no log, as gloo on the CPU)."""
    summary = nccllog.read_section((result or {}).get("allreduce"))
    return None if summary is None else summary.to_dict()


def digest(document: Any) -> str:
    """``sha256:<hex>`` of a document's canonical JSON."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def busbw_at_largest(plan: NodePlan) -> float | None:
    """The node's bus bandwidth at the largest message size, GB/s (None: no all-reduce row)."""
    rows = normalise_allreduce((plan.result or {}).get("allreduce")).get("rows") or []
    largest = largest_row(rows)
    return largest["busbw_gbps"] if largest else None


def node_summary(plan: NodePlan) -> dict[str, Any]:
    verdict = plan.verdict
    assert verdict is not None
    section = normalise_allreduce((plan.result or {}).get("allreduce"))
    rows = section.get("rows") or []
    state = (plan.result or {}).get("state") or {}
    return {
        "host": plan.host.name,
        "group": plan.group,
        "address": plan.host.address,
        "verdict": verdict.verdict,
        "stack_id": plan.expect.stack_id if plan.expect else None,
        "installed_stack_id": state.get("stack_id"),
        # The security floors the pinned stack is below (toolkit/stack/security.yml), accepted
        # or not: informational, the verdict does not use them.
        "security": _security(plan),
        "checks": [c.to_dict() for c in verdict.checks],
        "failed_checks": verdict.to_dict()["failed_checks"],
        "failure_class": verdict.failure_class,
        # The host-to-container contract: what the host has, what the ranks saw.
        "fabric": fabric_summary(plan.result),
        # passed, failed and not measured (never counted as passed), and why each was not.
        "outcomes": verdict.counts(),
        "not_measured_checks": verdict.to_dict()["not_measured_checks"],
        "engine": section.get("engine"),
        "allreduce_rows": [
            {k: r.get(k) for k in ("size_bytes", "time_us", "algbw_gbps", "busbw_gbps", "wrong")}
            for r in rows
        ],
        "busbw_at_largest_gbps": busbw_at_largest(plan),
        "floors": [
            {"size_bytes": f.size_bytes, "min_busbw_gbps": f.min_busbw_gbps}
            for f in plan.spec.allreduce
        ],
        "training": training_summary(plan.result),
        # The topology matrix and the pairs that broke a rule (None: no topology section).
        "topology": topology.report((plan.result or {}).get("topology"), plan.spec.topology),
        # What the all-reduce's NCCL log says it ran over (None: no log, as gloo on the CPU).
        "transport": transport_summary(plan.result),
        "results_digest": digest(plan.result) if plan.result else None,
        "duration_s": (plan.result or {}).get("duration_s"),
        "error": plan.error,
        "written": plan.written,
        "state": plan.state,
        "certificate": str(plan.certificate) if plan.certificate else None,
        "certificate_note": plan.certificate_note,
        "not_tested": plan.not_tested,
        "job": plan.job,
    }


def _security(plan: NodePlan) -> list[dict[str, str]] | None:
    return security_report(plan.stack, plan.host.vars) if isinstance(plan.stack, Stack) else None
