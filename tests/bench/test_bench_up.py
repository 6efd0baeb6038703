"""Benchmark: ``gpunode up`` end to end for 1, 2 and 4 bare lab nodes, and the no-op costs.

Printed, never asserted (only sanity is): on a fresh 7-node lab, ``up`` takes node 1 alone
from bare to ready (the 1-node figure), then nodes 2-3 together, then nodes 4-7 together, so
the 4-to-1 ratio shows how the fleet scales on this machine. Then, on the 4-node set, a
second ``up`` (everything proven, so every stage is skipped), a no-op ``provision`` and
``ansible -m setup``, so the no-op converge is also given as a ratio of plain fact
gathering. Each node has one sparse 4 GiB data disk (``up`` applies the disks stage for real,
and Docker's storage, so the ~1 GB training image, goes there).
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
from toolkit.provision import converge
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
    spec = build_spec(name=NAME, nodes=7, disks=1, disk_size=4 * 1024**3, ca_bundle=None)
    figures: dict[str, float] = {}
    try:
        state = lab_core.up(spec, inventory_dir=tmp_path / "inv")
        inv = tmp_path / "inv"
        names = [n.name for n in sorted(state.nodes, key=lambda n: n.index)]
        sets = {1: names[:1], 2: names[1:3], 4: names[3:7]}
        for count, hosts in sets.items():
            outcome = _timed(
                f"up_{count}",
                figures,
                lambda hosts=hosts: run_up(UpOptions(inventory=inv, limit=",".join(hosts))),
            )
            assert outcome.all_ready, outcome.to_dict()
        limit = ",".join(sets[4])
        again = _timed("again_4", figures, lambda: run_up(UpOptions(inventory=inv, limit=limit)))
        assert again.all_ready
        assert all(n.stages["provision"].status == "skipped" for n in again.nodes.values())
        noop = _timed("noop_4", figures, lambda: converge(inv, limit))
        assert noop.ok and noop.result.changed == 0, noop.result.changes
        setup = _timed(
            "setup_4", figures, lambda: run_module("ansible.builtin.setup", inv, limit=limit)
        )
        assert setup.ok and len(setup.results) == 4
    finally:
        if lab_core.lab_state.load(NAME) is not None:
            lab_core.down(NAME)

    print("\nup benchmark (bare lab nodes to ready, Debian 12, stack 550.127.05 / CUDA 12.4.1):")
    for count in sets:
        print(f"  {count} node(s): up {figures[f'up_{count}']:6.1f} s")
    print(f"  4-to-1 ratio: {figures['up_4'] / figures['up_1']:.2f}")
    print(
        f"  4 nodes again (all proven): {figures['again_4']:5.1f} s "
        f"({figures['again_4'] / figures['up_4']:.2f} of the first); no-op provision "
        f"{figures['noop_4']:5.1f} s, ansible -m setup {figures['setup_4']:4.1f} s, "
        f"no-op/setup {figures['noop_4'] / figures['setup_4']:.1f}x"
    )
    assert all(value > 0 for value in figures.values())
