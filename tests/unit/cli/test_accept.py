"""`gpunode accept`: the group's default action needs an inventory; `parse` needs none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", "accept", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_accept_without_inventory_is_a_usage_error() -> None:
    result = run()
    assert result.returncode == 2
    assert "--inventory" in result.stderr


def test_accept_help_names_both_forms() -> None:
    result = run("--help")
    assert result.returncode == 0
    assert "--multi-node" in result.stdout and "parse" in result.stdout


def test_accept_missing_inventory_dir(tmp_path: Path) -> None:
    result = run("-i", str(tmp_path / "nope"))
    assert result.returncode == 2


def test_accept_inventory_without_hosts_file(tmp_path: Path) -> None:
    result = run("-i", str(tmp_path))
    assert result.returncode == 2
    assert "hosts.yml" in result.stderr


def test_parse_missing_file(tmp_path: Path) -> None:
    result = run("parse", str(tmp_path / "missing.txt"))
    assert result.returncode == 2
    assert "file not found" in result.stderr


def test_unknown_hook_is_refused(tmp_path: Path) -> None:
    result = run("-i", str(tmp_path), "--hook", "pbs")
    assert result.returncode == 2
    assert "pbs" in result.stderr
