"""Multi-node planning and blame (the pairs plan): the slow node is found, healthy nodes are
never blamed.

The all-reduce runs themselves happen in the lab (tests/integration/test_04_accept.py); here
``run_set`` stands in for the network with a model of per-node link speed
(tests/network_model.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from network_model import Network

from toolkit.acceptance.multinode import pairs, run_multi_node
from toolkit.profile.floors import BusbwFloor
from toolkit.report import render_html
from toolkit.report.html import FLOOR_COLOUR

FLOORS = [BusbwFloor(size="16MiB", min_busbw_gbps=0.04)]


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


def test_scaling_across_nodes_is_shown_and_judged_against_its_floor() -> None:
    shown = run_multi_node(list("ab"), FLOORS, Network({"a": 1.0, "b": 1.0}))
    check = next(c for c in shown.passed["a"] if c.name == "multinode.scaling")
    assert check.ok and "0.90 at 2 ranks on 2 nodes" in check.message
    assert "not judged" in check.message and check.floor is None
    judged = run_multi_node(list("ab"), FLOORS, Network({"a": 1.0, "b": 1.0}), min_scaling=0.5)
    check = next(c for c in judged.passed["b"] if c.name == "multinode.scaling")
    assert check.ok and check.measured == 0.9 and ">= floor 0.5" in check.message
    assert judged.ring is not None and judged.ring.to_dict()["scaling"][1]["efficiency"] == 0.9


def test_a_node_that_scales_badly_is_isolated_though_its_link_is_fast() -> None:
    """A node whose loop is slow (its data, its CPU) drags every set it is in: re-pairing
    with a known-good node names it, and only it."""
    loop = {"a": 0.9, "b": 0.9, "c": 0.2, "d": 0.9}
    net = Network({h: 1.0 for h in "abcd"}, loop=loop)
    report = run_multi_node(list("abcd"), FLOORS, net, min_scaling=0.5)
    assert set(report.blame) == {"c"}
    (check,) = report.blame["c"]
    assert check.name == "multinode.scaling" and check.measured == 0.2 and check.floor == 0.5
    assert "< floor 0.5" in check.message and "with known-good" in check.message
    assert all(c.ok for c in report.passed["d"])


def test_two_nodes_scaling_badly_with_even_directions_blames_both() -> None:
    net = Network({"a": 1.0, "b": 1.0}, loop={"a": 0.9, "b": 0.1})
    report = run_multi_node(["a", "b"], FLOORS, net, min_scaling=0.5)
    assert set(report.blame) == {"a", "b"}
    assert [c.name for c in report.blame["a"]] == ["multinode.scaling"]
    assert "cannot be told apart" in report.blame["a"][0].message


def test_a_set_without_the_loop_fails_scaling_only_where_a_floor_asks() -> None:
    def no_loop(hosts: Sequence[str], p2p: bool) -> dict[str, Any]:
        section = Network({h: 1.0 for h in hosts})(hosts, p2p)
        section["train"] = {"error": "no loop across nodes: no data set on b"}
        return section

    shown = run_multi_node(["a", "b"], FLOORS, no_loop)
    assert shown.blame == {}
    judged = run_multi_node(["a", "b"], FLOORS, no_loop, min_scaling=0.5)
    (check,) = judged.blame["a"]
    assert check.name == "multinode.scaling" and not check.ok
    assert "not measured: no loop across nodes: no data set on b" in check.message


def test_the_report_draws_scaling_across_each_set_of_nodes() -> None:
    """The ring's loop across nodes as a curve, a point below the floor in red, and the
    check's message in the set's row."""
    loop = {"a": 0.9, "b": 0.9, "c": 0.2, "d": 0.9}
    report = run_multi_node(list("abcd"), FLOORS, Network({h: 1.0 for h in "abcd"}, loop=loop), 0.5)
    html = render_html({"run_id": "r1", "nodes": [], "multinode": report.to_dict()})
    assert html.count("<figcaption>scaling across ") == 1 + 2 + 2  # ring, pairs, re-pairs
    ring = html.split("<figcaption>scaling across a + b + c + d</figcaption>")[1].split("</svg>")[0]
    assert "3 ranks on 3 nodes: " in ring and "efficiency 0.20" in ring
    # Points 3 and 4 include c: below the floor, drawn in its colour; 2 (a + b) is not.
    assert ring.count(f'r="4" fill="{FLOOR_COLOUR}"') == 2
    assert "<td>0.20 at 3 ranks on 3 nodes against 1 &lt; floor 0.5" in html
