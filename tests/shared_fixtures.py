"""What several test tiers share: the repository's root, which Python has torch, lab facts, a
healthy node's training sections and the checks the lab judges on them, and a recorder of the
progress lines a phase says.

(A module of its own, not conftest.py: several conftest modules share that name.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def torch_python() -> str | None:
    """A Python that imports torch: ``$GPUNODE_TORCH_PYTHON``, else this one, else None."""
    for python in (os.environ.get("GPUNODE_TORCH_PYTHON"), sys.executable):
        if (
            python
            and subprocess.run(
                [python, "-c", "import torch"], capture_output=True, check=False
            ).returncode
            == 0
        ):
            return python
    return None


def lab_driver_packages() -> list[str]:
    """The driver packages the lab's nodes (debian12) get for its stack: the names the naming
    rules give, then the parts of their build they pin exactly, as the stack lock adds them
    (``IndexEntry.exact_depends``; apt cannot install an older build without them)."""
    from toolkit.lab import catalog
    from toolkit.lab.inventory import DEFAULT_STACK
    from toolkit.profile.hardware import HardwareProfile
    from toolkit.stack.aptindex import IndexEntry
    from toolkit.stack.models import Stack
    from toolkit.stack.resolve import resolve

    stack = Stack.model_validate(DEFAULT_STACK)
    hardware = HardwareProfile.model_validate({"gpu": {"model": "H100", "count": 8}})
    driver = resolve(stack, hardware, "debian12")["driver"]["packages"]
    version = str(driver["nvidia-driver"]).replace("-*", "-1")
    specs = {(s.name, s.version): s for s in catalog.packages()}
    names = list(driver)
    for name in names:  # grows while it is read: the companions' companions
        spec = specs[(name, version)]
        entry = IndexEntry(name, version, spec.architecture, "", "", ", ".join(spec.depends))
        names += [n for n, v in entry.exact_depends() if v == version and n not in names]
    return names


# The training-shaped checks (issue 13) that the lab's floors judge on every node.
TRAINING_CHECKS = frozenset(
    {
        "storage.read_p99",
        "storage.files_per_s",
        "checkpoint.roundtrip",
        "checkpoint.write",
        "checkpoint.restore",
        "train.data_wait",
        "train.gpu_util",
        "scaling.efficiency",
    }
)


def healthy_training(p99_ms: float = 4.0, latencies: list[float] | None = None) -> dict[str, Any]:
    """The runner's training sections of a healthy lab node (each call a fresh copy).

    ``p99_ms`` and ``latencies`` (every read's time, ms) make its storage as slow as given; by
    default 160 reads, the slowest ten at ``p99_ms``."""
    from toolkit.acceptance.node_runner.storage import latency_histogram

    latencies = latencies or [0.3] * 150 + [p99_ms] * 10
    return {
        "storage": {
            "path": "/data/.gpunode-accept-train-1",
            "dataset": {"files": 32, "file_bytes": 1 << 20, "write_s": 0.2},
            "reads": {
                "cache": "o_direct",
                "reads": len(latencies),
                "workers": 4,
                "min_read_bytes": 4096,
                "max_read_bytes": 1 << 20,
                "p50_ms": 0.3,
                "p99_ms": p99_ms,
                "max_ms": max(latencies),
                "files_per_s": 4000.0,
                "mbps": 900.0,
                "histogram": latency_histogram(latencies),
                "error": None,
            },
            "error": None,
        },
        "checkpoint": {
            "bytes": 16 << 20,
            "tensors": 9,
            "write_s": 0.1,
            "write_mbps": 160.0,
            "restore_s": 0.04,
            "restore_mbps": 400.0,
            "identical": True,
            "mismatched": [],
            "missing": [],
            "unexpected": [],
            "fresh_process": True,
            "error": None,
        },
        "train": {
            "checkpoint": None,
            "loop": {
                "ranks": 2,
                "device": "cpu",
                "steps": 5,
                "batch": 4,
                "loader_workers": 1,
                "samples_per_s": 150.0,
                "data_wait_share": 0.04,  # healthy lab node with the emulated compute: 0.013-0.038
                "gpu_util": {"measured": False, "reason": "CPU ranks", "per_gpu": {}},
            },
            "scaling": {
                "points": [
                    {"ranks": 1, "samples_per_s": 100.0, "efficiency": 1.0},
                    {"ranks": 2, "samples_per_s": 150.0, "efficiency": 0.75},
                ]
            },
            "error": None,
        },
    }


def run_cli(capsys: Any, *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process through its error boundary: (exit code, stdout, stderr).

    ``capsys`` is pytest's capture fixture of the calling test."""
    import pytest

    from toolkit import cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(list(args))
    captured = capsys.readouterr()
    code = exit_info.value.code
    return (code if isinstance(code, int) else 1), captured.out, captured.err


class Recorder:
    """A ``say`` (progress) that keeps each line with the time it was said."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def __call__(self, message: str) -> None:
        with self._lock:
            self.lines.append((time.monotonic(), message))

    @property
    def text(self) -> list[str]:
        return [line for _at, line in self.lines]


def heartbeat_threads() -> list[threading.Thread]:
    """The heartbeats still running (``toolkit.progress`` names their threads so)."""
    return [t for t in threading.enumerate() if t.name.startswith("heartbeat ")]
