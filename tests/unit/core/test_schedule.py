"""``gpunode schedule``: the scheduled re-validation's units, verified by systemd itself.

The units are rendered for the shipped sample inventory, checked with ``systemd-analyze
verify`` (as the node timer's are: check/test_timer.py), and the service's command line is
parsed by ``gpunode up``'s own options, so the two cannot drift apart.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from shared_fixtures import REPO

from toolkit.cli import cli
from toolkit.cli.up import up
from toolkit.errors import ConfigError
from toolkit.schedule import MIN_INTERVAL_MINUTES, interval_minutes, render

SAMPLE = REPO / "inventories" / "sample"


def _gpunode(tmp: Path) -> Path:
    program = tmp / "bin" / "gpunode"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return program


def _exec_start(service: str) -> list[str]:
    line = next(x for x in service.splitlines() if x.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_systemd_accepts_the_units_and_up_accepts_their_command(tmp_path: Path) -> None:
    units = render(
        SAMPLE, "6h", gpunode=_gpunode(tmp_path), state_dir=tmp_path / "state", hooks=("slurm",)
    )
    assert units.name == "gpunode-revalidate-sample"
    for filename, text in units.files().items():
        (tmp_path / filename).write_text(text)
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze (package systemd) is needed to verify the units"
    done = subprocess.run(
        [analyze, "verify", *(str(tmp_path / f) for f in units.files())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    # The lowest priority this machine has, and a not-ready node is a run that worked.
    for line in ("Nice=19", "CPUSchedulingPolicy=idle", "IOSchedulingClass=idle"):
        assert line in units.service.splitlines()
    assert "SuccessExitStatus=1" in units.service.splitlines()
    assert f"Environment=GPUNODE_STATE_DIR={tmp_path / 'state'}" in units.service
    # Runs never overlap: the next starts one interval after the last one ended.
    assert "OnUnitInactiveSec=6h" in units.timer.splitlines()
    command = _exec_start(units.service)
    assert command[0] == str(tmp_path / "bin" / "gpunode") and command[1] == "up"
    context = up.make_context("up", command[2:])
    assert context.params["inventory"] == SAMPLE.resolve()
    assert context.params["accept_only"] and not context.params["yes"]
    assert context.params["hooks"] == ("slurm",)


@pytest.mark.parametrize(
    ("every", "minutes"), [("15min", 15), ("6h", 360), ("1d", 1440), ("2w", 20160)]
)
def test_intervals_in_systemd_s_units(every: str, minutes: int) -> None:
    assert interval_minutes(every) == minutes


@pytest.mark.parametrize(
    ("every", "why"),
    [
        ("5min", f"at least {MIN_INTERVAL_MINUTES}min"),
        ("0h", "at least"),
        ("1.5h", "a number and one unit"),
        ("6 hours", "a number and one unit"),
        ("6h; rm -rf /", "a number and one unit"),
        ("", "a number and one unit"),
    ],
)
def test_a_bad_interval_is_refused_naming_the_rule(every: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--every") as err:
        render(SAMPLE, every, gpunode=_gpunode(tmp_path), state_dir=tmp_path)
    assert why in err.value.message


def test_paths_systemd_would_expand_are_refused(tmp_path: Path) -> None:
    odd = tmp_path / "inv"
    odd.mkdir()
    with pytest.raises(ConfigError, match="holds %"):
        render(odd, "1d", gpunode=_gpunode(tmp_path), state_dir=tmp_path / "%h")


def test_cli_writes_both_units_or_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "units"
    dest.mkdir()
    runner = CliRunner()
    bad = runner.invoke(
        cli, ["schedule", "-i", str(SAMPLE), "--every", "1min", "--dest", str(dest)]
    )
    assert isinstance(bad.exception, ConfigError) and bad.exception.exit_code == 2
    assert not list(dest.iterdir())
    done = runner.invoke(cli, ["schedule", "-i", str(SAMPLE), "--every", "1d", "--dest", str(dest)])
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in dest.iterdir()) == [
        "gpunode-revalidate-sample.service",
        "gpunode-revalidate-sample.timer",
    ]
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in dest.iterdir())
    printed = runner.invoke(cli, ["schedule", "-i", str(SAMPLE), "--every", "1d"])
    assert printed.exit_code == 0 and "OnUnitInactiveSec=1d" in printed.output
