"""The network model the multi-node plans are driven with, in the unit tests and the scale
benchmark: a stand-in for ``run_set`` (toolkit/acceptance/multinode.py) that returns the
runner's all-reduce section of a set of nodes without running anything.

(The all-reduce runs themselves happen in the lab: tests/integration/test_04_accept.py.)

- Each node sends at its own speed (GB/s); a set goes at its slowest sender's speed.
- A bad link between two nodes caps every set that holds both ends at the link's speed
  (NCCL spreads a collective over several channels, so traffic crosses between any two
  members of the set; the model keeps that, not the ring order).
- A corrupt node makes every set it is in return wrong values.
- A flaky node fails (wrong values) in its first ``flaky[node]`` sets, then behaves.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

SIZE = 16 << 20  # the one size the floors name


class Network:
    """Per-node speeds, bad links, corrupt and flaky nodes; counts the sets run."""

    def __init__(
        self,
        speeds: dict[str, float],
        corrupt: set[str] | None = None,
        loop: dict[str, float] | None = None,
        links: dict[tuple[str, str], float] | None = None,
        flaky: dict[str, int] | None = None,
    ) -> None:
        self.speeds = speeds
        self.corrupt = corrupt or set()
        # The training loop's efficiency per node (default: its link speed, at most 0.9): one
        # rank per node, so a point of k ranks goes at the slowest of the first k nodes.
        self.loop = loop or {h: min(0.9, s) for h, s in speeds.items()}
        self.links = {frozenset(ends): speed for ends, speed in (links or {}).items()}
        self.flaky = dict(flaky or {})
        self.calls: list[tuple[tuple[str, ...], bool]] = []
        self._lock = threading.Lock()  # the adaptive plan runs a round's sets at once

    def __call__(self, hosts: Sequence[str], p2p: bool) -> dict[str, Any]:
        with self._lock:
            self.calls.append((tuple(hosts), p2p))
            failing = {h for h in hosts if self.flaky.get(h, 0) > 0}
            for host in failing:
                self.flaky[host] -= 1
        members = set(hosts)
        slowest = min(self.speeds[h] for h in hosts)
        for ends, speed in self.links.items():
            if ends <= members:
                slowest = min(slowest, speed)
        wrong = 5 if (self.corrupt & members) or failing else 0
        section: dict[str, Any] = {
            "engine": "torch-gloo",
            "error": None,
            "rows": [
                {"size_bytes": SIZE, "busbw_gbps": slowest, "wrong": wrong, "correct": wrong == 0}
            ],
            "p2p_gbps": None,
            "train": {"error": None, "scaling": {"points": self.points(hosts)}},
        }
        if p2p and len(hosts) == 2:
            section["p2p_gbps"] = {"0->1": self.speeds[hosts[0]], "1->0": self.speeds[hosts[1]]}
        return section

    def points(self, hosts: Sequence[str]) -> list[dict[str, Any]]:
        points = []
        for k in range(1, len(hosts) + 1):
            efficiency = min(self.loop[h] for h in hosts[:k]) if k > 1 else 1.0
            rate = 100.0 * k * efficiency
            points.append({"ranks": k, "nodes": k, "efficiency": efficiency, "samples_per_s": rate})
        return points
