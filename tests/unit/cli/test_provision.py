"""The provision, drift and status commands at the CLI boundary (no host is reached)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from shared_fixtures import REPO

SAMPLE = REPO / "inventories" / "sample"


def gpunode(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "GPUNODE_STATE_DIR": str(state), "COLUMNS": "200"},
        check=False,
    )


@pytest.mark.parametrize("command", ["provision", "drift", "status"])
def test_help(command: str, tmp_path: Path) -> None:
    proc = gpunode(command, "--help", state=tmp_path)
    assert proc.returncode == 0
    assert "--inventory" in proc.stdout and "--limit" in proc.stdout and "--json" in proc.stdout


def test_provision_options(tmp_path: Path) -> None:
    out = gpunode("provision", "--help", state=tmp_path).stdout
    for option in ("--tags", "--check", "--diff"):
        assert option in out


@pytest.mark.parametrize("command", ["provision", "drift"])
def test_incoherent_stack_exits_2_and_runs_nothing(command: str, tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    shutil.copytree(SAMPLE, inv)
    stack_file = inv / "group_vars" / "h100_sxm" / "stack.yml"
    data = yaml.safe_load(stack_file.read_text())
    data["stack"]["driver"] = {"version": "535.104.05", "flavour": "open"}
    data["stack"]["cuda"] = "12.4.1"
    stack_file.write_text(yaml.safe_dump(data))
    proc = gpunode(command, "-i", str(inv), state=tmp_path / "state")
    assert proc.returncode == 2, proc.stderr
    assert "535.104.05" in proc.stderr and "nothing was changed" in proc.stderr
    assert not (tmp_path / "state").exists()


def test_unknown_limit_exits_2(tmp_path: Path) -> None:
    proc = gpunode("provision", "-i", str(SAMPLE), "--limit", "nope", state=tmp_path)
    assert proc.returncode == 2
    assert "nope" in proc.stderr
