"""Benchmark: the training image: cold build, normalisation's share of it, unchanged rebuild,
a rebuild after a change to the acceptance runner only, image size, and distribution over SSH
to 2 nodes: the whole image, again (nothing to send), and after the runner-only change.

Printed, never asserted, except for what the build and distribution must do: the unchanged
recipe is reused; the runner-only change rewrites the runner's layer alone (the others are
what normalisation made of the same builder layers before); each node loads the image once,
a second push finds it everywhere, and after the runner-only change each node is sent that one
layer (distribution sends only the layers a node lacks). It runs against the shared lab of the
integration tier (``$GPUNODE_TEST_LAB``, provisioned by test_03: Docker on its nodes), so it
belongs to the same pytest session as tests/integration, as scripts/test runs it.
"""

from __future__ import annotations

import io
import os
import time
import zipfile

import pytest

from toolkit.acceptance.payload import runner_zipapp
from toolkit.images.build import build_recipe, recipe_for
from toolkit.images.distribute import push
from toolkit.images.engine import docker_client
from toolkit.inventory import load_inventory
from toolkit.lab import lab as lab_core

pytestmark = pytest.mark.lab

LAB = os.environ.get("GPUNODE_TEST_LAB", "gpunode-test")


def changed_runner() -> bytes:
    """This gpunode's runner with another zip comment: the same program, other bytes (a change
    to the runner only, made without touching the checkout)."""
    buffer = io.BytesIO(runner_zipapp())
    with zipfile.ZipFile(buffer, "a") as archive:
        archive.comment = b"gpunode image benchmark: a runner-only change"
    return buffer.getvalue()


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
    # The runner-only change: the builder's cache serves every step before the runner's copy,
    # and normalisation knows what it made of those layers; not recorded by its input key.
    changed = build_recipe(recipe, tag=False, record=False, runner=changed_runner())
    assert changed.image_id != cold.image_id and not changed.reused
    assert changed.layers_rewritten == 1
    assert changed.layers_reused == cold.layers_rewritten + cold.layers_reused - 1
    hosts = load_inventory(state.inventory_dir).hosts_for(None)[:2]
    assert len(hosts) == 2, f"lab {LAB} needs 2 nodes"

    def drop(node: str, image_id: str) -> None:
        lab_core.ssh_run(LAB, node, f"docker image rm -f {image_id} >/dev/null 2>&1 || true")

    def held(node: str) -> str:
        return lab_core.ssh_run(LAB, node, "docker images --no-trunc --format '{{.ID}}'").stdout

    for host in hosts:
        drop(host.name, cold.image_id)
    start = time.perf_counter()
    two = push(cold.image_id, hosts, tag=recipe.tag)
    to_two = time.perf_counter() - start
    again = push(cold.image_id, hosts, tag=recipe.tag)
    assert two.ok, [n.error for n in two.nodes]
    assert [n.action for n in two.nodes] == ["loaded", "loaded"] and two.transferred == 2
    for host in hosts:
        assert cold.image_id in held(host.name), host.name
    assert again.ok and again.transferred == 0
    assert [(n.action, n.bytes_sent) for n in again.nodes] == [("present", 0), ("present", 0)]
    try:
        delta = push(changed.image_id, hosts)  # untagged: the recipe's tag stays on cold
        assert delta.ok, [n.error for n in delta.nodes]
        assert [(n.action, n.layers_sent, n.note) for n in delta.nodes] == [("loaded", 1, None)] * 2
        for host in hosts:
            assert changed.image_id in held(host.name), host.name
    finally:
        for host in hosts:
            drop(host.name, changed.image_id)
        docker_client().images.remove(changed.image_id)
    sent = max(n.bytes_sent for n in delta.nodes)
    print("\ntraining image (lab: Debian 12 base, CPU torch, stand-in NCCL; classic builder):")
    print(f"  cold build (no cache): {cold.build_seconds:.1f}s")
    print(
        f"  normalisation: {cold.normalise_seconds:.1f}s, "
        f"{100 * cold.normalise_seconds / cold.build_seconds:.0f}% of the cold build "
        f"(layers read from the {cold.layers_from}, {cold.read_seconds:.2f}s to find them; "
        f"{cold.layers_rewritten} layers, {cold.rewritten_bytes / 1e6:.0f} MB rewritten)"
    )
    print(f"  unchanged rebuild (reused by its input key): {cached.build_seconds:.2f}s")
    print(
        f"  rebuild after a runner-only change: {changed.build_seconds:.1f}s (normalisation "
        f"{changed.normalise_seconds:.1f}s, from the {changed.layers_from}; "
        f"{changed.layers_rewritten} layer, {changed.rewritten_bytes / 1e3:.0f} kB rewritten, "
        f"{changed.layers_reused} reused)"
    )
    print(f"  image size (uncompressed files): {cold.size / 1e6:.0f} MB")
    print(
        f"  distribution over SSH to 2 nodes: {to_two:.1f}s (one save, loads in parallel: "
        + ", ".join(f"{n.host} {n.seconds:.1f}s {n.bytes_sent / 1e6:.0f} MB" for n in two.nodes)
        + ")"
    )
    print(f"  second push (every node holds it): {again.seconds:.1f}s")
    print(
        f"  push after the runner-only change to 2 nodes: {delta.seconds:.1f}s, "
        f"{sent / 1e3:.0f} kB per node ({delta.nodes[0].layers_sent} of "
        f"{delta.nodes[0].layers_total} layers), {100 * sent / cold.size:.3f}% of the image"
    )
