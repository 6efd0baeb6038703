"""``gpunode up``: what counts as proven, the outcome document, the readiness table."""

from __future__ import annotations

from datetime import datetime, timezone
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from toolkit.cli.up import brief, readiness_table
from toolkit.node.nodestate import proven_provisioned, proven_ready
from toolkit.steps.up import NodeUp, StageResult, UpOutcome

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
READY = {
    "state": "ready",
    "reason": [],
    "stack_id": "s1",
    "valid_until": "2026-12-02T00:00:00+00:00",
}


@pytest.mark.parametrize(
    ("change", "drift", "proven"),
    [
        ({}, [], True),
        ({}, ["n1: libnccl2 2.26.2 installed, 2.21.5 pinned"], False),
        ({"stack_id": "s0"}, [], False),
        ({"state": "not-ready"}, [], False),
        ({"valid_until": "2026-12-01T11:59:59+00:00"}, [], False),  # expired
        ({"valid_until": None}, [], False),
        ({"valid_until": "soon"}, [], False),
    ],
)
def test_proven_ready(change: dict[str, Any], drift: list[str], proven: bool) -> None:
    assert proven_ready({**READY, **change}, "s1", drift, NOW) is proven


@pytest.mark.parametrize(
    ("state", "drift", "proven"),
    [
        ({"state": "provisioned", "stack_id": "s1", "reason": []}, [], True),
        ({"state": "not-ready", "stack_id": "s1", "reason": ["health.ecc: 3"]}, [], True),
        ({"state": "provisioned", "stack_id": "s0", "reason": []}, [], False),
        ({"state": "provisioned", "stack_id": "s1", "reason": []}, ["drift"], False),
        ({"state": "new", "reason": []}, [], False),
        (
            {
                "state": "provisioned",
                "stack_id": "s1",
                "reason": ["needs reboot: loaded 550"],
                "reboot_pending": {"loaded": "550.127.05", "installed": "580.95.05"},
            },
            [],
            False,
        ),
        (  # a provision was interrupted: its standing is suspended
            {"state": "not-ready", "stack_id": "s1", "reason": [], "suspended": {"state": "ready"}},
            [],
            False,
        ),
    ],
)
def test_proven_provisioned(state: dict[str, Any], drift: list[str], proven: bool) -> None:
    assert proven_provisioned(state, "s1", drift) is proven


def _outcome() -> UpOutcome:
    ok = NodeUp(host="lab-node-1", stack_id="s1", state=dict(READY), now=NOW)
    ok.stages = {
        "disks": StageResult("done", "in place", 3.0),
        "provision": StageResult("done", "changed 39", 50.0),
        "accept": StageResult("done", "busbw 0.92 GB/s at the largest size", 6.0),
    }
    bad = NodeUp(
        host="lab-node-2",
        stack_id="s1",
        state={"state": "not-ready", "stack_id": "s1", "reason": ["health.ecc: 3 uncorrectable"]},
    )
    bad.stages = {
        "disks": StageResult("skipped", "provisioned with s1"),
        "provision": StageResult("skipped", "provisioned with s1"),
        "accept": StageResult("failed", "health.ecc: 3 uncorrectable ECC errors on GPU 2", 6.0),
    }
    refused = NodeUp(host="lab-node-3", stack_id="s1", state={"state": "new", "reason": []})
    refused.stages = {"disks": StageResult("failed", "S9: carries an xfs filesystem", 2.0)}
    return UpOutcome(
        run_id="r",
        run_dir=Path("/tmp/r"),
        inventory=Path("inv"),
        started="s",
        finished="f",
        elapsed_s=60.04,
        nodes={n.host: n for n in (ok, bad, refused)},
    )


