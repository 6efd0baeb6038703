"""Benchmark: ``gpunode up`` from bare, first converges on 1 and 4 nodes, and the no-op costs.

Printed, never asserted (only sanity is), on a fresh 5-node lab:

- ``up`` takes node 1 alone from bare to ready (disks, provision, the training image, the
  acceptance test in it): the end-to-end figure, and its provision stage is the 1-node
  first converge;
- nodes 2-5 get their disks, then one ``provision`` converges the four of them: the 4-node
  first converge, and its ratio to the 1-node one shows how the fleet scales here;
- a second ``up`` of node 1 (everything proven, every stage skipped);
- on 1 and on 4 nodes a no-op ``provision`` against ``ansible -m setup`` on the same nodes,
  and ``drift`` on the 4, each as a ratio of plain fact gathering measured in the same run
  (the no-op converge reads its facts in one probe and skips every role: toolkit/converge.py).

Each node has one sparse 4 GiB data disk (Docker's storage, so the ~1 GB training image,
goes there).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from toolkit.ansible.runner import run_module
from toolkit.disks import flow as disks_flow
from toolkit.lab import image as lab_image
from toolkit.lab import lab as lab_core
from toolkit.lab.spec import build_spec
from toolkit.provision import converge, read_drift
from toolkit.up import UpOptions, run_up

pytestmark = pytest.mark.lab

NAME = "gpunode-bench-up"
T = TypeVar("T")


def _timed(label: str, figures: dict[str, float], func: Callable[[], T]) -> T:
    start = time.perf_counter()
    result = func()
    figures[label] = time.perf_counter() - start
    return result


def test_bench_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        lab_image.docker_client()
    except Exception as err:  # like every lab test: fail, never skip, without Docker
        pytest.fail(f"the up benchmark needs the Docker engine: {err}", pytrace=False)
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path / "state"))
    if lab_core.lab_state.load(NAME) is not None:
        lab_core.down(NAME)
    spec = build_spec(name=NAME, nodes=5, disks=1, disk_size=4 * 1024**3, ca_bundle=None)
    figures: dict[str, float] = {}
    try:
        state = lab_core.up(spec, inventory_dir=tmp_path / "inv")
        inv = tmp_path / "inv"
        names = [n.name for n in sorted(state.nodes, key=lambda n: n.index)]
        sets = {1: names[:1], 4: names[1:5]}
        one, four = ",".join(sets[1]), ",".join(sets[4])
        outcome = _timed("up_1", figures, lambda: run_up(UpOptions(inventory=inv, limit=one)))
        assert outcome.all_ready, outcome.to_dict()
        figures["converge_1"] = outcome.nodes[names[0]].stages["provision"].seconds
        disks = disks_flow.apply(inv, four)
        assert disks.ok, disks
        first = _timed("converge_4", figures, lambda: converge(inv, four))
        assert first.ok and first.result.changed > 0, first.failed()
        again = _timed("again_1", figures, lambda: run_up(UpOptions(inventory=inv, limit=one)))
        assert again.all_ready
        assert all(n.stages["provision"].status == "skipped" for n in again.nodes.values())
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
        drift = _timed("drift_4", figures, lambda: read_drift(inv, four))
        assert drift.report["ok"], drift.report
    finally:
        if lab_core.lab_state.load(NAME) is not None:
            lab_core.down(NAME)

    print("\nup benchmark (bare lab nodes, Debian 12, stack 550.127.05 / CUDA 12.4.1):")
    print(f"  up on 1 bare node to ready: {figures['up_1']:6.1f} s")
    print(
        f"  first converge (provision): 1 node {figures['converge_1']:6.1f} s, 4 nodes "
        f"{figures['converge_4']:6.1f} s, 4-to-1 ratio "
        f"{figures['converge_4'] / figures['converge_1']:.2f}"
    )
    print(
        f"  up again on the proven node: {figures['again_1']:5.1f} s "
        f"({figures['again_1'] / figures['up_1']:.2f} of the first)"
    )
    for count in sets:
        print(
            f"  no-op provision on {count}: {figures[f'noop_{count}']:5.1f} s, "
            f"ansible -m setup {figures[f'setup_{count}']:4.1f} s, "
            f"no-op/setup {figures[f'noop_{count}'] / figures[f'setup_{count}']:.1f}x"
        )
    print(
        f"  drift on 4: {figures['drift_4']:5.1f} s, "
        f"drift/setup {figures['drift_4'] / figures['setup_4']:.1f}x"
    )
    assert all(value > 0 for value in figures.values())
