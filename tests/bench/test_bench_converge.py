"""Benchmark: a first converge of bare nodes, and what a converge with nothing to do costs.

Printed, never asserted (only sanity is), on the benchmarks' fleet (bench_fleet.py: 2 lab nodes,
or 8, each one sparse 4 GiB data disk, applied first: provision refuses a node without its data
mount; shared with the capacity benchmark, test_bench_capacity.py):

- the first converge of each node, from bare, through ``gpunode provision`` on both nodes
  at once (1, 2, 4 and 1 at once in a fleet of 8; each node converged once: CI's whole run must stay
  under 60 minutes on 2 cores; ``gpunode up`` from bare is timed by
  tests/integration/test_06_up.py and test_07_sample.py);
- on 1 and on 2 nodes a no-op ``gpunode provision`` against ``ansible -m setup`` on the same
  nodes, and ``gpunode drift`` on the 2, each as a ratio of plain fact gathering (each the
  median of 3 runs, the pairs interleaved; the no-op converge reads its facts in one probe and
  skips every role: toolkit/node/converge.py). Whole processes, as a user runs them (issue 40):
  the interpreter's start, the CLI's imports and the inventory's loading are in the figure;
  ``ansible -m setup`` is Ansible's own process (through ansible-runner, as gpunode runs it).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
from bench_fleet import FIRST, Fleet
from shared_fixtures import REPO

from toolkit.ansible.runner import run_module

pytestmark = pytest.mark.lab

T = TypeVar("T")


ROUNDS = 3  # each figure the median of this many runs, the pairs interleaved


def _timed(label: str, figures: dict[str, list[float]], func: Callable[[], T]) -> T:
    start = time.perf_counter()
    result = func()
    figures.setdefault(label, []).append(time.perf_counter() - start)
    return result


def _cli(fleet: Fleet, command: str, hosts: list[str]) -> subprocess.CompletedProcess[str]:
    """``gpunode COMMAND --json -i INVENTORY -l HOSTS``: a whole process, as a user runs it."""
    argv = [sys.executable, "-m", "toolkit", command, "--json", "-i", str(fleet.inventory)]
    return subprocess.run(
        [*argv, "-l", ",".join(hosts)],
        cwd=REPO,
        env={**os.environ, "GPUNODE_STATE_DIR": str(fleet.state_dir), "COLUMNS": "200"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_bench_converge(fleet: Fleet) -> None:
    inv, names = fleet.inventory, fleet.names
    sets = {1: names[:1], 2: names[:2]}
    runs: dict[str, list[float]] = {}
    # Interleaved (no-op, setup, ..., drift) and repeated: a burst of the lab nodes' own work
    # on the shared cores lands on one run of a pair, not on a whole figure.
    for _round in range(ROUNDS):
        for count, hosts in sets.items():
            noop = _timed(f"noop_{count}", runs, lambda h=hosts: _cli(fleet, "provision", h))
            assert noop.returncode == 0, noop.stderr[-3000:]
            changed = {h: r["changed"] for h, r in json.loads(noop.stdout)["hosts"].items()}
            assert changed == dict.fromkeys(hosts, 0), changed
            setup = _timed(
                f"setup_{count}",
                runs,
                lambda h=hosts: run_module("ansible.builtin.setup", inv, limit=",".join(h)),
            )
            assert setup.ok and len(setup.results) == count
        drift = _timed("drift_2", runs, lambda: _cli(fleet, "drift", sets[2]))
        assert drift.returncode == 0, drift.stderr[-3000:]
    figures = {label: statistics.median(values) for label, values in runs.items()}

    print(
        "\nconverge benchmark (lab nodes, Debian 12, stack 550.127.05 / CUDA 12.4.1; "
        f"no-op, setup and drift: whole processes, the median of {ROUNDS} interleaved runs):"
    )
    for point in (p for p in fleet.points if p.phase == FIRST):
        print(
            f"  first converge (gpunode provision) of {point.nodes} node(s) at once: "
            f"{point.usage.wall_s:6.1f} s"
        )
    for count in sets:
        print(
            f"  no-op gpunode provision on {count}: {figures[f'noop_{count}']:5.1f} s, "
            f"ansible -m setup {figures[f'setup_{count}']:4.1f} s, "
            f"no-op/setup {figures[f'noop_{count}'] / figures[f'setup_{count}']:.1f}x"
        )
    print(
        f"  gpunode drift on 2: {figures['drift_2']:5.1f} s, "
        f"drift/setup {figures['drift_2'] / figures['setup_2']:.1f}x"
    )
    assert all(value > 0 for value in figures.values())