def test_outcome_document() -> None:
    outcome = _outcome()
    assert not outcome.all_ready
    document = outcome.to_dict()
    assert document["elapsed_s"] == 60.0
    assert document["nodes"]["lab-node-1"]["ready"] is True
    assert document["nodes"]["lab-node-2"]["failed_stage"] == "accept"
    assert document["nodes"]["lab-node-3"]["failed_stage"] == "disks"
    assert document["nodes"]["lab-node-3"]["stages"]["disks"]["status"] == "failed"


def test_a_node_ends_ready_only_while_its_verdict_proves_it() -> None:
    """`up` reports a node by the rule `status` shows and the survey skips by
    (toolkit.node.nodestate): a ready file whose verdict expired, or that was accepted for
    another stack or image, ends not-ready, with why."""
    fresh = NodeUp(host="n1", stack_id="s1", state=dict(READY), image_id="sha256:a", now=NOW)
    fresh.state["image_id"] = "sha256:a"
    assert fresh.ready and fresh.to_dict()["state"] == "ready"
    later = datetime(2026, 12, 2, 1, 0, tzinfo=timezone.utc)
    expired = NodeUp(host="n1", stack_id="s1", state=dict(READY), now=later)
    assert not expired.ready
    assert expired.to_dict()["state"] == "not-ready"
    assert expired.to_dict()["reason"] == ["the verdict expired at 2026-12-02T00:00:00+00:00"]
    other_image = NodeUp(host="n1", stack_id="s1", state=dict(READY), image_id="sha256:b", now=NOW)
    assert other_image.to_dict()["reason"] == ["accepted in image None, current image sha256:b"]
    assert not NodeUp(host="n1", stack_id="s2", state=dict(READY), now=NOW).ready


def test_readiness_table_fits_80_columns() -> None:
    buffer = StringIO()
    Console(file=buffer, width=80).print(readiness_table(_outcome().to_dict()))
    lines = buffer.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines)
    text = buffer.getvalue()
    assert "lab-node-3" in text and "disks: S9: carries" in text
    row = next(line for line in lines if "lab-node-2" in line)
    assert "skip" in row and "FAIL" in row and "not-ready" in row


LONG_REASONS = {
    "busbw 0.708 GB/s at the largest size": "busbw 0.708 GB/s",
    "perf.allreduce: busbw 0.708 GB/s < floor 1.0 GB/s at 8 MiB": "0.708 GB/s",
    "perf.gemm: 312.5 TFLOPS < floor 400 TFLOPS on GPU 3": "312.5 TFLOPS",
    "health.ecc: 3 uncorrectable ECC errors on GPU 2": "health.ecc: 3",
    "gpunode[hardware]: health.xid: xid 79 on GPU 0000:17:00.0": "gpunode[hardware]:",
}


@pytest.mark.parametrize(("detail", "kept"), LONG_REASONS.items())
def test_a_cut_reason_keeps_its_figure(detail: str, kept: str) -> None:
    cut = brief(detail, 26)
    assert len(cut) <= 26 and cut.endswith("…")
    assert kept in cut
    assert brief("in place", 26) == "in place"


def test_the_readiness_table_shows_each_figure_at_80_columns() -> None:
    outcome = _outcome()
    for index, detail in enumerate(LONG_REASONS):
        host = f"a-long-host-nam-{index:02d}"  # 18 characters, the table's design width
        node = NodeUp(host=host, stack_id="s1", state=dict(READY), now=NOW)
        node.stages = {"accept": StageResult("done", detail, 6.0)}
        outcome.nodes[host] = node
    buffer = StringIO()
    Console(file=buffer, width=80).print(readiness_table(outcome.to_dict(), 80))
    lines = buffer.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    for index, kept in enumerate(LONG_REASONS.values()):
        row = next(line for line in lines if f"a-long-host-nam-{index:02d}" in line)
        assert kept in row, row
    wide = StringIO()
    Console(file=wide, width=120).print(readiness_table(outcome.to_dict(), 120))
    assert "busbw 0.708 GB/s at the largest size" in wide.getvalue()
