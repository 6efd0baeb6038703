"""Adaptive fault isolation (toolkit/acceptance/isolation.py) and the multi-node stage that
runs it (toolkit/acceptance/multinode.py), driven by the network model (tests/network_model.py):
bad nodes are named, good nodes never, a flaky node is not accused, a bad link is named as a
link, and every round holds at most the limit of sets with no node in two of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from network_model import Network

from toolkit.acceptance.isolation import AdaptivePlan, Probe, SetResult, screening_groups
from toolkit.acceptance.multinode import ADAPTIVE_FROM, MultiNodeReport, run_multi_node
from toolkit.profile.floors import BusbwFloor
from toolkit.report import render_html

FLOORS = [BusbwFloor(size="16MiB", min_busbw_gbps=0.04)]
SLOW = 0.0125  # GB/s: below the floor of 0.04
NODES = [f"n{i:02d}" for i in range(64)]


def network(nodes: Sequence[str], slow: Sequence[str] = (), **kwargs: object) -> Network:
    return Network({h: SLOW if h in slow else 1.0 for h in nodes}, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("count", "sizes"),
    [
        (2, [2]),
        (3, [3]),
        (8, [4, 4]),  # ceil(sqrt 8) = 3: 8 // 3 = 2 groups
        (10, [5, 5]),
        (64, [8] * 8),
        (1000, [33] * 8 + [32] * 23),  # 31 groups of ~32, none of one node
        (1024, [32] * 32),
    ],
)
def test_screening_groups_are_about_sqrt_n_nodes_and_never_one(
    count: int, sizes: list[int]
) -> None:
    hosts = [f"h{i}" for i in range(count)]
    groups = screening_groups(hosts)
    assert [len(g) for g in groups] == sizes
    assert [h for g in groups for h in g] == hosts
    assert all(len(g) >= min(2, count) for g in groups)
    assert max(sizes) <= math.ceil(math.sqrt(count)) + 2


def test_screening_groups_follow_the_domains_and_size_the_rest() -> None:
    hosts = [f"h{i}" for i in range(12)]
    racks = {"h0": "r1", "h5": "r1", "h1": "r2", "h2": "r2", "h3": "r2"}
    groups = screening_groups(hosts, racks)
    assert groups[:2] == [("h0", "h5"), ("h1", "h2", "h3")]
    assert [len(g) for g in groups[2:]] == [4, 3]  # 7 loose nodes: ceil(sqrt 7) = 3, 2 groups


def test_nothing_bad_screens_every_group_and_the_fabric_between_them() -> None:
    net = network(NODES)
    report = run_multi_node(NODES, FLOORS, net)
    assert report.plan == "adaptive"
    assert report.blame == {} and report.links == {} and report.transient == []
    assert set(report.passed) == set(NODES)
    # 8 groups of 8 at once, then one representative of each: 9 tests in 2 rounds.
    assert report.tests == len(net.calls) == 9 and report.rounds == 2
    assert [p.stage for p in report.pairs] == ["screen"] * 8 + ["inter"]
    assert report.pairs[-1].hosts == tuple(NODES[::8])
    assert report.to_dict()["plan"] == "adaptive" and report.to_dict()["rounds"] == 2


@pytest.mark.parametrize("index", [0, 7, 8, 33, 63])
def test_one_slow_node_is_named_with_a_known_good_node(index: int) -> None:
    bad = NODES[index]
    net = network(NODES, [bad])
    report = run_multi_node(NODES, FLOORS, net)
    assert set(report.blame) == {bad}
    (check,) = report.blame[bad]
    assert check.name == "multinode.busbw@16MiB" and "with known-good" in check.message
    (confirm,) = [r for r in report.repairs if not r.ok]
    assert confirm.hosts[1] == bad and confirm.hosts[0] in report.passed
    assert len(report.passed) == 63
    # Screen (8) + representatives (1) + bisecting 8 -> 4 -> 2 -> 1 (2 sets each): 15.
    assert report.tests == 15 and report.rounds == 4


def test_several_bad_nodes_slow_or_failing_in_one_group_and_in_others() -> None:
    slow, corrupt = ["n01", "n40"], {"n03", "n05", "n41"}
    report = run_multi_node(NODES, FLOORS, network(NODES, slow, corrupt=corrupt))
    assert set(report.blame) == {"n01", "n03", "n05", "n40", "n41"}
    assert report.blame["n01"][0].name == "multinode.busbw@16MiB"
    assert report.blame["n03"][0].name == "multinode.correctness"
    assert all("with known-good" in c.message for cs in report.blame.values() for c in cs)
    assert set(report.passed) == set(NODES) - set(report.blame)


def test_a_whole_group_bad_is_named_node_by_node() -> None:
    group = NODES[16:24]
    report = run_multi_node(NODES, FLOORS, network(NODES, group))
    assert set(report.blame) == set(group)
    assert all(len(r.hosts) == 2 for r in report.repairs)


@pytest.mark.parametrize("kind", ["slow", "corrupt"])
def test_every_node_bad_names_every_node_though_none_is_known_good(kind: str) -> None:
    nodes = NODES[:16]
    net = network(nodes, nodes) if kind == "slow" else network(nodes, corrupt=set(nodes))
    report = run_multi_node(nodes, FLOORS, net)
    assert set(report.blame) == set(nodes) and report.passed == {}
    messages = [c.message for cs in report.blame.values() for c in cs]
    assert all("cannot be told apart" in m for m in messages)


def test_with_no_node_known_good_lone_suspects_run_in_pairs_until_one_passes() -> None:
    """Every group and every half fails (every pair of neighbours holds a bad node): lone
    suspects of different halves run together, a passing pair gives known-good nodes, and
    every bad node is then confirmed beside one."""
    nodes = NODES[:16]
    bad = nodes[1::2]
    report = run_multi_node(nodes, FLOORS, network(nodes, bad))
    assert set(report.blame) == set(bad)
    assert all("with known-good" in c.message for cs in report.blame.values() for c in cs)
    assert all(not p.ok for p in report.pairs)  # screens and halves: all failed
    lone_pairs = [r for r in report.repairs if len(r.hosts) == 2 and not set(r.hosts) & set(bad)]
    assert lone_pairs and all(r.ok for r in lone_pairs)


def test_a_flaky_node_that_fails_once_is_not_accused() -> None:
    flaky = "n21"
    net = network(NODES, flaky={flaky: 1})
    report = run_multi_node(NODES, FLOORS, net)
    assert report.blame == {} and report.links == {}
    (transient,) = report.transient
    assert flaky in transient and flaky in report.passed
    assert [p.stage for p in report.pairs].count("retest") == 1


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("n16", "n23"),  # the two halves of a group
        ("n16", "n17"),  # one quarter
        ("n00", "n08"),  # two groups' representatives: the fabric between groups
    ],
)
def test_a_bad_link_between_two_good_nodes_is_named_as_a_link(a: str, b: str) -> None:
    net = network(NODES, links={(a, b): SLOW})
    report = run_multi_node(NODES, FLOORS, net)
    assert report.blame == {}
    assert list(report.links) == [(a, b)]
    (check,) = report.links[(a, b)]
    assert check.name == "multinode.busbw@16MiB" and f"link {a} - {b}" in check.message
    assert a in report.passed and b in report.passed
    assert report.to_dict()["links"][0]["hosts"] == [a, b]


def test_a_bad_link_and_a_bad_node_in_one_group() -> None:
    net = network(NODES, ["n30"], links={("n24", "n27"): SLOW})
    report = run_multi_node(NODES, FLOORS, net)
    assert set(report.blame) == {"n30"} and list(report.links) == [("n24", "n27")]


def test_racks_are_screened_as_groups() -> None:
    racks = {h: f"rack{i // 16}" for i, h in enumerate(NODES)}
    net = network(NODES, ["n50"])
    report = run_multi_node(NODES, FLOORS, net, domains=racks)
    screens = [p.hosts for p in report.pairs if p.stage == "screen"]
    assert screens == [tuple(NODES[i : i + 16]) for i in range(0, 64, 16)]
    assert set(report.blame) == {"n50"}


def oracle(bad: set[str]) -> object:
    def run(probes: list[Probe]) -> list[SetResult]:
        return [SetResult("fail" if bad & set(p.members) else "pass") for p in probes]

    return run


@pytest.mark.parametrize("limit", [1, 3, 8, None])
def test_rounds_hold_the_limit_and_no_node_twice(limit: int | None) -> None:
    hosts = [f"h{i}" for i in range(256)]
    bad = {"h3", "h77", "h78", "h200", "h255"}
    plan = AdaptivePlan(hosts, max_concurrent=limit)
    run = oracle(bad)
    rounds = []
    while probes := plan.next_round():
        rounds.append(probes)
        members = [m for p in probes for m in p.members]
        assert len(members) == len(set(members))
        assert limit is None or len(probes) <= limit
        plan.record(run(probes))  # type: ignore[operator]
    found = plan.result()
    assert set(found.accused) == bad and all(a.confirmed for a in found.accused.values())
    assert found.rounds == len(rounds)
    assert len(found.records) == sum(len(r) for r in rounds)
    if limit == 1:
        assert found.rounds == len(found.records)
    # Each confirmation ran beside a node that had passed before it.
    for record in found.records:
        if record.probe.reference:
            earlier = {
                m for r in found.records if r.round < record.round and r.ok for m in r.probe.members
            }
            assert record.probe.reference in earlier


def test_a_lone_node_of_its_rack_is_screened_beside_a_known_good_node() -> None:
    hosts = ["a", "b", "c", "d", "e"]
    plan = AdaptivePlan(hosts, {"a": "r1", "b": "r1", "c": "r1", "d": "r1", "e": "r2"})
    run = oracle({"e"})
    first = plan.next_round()
    assert [p.members for p in first] == [("a", "b", "c", "d")]  # e waits for a good node
    plan.record(run(first))  # type: ignore[operator]
    (second,) = plan.next_round()
    assert second.members == ("e", "a") and second.reference == "a"
    plan.record(run([second]))  # type: ignore[operator]
    assert plan.next_round() == []
    found = plan.result()
    assert set(found.accused) == {"e"} and found.accused["e"].confirmed


def test_the_plan_refuses_what_it_cannot_plan() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        AdaptivePlan(["a", "a", "b"])
    with pytest.raises(ValueError, match="2 or more"):
        AdaptivePlan(["a"])
    with pytest.raises(ValueError, match="1 or more"):
        AdaptivePlan(["a", "b"], max_concurrent=0)
    plan = AdaptivePlan(["a", "b", "c"])
    plan.next_round()
    with pytest.raises(RuntimeError, match="record"):
        plan.next_round()
    with pytest.raises(ValueError, match="0 result"):
        plan.record([])
    with pytest.raises(RuntimeError, match="left to run"):
        plan.result()


def test_the_stage_chooses_its_plan_by_the_number_of_nodes() -> None:
    small = NODES[: ADAPTIVE_FROM - 1]
    assert run_multi_node(small, FLOORS, network(small)).plan == "pairs"
    large = NODES[:ADAPTIVE_FROM]
    assert run_multi_node(large, FLOORS, network(large)).plan == "adaptive"


def test_reports_of_several_groups_merge_into_one() -> None:
    small = NODES[:4]
    pairs = run_multi_node(small, FLOORS, network(small, ["n01"]))
    adaptive = run_multi_node(NODES, FLOORS, network(NODES, ["n40"], links={("n16", "n23"): SLOW}))
    merged = MultiNodeReport.merged([pairs, adaptive])
    assert merged.plan == "pairs+adaptive" and merged.ring is None
    assert merged.tests == pairs.tests + adaptive.tests
    assert merged.rounds == (pairs.rounds or 0) + (adaptive.rounds or 0)
    assert set(merged.blame) == {"n01", "n40"} and list(merged.links) == [("n16", "n23")]
    assert pairs.to_dict()["plan"] == "pairs" and pairs.rounds == pairs.tests


def test_the_report_shows_the_rounds_the_bad_link_and_the_transient_set() -> None:
    net = network(NODES, links={("n16", "n23"): SLOW}, flaky={"n50": 1})
    report = run_multi_node(NODES, FLOORS, net)
    html = render_html({"run_id": "r1", "nodes": [], "multinode": report.to_dict()})
    assert f"plan: adaptive, {report.tests} sets in {report.rounds} rounds" in html
    assert "<td>1</td><td>screen</td><td>n00 + n01" in html
    assert "bad link n16 - n23 (neither node blamed): busbw 0.013 GB/s" in html
    assert "failed once, passed when run again (nobody blamed): n48 + n49 + n50" in html
