"""Benchmark: the training image: cold build, unchanged rebuild, normalisation's share of
the build, image size, and distribution over SSH to 2 nodes (each node's own time too).

Printed, never asserted, except for what distribution must do (it is the test of pushing over
SSH: each node loads the image once, a second push finds it everywhere and sends nothing).
It runs against the shared lab of the integration tier (``$GPUNODE_TEST_LAB``, provisioned
by test_03: Docker on its nodes), so it belongs to the same pytest session as
tests/integration, as scripts/test runs it.
"""

from __future__ import annotations

import os
import time

import pytest

from toolkit.images.build import build_recipe, recipe_for
from toolkit.images.distribute import push
from toolkit.inventory import load_inventory
from toolkit.lab import lab as lab_core

pytestmark = pytest.mark.lab

LAB = os.environ.get("GPUNODE_TEST_LAB", "gpunode-test")


def test_bench_image() -> None:
    state = lab_core.lab_state.load(LAB)
    if state is None or state.inventory_dir is None:
        pytest.fail(
            f"the image benchmark runs on the integration tier's lab {LAB}: run it in one "
            "session with tests/integration (scripts/test does)",
            pytrace=False,
        )
    recipe = recipe_for(state.inventory_dir)
    cold = build_recipe(recipe, no_cache=True, tag=False)
    cached = build_recipe(recipe, tag=False)  # unchanged: found by its input key
    assert cold.image_id == cached.image_id and cached.reused
    hosts = load_inventory(state.inventory_dir).hosts_for(None)[:2]
    assert len(hosts) == 2, f"lab {LAB} needs 2 nodes"

    def drop(node: str) -> None:
        lab_core.ssh_run(LAB, node, f"docker image rm -f {cold.image_id} >/dev/null 2>&1 || true")

    for host in hosts:
        drop(host.name)
    start = time.perf_counter()
    two = push(cold.image_id, hosts, tag=recipe.tag)
    to_two = time.perf_counter() - start
    again = push(cold.image_id, hosts, tag=recipe.tag)
    assert two.ok, [n.error for n in two.nodes]
    assert [n.action for n in two.nodes] == ["loaded", "loaded"] and two.transferred == 2
    for host in hosts:
        held = lab_core.ssh_run(LAB, host.name, "docker images --no-trunc --format '{{.ID}}'")
        assert cold.image_id in held.stdout, host.name
    assert again.ok and again.transferred == 0
    assert [(n.action, n.bytes_sent) for n in again.nodes] == [("present", 0), ("present", 0)]
    print("\ntraining image (lab: Debian 12 base, CPU torch, stand-in NCCL; classic builder):")
    print(f"  cold build (no cache): {cold.build_seconds:.1f}s")
    print(f"  unchanged rebuild (reused by its input key): {cached.build_seconds:.2f}s")
    print(
        f"  normalisation: {cold.normalise_seconds:.1f}s, "
        f"{100 * cold.normalise_seconds / cold.build_seconds:.0f}% of the cold build"
    )
    print(f"  image size (uncompressed layers): {cold.size / 1e6:.0f} MB")
    print(
        f"  distribution over SSH to 2 nodes: {to_two:.1f}s (one save, loads in parallel: "
        + ", ".join(f"{n.host} {n.seconds:.1f}s" for n in two.nodes)
        + ")"
    )
    print(f"  second push (every node holds it): {again.seconds:.1f}s")
