"""What several test tiers share: the shared captures, which Python has torch, lab facts.

The captures in ``../shared/fixtures`` beside the repository are not part of the project:
tests read them there and skip cleanly when absent. (A module of its own, not conftest.py:
several conftest modules share that name.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"


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
    from toolkit.stack import HardwareProfile, Stack, resolve
    from toolkit.stack.aptindex import IndexEntry

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
