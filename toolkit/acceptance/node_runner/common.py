"""What every check of the node-side runner shares: running a command, writing the result,
importing the optional framework, and starting this runner again."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

# The zipapp's file name on a node and in the training image (toolkit.acceptance.payload builds it).
ARCHIVE = "node_runner.pyz"


def now_iso() -> str:
    """The current UTC time, ISO 8601."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def sh(
    argv: list[str] | str, timeout: float = 60.0, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run a command (``env``: its whole environment, None: this one's); never raise for a
    missing binary or a timeout."""
    try:
        proc = subprocess.run(
            argv,
            shell=isinstance(argv, str),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
        )
    except FileNotFoundError as err:
        return 127, "", str(err)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout:.0f}s"
    return proc.returncode, proc.stdout, proc.stderr


def import_torch() -> Any:
    """torch, or None when it is not installed."""
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return torch


def torch_installed() -> bool:
    """Whether torch can be imported, without importing it (that takes seconds)."""
    return importlib.util.find_spec("torch") is not None


def write_json(path: str, document: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a result."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)


def runner_process(env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """How to start this runner again in a child process (a rank: ``... worker``): ``python -m``
    of this package, and ``env`` with what holds the package first on PYTHONPATH.

    That holder is ``__file__`` less one folder per part of the package's name: the zipapp on a
    node and in the image (``<archive>/toolkit/acceptance/node_runner/common.py``), the source
    tree on the control machine; the package has the same name in both.
    """
    root = os.path.dirname(os.path.abspath(__file__))
    for _ in str(__package__).split("."):
        root = os.path.dirname(root)
    path = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return [sys.executable, "-m", str(__package__)], {**env, "PYTHONPATH": path}
