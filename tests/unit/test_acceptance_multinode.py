"""Multi-node planning and blame: the slow node is found, healthy nodes are never blamed.

The all-reduce runs themselves happen in the lab (tests/integration/test_04_accept.py); here
``run_set`` stands in for the network with a model of per-node link speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from toolkit.acceptance.multinode import pairs, run_multi_node
from toolkit.acceptance.thresholds import BusbwFloor

FLOORS = [BusbwFloor(size="16MiB", min_busbw_gbps=0.04)]
SIZE = 16 << 20


class Network:
    """Each node sends at its own speed (GB/s); a ring goes at its slowest sender's speed."""

    def __init__(self, speeds: dict[str, float], corrupt: set[str] | None = None) -> None:
        self.speeds = speeds
        self.corrupt = corrupt or set()
        self.calls: list[tuple[tuple[str, ...], bool]] = []

    def __call__(self, hosts: Sequence[str], p2p: bool) -> dict[str, Any]:
        self.calls.append((tuple(hosts), p2p))
        slowest = min(self.speeds[h] for h in hosts)
        wrong = 5 if self.corrupt & set(hosts) else 0
        section: dict[str, Any] = {
            "engine": "torch-gloo",
            "error": None,
            "rows": [
                {"size_bytes": SIZE, "busbw_gbps": slowest, "wrong": wrong, "correct": wrong == 0}
            ],
            "p2p_gbps": None,
        }
        if p2p and len(hosts) == 2:
            section["p2p_gbps"] = {"0->1": self.speeds[hosts[0]], "1->0": self.speeds[hosts[1]]}
        return section


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        (["a", "b"], [("a", "b")]),
        (["a", "b", "c"], [("a", "b"), ("c", "a")]),
        (["a", "b", "c", "d"], [("a", "b"), ("c", "d")]),
        (["a"], []),
    ],
)
def test_pairs(hosts: list[str], expected: list[tuple[str, str]]) -> None:
    assert pairs(hosts) == expected


def test_all_fast_nobody_blamed() -> None:
    net = Network({h: 1.0 for h in "abcd"})
    report = run_multi_node(list("abcd"), FLOORS, net)
    assert report.blame == {}
    assert set(report.passed) == set("abcd")
    assert all(c.ok for cs in report.passed.values() for c in cs)
    assert report.ring is not None and report.ring.ok
    assert [p.hosts for p in report.pairs] == [("a", "b"), ("c", "d")]
    assert report.repairs == []


@pytest.mark.parametrize("slow", list("abcd"))
def test_one_slow_node_of_four_is_isolated_by_repairing(slow: str) -> None:
    net = Network({h: 0.0125 if h == slow else 1.0 for h in "abcd"})
    report = run_multi_node(list("abcd"), FLOORS, net)
    assert set(report.blame) == {slow}
    assert slow not in report.passed and len(report.passed) == 3
    assert not report.ring.ok  # type: ignore[union-attr]
    (check,) = report.blame[slow]
    assert check.name == "multinode.busbw@16MiB" and "with known-good" in check.message
    # The partner of the slow node was re-paired with a good node and cleared.
    assert len(report.repairs) == 2
    assert sum(1 for r in report.repairs if r.ok) == 1


def test_two_nodes_blame_the_slow_sender_by_direction() -> None:
    net = Network({"a": 1.0, "b": 0.0125})
    report = run_multi_node(["a", "b"], FLOORS, net)
    assert set(report.blame) == {"b"}
    assert "b sends at 0.013 GB/s" in report.blame["b"][0].message
    assert report.passed == {}  # a is not proven by a failed pair
    assert net.calls == [(("a", "b"), True)]


def test_two_nodes_both_slow_blames_both() -> None:
    report = run_multi_node(["a", "b"], FLOORS, Network({"a": 0.01, "b": 0.011}))
    assert set(report.blame) == {"a", "b"}
    assert "cannot be told apart" in report.blame["a"][0].message


def test_two_nodes_wrong_values_blame_both() -> None:
    report = run_multi_node(["a", "b"], FLOORS, Network({"a": 1.0, "b": 1.0}, corrupt={"a"}))
    assert set(report.blame) == {"a", "b"}
    assert report.blame["a"][0].name == "multinode.correctness"


def test_three_nodes_odd_one_paired_with_first() -> None:
    net = Network({"a": 1.0, "b": 1.0, "c": 0.001})
    report = run_multi_node(["a", "b", "c"], FLOORS, net)
    assert set(report.blame) == {"c"}


def test_failed_run_is_blamed_on_the_pair_when_no_reference() -> None:
    def broken(hosts: Sequence[str], p2p: bool) -> dict[str, Any]:
        return {"engine": "torch-gloo", "rows": [], "error": "rank 1: timed out"}

    report = run_multi_node(["a", "b"], FLOORS, broken)
    assert set(report.blame) == {"a", "b"}
    assert report.blame["a"][0].name == "multinode.run"


def test_single_node_has_no_multi_node_test() -> None:
    net = Network({"a": 1.0})
    report = run_multi_node(["a"], FLOORS, net)
    assert report.ring is None and net.calls == []
