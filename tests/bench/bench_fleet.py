"""The benchmarks' converged fleet: one lab of bare nodes, first-converged under the meter.

Shared by the capacity benchmark (test_bench_capacity.py) and the converge benchmark
(test_bench_converge.py) through the session fixture ``fleet`` (conftest.py), so that the
dearest thing here, a first converge (about half a minute of both cores per node on 2 cores),
happens once per node. Each node is converged from bare exactly once, through the CLI
(``gpunode provision --json``) under the meter (tests/capacity.py), in disjoint groups of
``FIRST_GROUPS`` nodes: both at once in the fleet of 2 (1, 2, 4 and 1 more in a fleet of 8; a
first converge on all of them at once would need as many more bare nodes).

The fleet has ``NODES`` nodes: 2, the run of the README's test command, or
``GPUNODE_BENCH_NODES=8`` for the 8-node measurement that docs/architecture.md quotes. It had
4 until 2026-12-07, first-converged 1, 2 and 1 at once: CI's whole run (cold demo, every
tier) had grown past CI's limit, and a node first-converged alone is what the capacity
figures need least (each phase is costed by its largest run); that cost CI about 6 minutes
(two converges, two image pushes and the acceptance runs' share).

(A module of its own, not conftest.py: test modules import its names.)
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capacity import Point, Usage, metered
from shared_fixtures import REPO

from toolkit.lab import lab as lab_core
from toolkit.lab.spec import build_spec
from toolkit.steps import disks as disks_step

# Its own lab, named after the session's (two sessions on one machine never share it).
NAME = f"{os.environ.get('GPUNODE_TEST_LAB', 'gpunode-test')}-bench"[:24]
# How many nodes, and the groups they are first-converged in (each group's size a measurement).
GROUPS_OF = {2: (2,), 8: (1, 2, 4, 1)}
# How many nodes each of the other phases runs on at once (the last: the whole fleet).
SIZES_OF = {2: (1, 2), 8: (1, 2, 4, 8)}
NODES = int(os.environ.get("GPUNODE_BENCH_NODES", "2"))
if NODES not in GROUPS_OF:
    raise ValueError(f"GPUNODE_BENCH_NODES={NODES}: the benchmarks' fleet has 2 or 8 nodes")
FIRST_GROUPS = GROUPS_OF[NODES]
SIZES = SIZES_OF[NODES]
FIRST = "first converge"


@dataclass
class Fleet:
    """The benchmarks' lab: ``NODES`` nodes, each first-converged once, and every metered run."""

    inventory: Path
    names: list[str]
    state_dir: Path
    logs: Path
    points: list[Point] = field(default_factory=list)

    def gpunode(self, phase: str, hosts: list[str], *args: str) -> tuple[Usage, dict[str, Any]]:
        """``gpunode ARGS --json -i INVENTORY -l HOSTS`` under the meter, its point recorded.

        Each run gets an SSH control folder of its own: it opens its own connections, as a run
        from a fresh shell does, never one an earlier run left open (whose CPU it would not
        pay for)."""
        label = f"{phase.replace(' ', '-')}-{len(self.points)}-{len(hosts)}"
        # Short, under /tmp: a control socket's path must fit in 108 bytes.
        control = tempfile.mkdtemp(prefix="gpunode-cp-")
        inv, limit = str(self.inventory), ",".join(hosts)
        usage = metered(
            [sys.executable, "-m", "toolkit", *args, "--json", "-i", inv, "-l", limit],
            env={
                **os.environ,
                "GPUNODE_STATE_DIR": str(self.state_dir),
                "ANSIBLE_SSH_CONTROL_PATH_DIR": control,
                "COLUMNS": "200",
            },
            cwd=REPO,
            stdout=self.logs / f"{label}.json",
            stderr=self.logs / f"{label}.err",
            interval=0.2,
        )
        shutil.rmtree(control, ignore_errors=True)
        err = (self.logs / f"{label}.err").read_text()[-3000:]
        assert usage.returncode == 0, f"gpunode {' '.join(args)} on {hosts}: {err}"
        self.points.append(Point(phase, len(hosts), usage))
        return usage, json.loads((self.logs / f"{label}.json").read_text())


@contextmanager
def converged_fleet(tmp: Path) -> Iterator[Fleet]:
    """A fresh ``NODES``-node lab (each node one sparse 4 GiB data disk, applied first:
    provision refuses a node without its data mount), every node first-converged; taken
    down afterwards."""
    assert sum(FIRST_GROUPS) == NODES
    if lab_core.lab_state.load(NAME) is not None:
        lab_core.down(NAME)
    spec = build_spec(name=NAME, nodes=NODES, disks=1, disk_size=4 * 1024**3, ca_bundle=None)
    before = os.environ.get("GPUNODE_STATE_DIR")
    os.environ["GPUNODE_STATE_DIR"] = str(tmp / "state")
    try:
        state = lab_core.up(spec, inventory_dir=tmp / "inv")
        (tmp / "logs").mkdir()
        names = [n.name for n in sorted(state.nodes, key=lambda n: n.index)]
        fleet = Fleet(tmp / "inv", names, tmp / "state", tmp / "logs")
        disks = disks_step.apply(fleet.inventory, ",".join(names))
        assert disks.ok, disks
        start = 0
        for count in FIRST_GROUPS:
            hosts = names[start : start + count]
            start += count
            _, result = fleet.gpunode(FIRST, hosts, "provision")
            assert result["ok"] and result["hosts"].keys() == set(hosts), result["failures"]
            assert all(result["hosts"][h]["changed"] > 0 for h in hosts), result["hosts"]
        yield fleet
    finally:
        if before is None:
            os.environ.pop("GPUNODE_STATE_DIR", None)
        else:
            os.environ["GPUNODE_STATE_DIR"] = before
        if lab_core.lab_state.load(NAME) is not None:
            lab_core.down(NAME)
