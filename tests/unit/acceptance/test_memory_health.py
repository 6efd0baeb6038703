"""The memory-error rules (``memory_health.py``) against real ``nvidia-smi -q`` captures
(tests/data/real/SOURCES.md), read by the runner's own parser.

No public capture found has a GPU with rows remapped long ago (uncorrectable rows above 0,
nothing pending) or a recovery action other than None: those cases edit the counters of the
real H100 capture and say so.
"""

from __future__ import annotations

from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.acceptance import memory_health
from toolkit.facts import nvidia

REAL = REPO / "tests" / "data" / "real"
H100 = "nvidia-smi-q.h100-sxm-8.565.57.01.txt"


def _gpus(text: str) -> list[dict[str, Any]]:
    """The runner's per-GPU records (the memory part) of a ``-q`` capture."""
    trees = nvidia.parse_smi_q(text)
    return [
        {"index": i, "bus_id": bus, **nvidia.memory_health(tree)}
        for i, (bus, tree) in enumerate(trees.items())
    ]


def _findings(text: str) -> dict[str, memory_health.Finding]:
    return {f.check: f for f in memory_health.judge(_gpus(text))}


def _edit_first_gpu(old: str, new: str) -> str:
    """The real H100 capture with one line of its first GPU changed."""
    text = (REAL / H100).read_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    "capture",
    [H100, "nvidia-smi-q.h100-sxm-8.535.161.08.txt", "nvidia-smi-q.titan-v.560.35.03.txt"],
)
def test_clean_real_captures_pass_every_rule(capture: str) -> None:
    findings = _findings((REAL / capture).read_text())
    assert set(findings) == {
        "health.ecc",
        "health.row_remap",
        "health.retired_pages",
        "health.recovery_action",
    }
    assert all(f.ok for f in findings.values()), findings


def test_real_a10_pending_remap_is_not_ready() -> None:
    findings = _findings((REAL / "nvidia-smi-q.a10.535.129.03.txt").read_text())
    remap = findings["health.row_remap"]
    assert not remap.ok
    assert remap.measured == [
        "GPU 0 (00000000:07:00.0): remapped_rows.pending = Yes: a row remap waits for the next "
        "GPU reset: reset the GPU (rule: NVIDIA GPU Memory Error Management, Error Recovery "
        "and Response Flags; Meta GCM row_remap)"
    ]
    # Its volatile count is 0: the ECC rule passes; the 4 remapped rows are shown.
    assert findings["health.ecc"].ok
    assert "rows remapped (uncorrectable) 4" in findings["health.ecc"].message


def test_edited_h100_remapped_long_ago_passes() -> None:
    """Edited: the first GPU's aggregate DRAM count and remapped rows raised, as after an
    error that was remapped and reset long ago (volatile 0, nothing pending)."""
    text = _edit_first_gpu(
        "            DRAM Uncorrectable            : 0\n"
        "            SRAM Threshold Exceeded       : No",
        "            DRAM Uncorrectable            : 2\n"
        "            SRAM Threshold Exceeded       : No",
    )
    text = text.replace(
        "        Uncorrectable Error               : 0",
        "        Uncorrectable Error               : 1",
        1,
    )
    gpus = _gpus(text)
    assert gpus[0]["ecc_uncorrected_aggregate"] == 2 and gpus[0]["ecc_uncorrected_volatile"] == 0
    findings = {f.check: f for f in memory_health.judge(gpus)}
    assert all(f.ok for f in findings.values()), findings
    assert (
        "GPU 0 (00000000:18:00.0): aggregate uncorrectable ECC 2, rows remapped (uncorrectable) 1"
        in findings["health.ecc"].message
    )


@pytest.mark.parametrize(
    ("old", "new", "check", "text"),
    [
        (
            "    GPU Recovery Action                   : None",
            "    GPU Recovery Action                   : Reset",
            "health.recovery_action",
            "gpu_recovery_action = Reset: the driver asks for this recovery action",
        ),
        (
            "        Remapping Failure Occurred        : No",
            "        Remapping Failure Occurred        : Yes",
            "health.row_remap",
            "remapped_rows.failure = Yes: a row remapping failed: the GPU meets NVIDIA's RMA",
        ),
        (
            "            SRAM Uncorrectable SEC-DED    : 0",
            "            SRAM Uncorrectable SEC-DED    : 1",
            "health.ecc",
            "ecc.errors.uncorrected.volatile.total = 1",
        ),
    ],
)
def test_edited_h100_counters_fail_naming_counter_and_rule(
    old: str, new: str, check: str, text: str
) -> None:
    """Edited: one counter of the first GPU of the real H100 capture."""
    findings = _findings(_edit_first_gpu(old, new))
    failed = {name for name, f in findings.items() if not f.ok}
    assert failed == {check}, findings
    (reason,) = findings[check].measured
    assert reason.startswith("GPU 0 (00000000:18:00.0): ") and text in reason
    assert "(rule: " in reason
