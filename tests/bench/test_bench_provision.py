"""Benchmark: first converge and no-op re-converge of the pinned stack, 1 and 4 nodes.

Printed, never asserted (only sanity is): on a fresh 5-node lab, node 1 alone converges
first (the 1-node figure), then nodes 2 to 5 together (the 4-node figure); then each set
re-converges with nothing to do, and ``ansible -m setup`` runs on the same hosts, so the
no-op time is also given as a ratio of plain fact gathering. The nodes have no data disks
(the disks tests cover those), so Docker stays on the system disk.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from toolkit.ansible.events import RunResult
from toolkit.ansible.runner import run_module, run_playbook
from toolkit.lab import image as lab_image
from toolkit.lab import lab as lab_core
from toolkit.lab.spec import build_spec

pytestmark = pytest.mark.lab

NAME = "gpunode-bench-prov"


def _timed(label: str, figures: dict[str, float], func: Callable[[], RunResult]) -> RunResult:
    start = time.perf_counter()
    result = func()
    figures[label] = time.perf_counter() - start
    return result


def test_bench_provision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        lab_image.docker_client()
    except Exception as err:  # like every lab test: fail, never skip, without Docker
        pytest.fail(f"the provision benchmark needs the Docker engine: {err}", pytrace=False)
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path / "state"))
    if lab_core.lab_state.load(NAME) is not None:
        lab_core.down(NAME)
    spec = build_spec(name=NAME, nodes=5, disks=1, disk_size=1024**3, ca_bundle=None)
    figures: dict[str, float] = {}
    try:
        state = lab_core.up(spec, inventory_dir=tmp_path / "lab")
        inv = tmp_path / "inv"
        shutil.copytree(tmp_path / "lab", inv)
        for path in (inv / "host_vars").glob("*/hardware.yml"):
            data = yaml.safe_load(path.read_text())
            data["hardware"].pop("data_disks", None)
            path.write_text(yaml.safe_dump(data))
        names = [n.name for n in sorted(state.nodes, key=lambda n: n.index)]
        sets = {1: names[0], 4: ",".join(names[1:])}

        for count, limit in sets.items():
            first = _timed(
                f"first_{count}",
                figures,
                lambda limit=limit: run_playbook("provision", inv, limit=limit),
            )
            assert first.ok, first.failures
        for count, limit in sets.items():
            noop = _timed(
                f"noop_{count}",
                figures,
                lambda limit=limit: run_playbook("provision", inv, limit=limit),
            )
            assert noop.ok and noop.changed == 0, noop.changes
            setup = _timed(
                f"setup_{count}",
                figures,
                lambda limit=limit: run_module("ansible.builtin.setup", inv, limit=limit),
            )
            assert setup.ok and len(setup.results) == count
    finally:
        if lab_core.lab_state.load(NAME) is not None:
            lab_core.down(NAME)

    print("\nprovision benchmark (lab nodes, Debian 12, stack 550.127.05 / CUDA 12.4.1):")
    for count in sets:
        ratio = figures[f"noop_{count}"] / figures[f"setup_{count}"]
        print(
            f"  {count} node(s): first converge {figures[f'first_{count}']:6.1f} s, "
            f"no-op re-converge {figures[f'noop_{count}']:6.1f} s, "
            f"ansible -m setup {figures[f'setup_{count}']:5.1f} s, no-op/setup {ratio:4.1f}x"
        )
    assert all(value > 0 for value in figures.values())
