"""Benchmark: a first converge on 2 bare nodes, and what a converge with nothing to do costs.

Printed, never asserted (only sanity is), on a fresh 2-node lab (each node one sparse 4 GiB
data disk, applied first: provision refuses a node without its data mount):

- one ``provision`` converges both nodes from bare at once (one first converge, not one per
  fleet size: CI's whole run must stay under 60 minutes on 2 cores; ``gpunode up`` from bare
  is timed by tests/integration/test_06_up.py and test_07_sample.py);
- on 1 and on 2 nodes a no-op ``provision`` against ``ansible -m setup`` on the same nodes,
  and ``drift`` on the 2, each as a ratio of plain fact gathering measured in the same run
  (the no-op converge reads its facts in one probe and skips every role: toolkit/converge.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from toolkit.ansible.runner import run_module
from toolkit.lab import image as lab_image
from toolkit.lab import lab as lab_core
from toolkit.lab.spec import build_spec
from toolkit.steps import disks as disks_step
from toolkit.steps.provision import converge, read_drift

pytestmark = pytest.mark.lab

NAME = "gpunode-bench-converge"
T = TypeVar("T")


def _timed(label: str, figures: dict[str, float], func: Callable[[], T]) -> T:
    start = time.perf_counter()
    result = func()
    figures[label] = time.perf_counter() - start
    return result


def test_bench_converge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        lab_image.docker_client()
    except Exception as err:  # like every lab test: fail, never skip, without Docker
        pytest.fail(f"the converge benchmark needs the Docker engine: {err}", pytrace=False)
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path / "state"))
    if lab_core.lab_state.load(NAME) is not None:
        lab_core.down(NAME)
    spec = build_spec(name=NAME, nodes=2, disks=1, disk_size=4 * 1024**3, ca_bundle=None)
    figures: dict[str, float] = {}
    try:
        state = lab_core.up(spec, inventory_dir=tmp_path / "inv")
        inv = tmp_path / "inv"
        names = [n.name for n in sorted(state.nodes, key=lambda n: n.index)]
        sets = {1: names[:1], 2: names}
        two = ",".join(names)
        disks = disks_step.apply(inv, two)
        assert disks.ok, disks
        first = _timed("converge_2", figures, lambda: converge(inv, two))
        assert first.ok and first.result.changed > 0, first.failed()
        for count, hosts in sets.items():
            noop = _timed(f"noop_{count}", figures, lambda h=hosts: converge(inv, ",".join(h)))
            assert noop.ok and noop.result.changed == 0, noop.result.changes
            assert all(not d["run"] for p in noop.plan().values() for d in p.values())
            setup = _timed(
                f"setup_{count}",
                figures,
                lambda h=hosts: run_module("ansible.builtin.setup", inv, limit=",".join(h)),
            )
            assert setup.ok and len(setup.results) == count
        drift = _timed("drift_2", figures, lambda: read_drift(inv, two))
        assert drift.report["ok"], drift.report
    finally:
        if lab_core.lab_state.load(NAME) is not None:
            lab_core.down(NAME)

    print("\nconverge benchmark (bare lab nodes, Debian 12, stack 550.127.05 / CUDA 12.4.1):")
    print(f"  first converge (provision) of 2 nodes at once: {figures['converge_2']:6.1f} s")
    for count in sets:
        print(
            f"  no-op provision on {count}: {figures[f'noop_{count}']:5.1f} s, "
            f"ansible -m setup {figures[f'setup_{count}']:4.1f} s, "
            f"no-op/setup {figures[f'noop_{count}'] / figures[f'setup_{count}']:.1f}x"
        )
    print(
        f"  drift on 2: {figures['drift_2']:5.1f} s, "
        f"drift/setup {figures['drift_2'] / figures['setup_2']:.1f}x"
    )
    assert all(value > 0 for value in figures.values())
