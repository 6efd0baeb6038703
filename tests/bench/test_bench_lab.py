"""Benchmark: how long ``lab up`` takes for 1 and 4 nodes, with a cold and a warm image.

What is measured (printed, never asserted; only sanity is asserted):

- image build (cold): ``debootstrap`` + customisation + ``docker import``, measured only
  when the node image for the current recipe is not there yet (a fresh CI machine); on a
  machine that has it, the figure says "cached" instead of rebuilding it (a rebuild costs
  about a minute of both CPU cores, which the rest of the suite needs).
- ``lab up`` (warm image) for 1 node and for 4 nodes, each on a fresh lab, and their ratio;
  the cold figure for 1 node is the image build plus the warm ``up``.
- a second ``lab up`` of the 4-node lab (nothing to do: idempotent) and ``lab down``.

The repository and wheel caches are warmed first and not part of the figures.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from toolkit.lab import image as lab_image
from toolkit.lab import lab as lab_core
from toolkit.lab import nodes as lab_nodes
from toolkit.lab import paths, server
from toolkit.lab.repo import build_repository
from toolkit.lab.spec import build_spec

pytestmark = pytest.mark.lab

NAMES = {1: "gpunode-bench-1", 4: "gpunode-bench-4"}


def _timed_up(nodes: int, inventory_dir: Path) -> float:
    name = NAMES[nodes]
    if lab_core.lab_state.load(name) is not None:
        lab_core.down(name)
    spec = build_spec(name=name, nodes=nodes, disks=2, disk_size=1024**3, ca_bundle=None)
    start = time.perf_counter()
    state = lab_core.up(spec, inventory_dir=inventory_dir)
    seconds = time.perf_counter() - start
    assert [n.index for n in state.nodes] == list(range(1, nodes + 1))
    return seconds


def test_bench_lab_up(tmp_path: Path) -> None:
    try:
        client = lab_image.docker_client()
    except Exception as err:  # the benchmark fails, like every lab test, without Docker
        pytest.fail(f"the lab benchmark needs the Docker engine: {err}", pytrace=False)
    cold = lab_image.image_exists(client, lab_image.image_tag()) is False
    start = time.perf_counter()
    built = lab_image.ensure_image(client)
    image_s = time.perf_counter() - start
    assert built.built is cold
    build_repository(paths.cache_dir() / "repo")
    server.ensure_wheels(paths.cache_dir() / "wheels")

    figures: dict[str, float] = {}
    try:
        figures["up_1"] = _timed_up(1, tmp_path / "inv1")
        start = time.perf_counter()
        lab_core.down(NAMES[1])
        figures["down_1"] = time.perf_counter() - start

        figures["up_4"] = _timed_up(4, tmp_path / "inv4")
        start = time.perf_counter()
        again = lab_core.up(lab_core.require(NAMES[4]).spec, inventory_dir=tmp_path / "inv4")
        figures["up_4_again"] = time.perf_counter() - start
        running = [lab_nodes.get_container(client, n.name) for n in again.nodes]
        assert all(c is not None and c.status == "running" for c in running)
        start = time.perf_counter()
        lab_core.down(NAMES[4])
        figures["down_4"] = time.perf_counter() - start
    finally:
        for name in NAMES.values():
            if lab_core.lab_state.load(name) is not None:
                lab_core.down(name)

    ratio = figures["up_4"] / figures["up_1"]
    print()
    print("lab up benchmark (seconds; 2 data disks of 1 GiB per node)")
    if cold:
        print(f"  image build (cold)          {image_s:8.1f}")
        print(f"  lab up, 1 node, cold image  {image_s + figures['up_1']:8.1f}")
    else:
        print("  image build (cold)          cached: not rebuilt (see the module docstring)")
    print(f"  lab up, 1 node, warm image  {figures['up_1']:8.1f}")
    print(f"  lab up, 4 nodes, warm image {figures['up_4']:8.1f}")
    print(f"  ratio 4 nodes / 1 node      {ratio:8.2f}")
    print(f"  lab up again, 4 nodes       {figures['up_4_again']:8.2f}  (idempotent)")
    print(f"  lab down, 1 node / 4 nodes  {figures['down_1']:8.2f} / {figures['down_4']:.2f}")
    # Sanity only: an idempotent `up` does less than creating the nodes did.
    assert figures["up_4_again"] < figures["up_4"]
    assert ratio > 0
