"""Benchmark: the control machine's capacity, measured (issue 25).

On the benchmarks' fleet (bench_fleet.py: 2 lab nodes, or 8 with ``GPUNODE_BENCH_NODES=8``,
each first-converged from bare once, through ``gpunode provision`` on both at once (on 1, 2,
4 and 1 at once)), each through the CLI (``gpunode ... --json``) under the meter
(tests/capacity.py): the no-op ``provision`` and an acceptance run (the lab's profile,
``gpunode accept``) on 1 and 2 (1, 2, 4 and 8) nodes, and the group's training image
sent to all of them (``gpunode image push``) before the acceptance runs, so that they measure
acceptance, not the transfer. Per case: wall time, the CPU-seconds of the
command and everything it started (Ansible's forks, ssh, its connection masters), the peak of
its process tree's summed RSS (and PSS), total and per node; the lab's containers are not its
descendants and are not counted.

From them, the nodes this control machine serves per hour, bare to ready (first converge,
image, acceptance) and re-validated (no-op converge, acceptance), each phase costed per node
by its largest run, and which resource runs out first: CPU-seconds per node against the
cores, RSS per node (for the phase's wall time) against the memory, or the wall time of one
run at a time (Ansible's forks nodes at most). Printed, never asserted: only what each run
must do is (every node converged, loaded, ready).
"""

from __future__ import annotations

import configparser

import pytest
from bench_fleet import FIRST, FIRST_GROUPS, SIZES, Fleet
from capacity import GIB, MIB, Capacity, capacity, machine
from shared_fixtures import REPO

from toolkit.images.build import build_recipe, recipe_for

pytestmark = pytest.mark.lab

NOOP = "no-op converge"
PUSH = "image push"
ACCEPT = "acceptance"
# A control machine of a common size, for the extrapolation (not measured).
TYPICAL = (16, 64 * GIB)


def _forks() -> int:
    """Ansible's forks for gpunode's runs (ansible.cfg, which the runner points Ansible at)."""
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    return config.getint("defaults", "forks")


def test_bench_capacity(fleet: Fleet) -> None:
    names = fleet.names
    assert len(names) >= max(SIZES)
    for count in SIZES:
        _, result = fleet.gpunode(NOOP, names[:count], "provision")
        assert result["ok"] and all(h["changed"] == 0 for h in result["hosts"].values()), result
        assert result["hosts"].keys() == set(names[:count])
    # The group's training image, built here unless an earlier test built the same recipe.
    build_recipe(recipe_for(fleet.inventory))
    _, pushed = fleet.gpunode(PUSH, names, "image", "push")
    assert [n["action"] for n in pushed["nodes"]] == ["loaded"] * len(names), pushed
    for count in SIZES:
        _, run = fleet.gpunode(ACCEPT, names[:count], "accept")
        verdicts = {n["host"]: n["verdict"] for n in run["nodes"]}
        assert verdicts == dict.fromkeys(names[:count], "ready"), run["nodes"]

    cores, memory = machine()
    forks = _forks()
    print(
        f"\ncontrol machine capacity (this machine: {cores} cores, {memory / GIB:.1f} GiB, "
        f"Ansible forks {forks}; the lab's nodes run on the same cores, so wall times include "
        "their work; CPU-seconds: the command's process tree only; peak RSS and PSS: its "
        "tree's sums, sampled every 0.2 s from /proc, RSS counting shared pages once per "
        "process):"
    )
    print(
        f"  {'case':<16} {'nodes':>5} {'wall s':>7} {'CPU s':>7} {'CPU s/node':>10} "
        f"{'RSS MiB':>8} {'RSS MiB/node':>12} {'PSS MiB':>8} {'busiest CPU s':>13}"
    )
    for phase in (FIRST, NOOP, PUSH, ACCEPT):
        for p in (p for p in fleet.points if p.phase == phase):
            u = p.usage
            print(
                f"  {phase:<16} {p.nodes:>5} {u.wall_s:>7.1f} {u.cpu_s:>7.1f} "
                f"{u.cpu_s / p.nodes:>10.2f} {u.peak_rss / MIB:>8.0f} "
                f"{u.peak_rss / MIB / p.nodes:>12.0f} {u.peak_pss / MIB:>8.0f} "
                f"{u.busiest_cpu_s:>13.1f}"
            )
    print(
        f"  ({FIRST}: each node once, from bare, in groups of {FIRST_GROUPS}; on all "
        f"{len(names)} at once it would need {len(names)} more bare nodes. {PUSH}: once, to all "
        f"{len(names)} nodes.)"
    )
    bare = capacity(fleet.points, (FIRST, PUSH, ACCEPT), cores, memory)
    again = capacity(fleet.points, (NOOP, ACCEPT), cores, memory)
    print("  per node, each phase by its largest run (its fixed cost spread over its nodes):")
    _serves("bare to ready (first converge, image, acceptance)", bare)
    _serves("re-validated (no-op converge, acceptance)", again)
    big_bare, big_again = bare.scaled(*TYPICAL), again.scaled(*TYPICAL)
    print(
        f"  extrapolated, not measured: a {TYPICAL[0]}-core, {TYPICAL[1] // GIB} GiB control "
        f"machine with the same per-node costs, runs at once: {big_bare.machine_nodes_h:,.0f} "
        f"nodes/hour bare to ready ({big_bare.machine_binding} first), "
        f"{big_again.machine_nodes_h:,.0f} re-validated ({big_again.machine_binding} first); "
        f"one run's busiest process (one core) caps a run at {bare.one_run_nodes_h:,.0f} and "
        f"{again.one_run_nodes_h:,.0f} nodes/hour"
    )
    assert bare.nodes_h > 0 and again.nodes_h > 0


def _serves(label: str, cap: Capacity) -> None:
    limits = ", ".join(f"{name} {value:,.0f}" for name, value in cap.limits().items())
    print(
        f"  {label}: {cap.cpu_s:.1f} CPU-s, {cap.memory_s / GIB:.2f} GiB-s, {cap.wall_s:.1f} s of "
        f"one run per node; nodes/hour allowed by {limits}: {cap.nodes_h:,.0f} nodes/hour, "
        f"{cap.binding} runs out first (runs at once: {cap.machine_nodes_h:,.0f}, "
        f"{cap.machine_binding} first)"
    )
