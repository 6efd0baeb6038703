"""Benchmark: adaptive fault isolation against the ring-pairs-re-pairs plan, at scale (issue 25).

Both plans run through toolkit/acceptance/multinode.py with the network model
(tests/network_model.py) standing in for the all-reduce runs: no container, the real checks
and blame. Bad nodes are placed at random (seeded per case), each slow (below the busbw floor)
or failing (wrong values) at random. Per case: the sets run (tests), the rounds of sets run at
once (at most MAX_CONCURRENT, no node in two) and the wall time they take at TEST_S a set, the
nodes named, false accusations and misses; beside it all pairs, N(N-1)/2, and the pairs plan.

The pairs plan runs one set at a time; its rounds here are the fewest its sets could take with
the same limit (ring; disjoint pairs; re-pairs, which share one reference node), so the
comparison is the kindest to it. Prints the tables; asserts issue 25's bar (1,024 nodes with
3 bad: all 3 named, none falsely, at most 200 tests, fewer rounds than the pairs plan) and
that no case accuses a good node or misses a bad one.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

from network_model import Network

from toolkit.acceptance.multinode import ADAPTIVE_FROM, MultiNodeReport, run_adaptive, run_pairs
from toolkit.profile.floors import BusbwFloor

FLOORS = [BusbwFloor(size="16MiB", min_busbw_gbps=0.04)]
SLOW = 0.0125
# Sets run at once: a Slurm license or the inventory's count bounds it at a site (Nebius
# soperator's active checks hold `gpu_checks` licenses); 32 lets 1,024 nodes screen in one round.
MAX_CONCURRENT = 32
# One multi-node set's wall time: NVIDIA's Cluster Readiness Engine gives each set of its
# adaptive isolation 4 minutes (design 055-adaptive-fault-isolation: `timeoutPerJob: 4m`,
# 7 rounds ~ 28 min). No shipped profile states a multi-node test's duration.
TEST_S = 240
SIZES = (8, 64, 256, 1024)
BAD = (0, 1, 3, 10)


def hosts_of(n: int) -> list[str]:
    return [f"node{i:04d}" for i in range(n)]


def faulty_network(hosts: Sequence[str], bad: Sequence[str], rng: random.Random) -> Network:
    slow = {h for h in bad if rng.random() < 0.5}
    return Network({h: SLOW if h in slow else 1.0 for h in hosts}, corrupt=set(bad) - slow)


def packed_rounds(stages: list[list[tuple[str, ...]]], limit: int | None) -> int:
    """The fewest rounds the stages' sets take, in order, at most ``limit`` a round, no node
    in two sets of a round (greedy; exact for the pairs plan's disjoint pairs and its re-pairs
    around one reference)."""
    rounds = 0
    for stage in stages:
        left = list(stage)
        while left:
            busy: set[str] = set()
            placed = []
            for members in left:
                if limit is not None and len(placed) >= limit:
                    break
                if not busy.intersection(members):
                    busy.update(members)
                    placed.append(members)
            left = [m for m in left if m not in placed]
            rounds += 1
    return rounds


def pairs_rounds(report: MultiNodeReport, limit: int | None) -> int:
    stages = [[p.hosts for p in report.pairs], [p.hosts for p in report.repairs]]
    return (1 if report.ring else 0) + packed_rounds(stages, limit)


def named(report: MultiNodeReport, bad: Sequence[str]) -> tuple[int, int, int]:
    """(named, false accusations, misses)."""
    blamed = set(report.blame)
    return len(blamed), len(blamed - set(bad)), len(set(bad) - blamed)


def wall(rounds: int) -> str:
    minutes = rounds * TEST_S / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def case(n: int, d: int, seed: str) -> tuple[list[str], list[str], random.Random]:
    rng = random.Random(seed)
    hosts = hosts_of(n)
    return hosts, rng.sample(hosts, min(d, n)), rng


def test_bench_isolation_at_scale() -> None:
    print(
        f"\nadaptive isolation (screen, bisect, confirm) against ring + pairs + re-pairs; "
        f"at most {MAX_CONCURRENT} sets at once, {TEST_S // 60} min a set; "
        f"run_multi_node picks adaptive from {ADAPTIVE_FROM} nodes"
    )
    header = (
        f"{'N':>5} {'bad':>3} | {'tests':>5} {'rounds':>6} {'wall':>7} {'named':>5} "
        f"{'false':>5} {'miss':>4} | {'all pairs':>9} | {'pairs plan: tests':>17} "
        f"{'rounds':>6} {'wall':>7} {'false':>5} {'miss':>4}"
    )
    print(header + "\n" + "-" * len(header))
    results = {}
    for n in SIZES:
        for d in BAD:
            hosts, bad, rng = case(n, d, f"{n}-{d}")
            state = rng.getstate()
            adaptive = run_adaptive(
                hosts, FLOORS, faulty_network(hosts, bad, rng), max_concurrent=MAX_CONCURRENT
            )
            rng.setstate(state)
            pairs = run_pairs(hosts, FLOORS, faulty_network(hosts, bad, rng))
            rounds_pairs = pairs_rounds(pairs, MAX_CONCURRENT)
            count, false, miss = named(adaptive, bad)
            _count, false_pairs, miss_pairs = named(pairs, bad)
            assert adaptive.rounds is not None
            results[(n, d)] = (adaptive.tests, adaptive.rounds, count, false, miss, rounds_pairs)
            shown = f"{d}" if d <= n else f"{n}*"
            print(
                f"{n:>5} {shown:>3} | {adaptive.tests:>5} {adaptive.rounds:>6} "
                f"{wall(adaptive.rounds):>7} {count:>5} {false:>5} {miss:>4} | "
                f"{n * (n - 1) // 2:>9} | {pairs.tests:>17} {rounds_pairs:>6} "
                f"{wall(rounds_pairs):>7} {false_pairs:>5} {miss_pairs:>4}"
            )
    print("(* every node bad)")
    tests, rounds, count, false, miss, rounds_pairs = results[(1024, 3)]
    assert (count, false, miss) == (3, 0, 0)
    assert tests <= 200 and rounds < rounds_pairs
    assert all(r[3] == 0 and r[4] == 0 for r in results.values())


def test_bench_isolation_rounds_by_limit() -> None:
    """1,024 nodes, 3 bad: rounds as the limit of sets at once tightens."""
    hosts, bad, rng = case(1024, 3, "1024-3")
    state = rng.getstate()
    pairs = run_pairs(hosts, FLOORS, faulty_network(hosts, bad, rng))
    print("\n1,024 nodes, 3 bad: rounds by the limit of sets at once")
    print(f"{'limit':>9} | {'adaptive tests':>14} {'rounds':>6} | {'pairs plan rounds':>17}")
    for limit in (1, 8, 32, 128, None):
        rng.setstate(state)
        adaptive = run_adaptive(
            hosts, FLOORS, faulty_network(hosts, bad, rng), max_concurrent=limit
        )
        shown = "none" if limit is None else str(limit)
        pairs_r = pairs_rounds(pairs, limit)
        print(f"{shown:>9} | {adaptive.tests:>14} {adaptive.rounds:>6} | {pairs_r:>17}")
        assert set(adaptive.blame) == set(bad)
        assert adaptive.rounds is not None and adaptive.rounds < pairs_r


def test_bench_isolation_where_the_plans_cross() -> None:
    """Why ADAPTIVE_FROM: the mean over 20 placements of slow nodes, each plan's tests and
    rounds (no limit), and the cases each plan got wrong."""
    print(f"\nwhere the plans cross (mean of 20 placements; ADAPTIVE_FROM = {ADAPTIVE_FROM})")
    print(
        f"{'N':>4} {'bad':>3} | {'adaptive tests':>14} {'rounds':>6} {'wrong':>5} | "
        f"{'pairs tests':>11} {'rounds':>6} {'wrong':>5}"
    )
    for n in (4, 8, 12, 16, 24, 32):
        for d in (1, 3):
            figures: list[tuple[int, int, bool, int, int, bool]] = []
            for seed in range(20):
                hosts, bad, _rng = case(n, d, f"cross-{n}-{d}-{seed}")
                net = {h: SLOW if h in bad else 1.0 for h in hosts}
                adaptive = run_adaptive(hosts, FLOORS, Network(dict(net)))
                pairs = run_pairs(hosts, FLOORS, Network(dict(net)))
                assert adaptive.rounds is not None
                figures.append(
                    (
                        adaptive.tests,
                        adaptive.rounds,
                        set(adaptive.blame) != set(bad),
                        pairs.tests,
                        pairs_rounds(pairs, None),
                        set(pairs.blame) != set(bad),
                    )
                )
            mean = [statistics.fmean(f[i] for f in figures) for i in range(6)]
            wrong_a, wrong_p = sum(f[2] for f in figures), sum(f[5] for f in figures)
            print(
                f"{n:>4} {d:>3} | {mean[0]:>14.1f} {mean[1]:>6.1f} {wrong_a:>5} | "
                f"{mean[3]:>11.1f} {mean[4]:>6.1f} {wrong_p:>5}"
            )
            if n >= ADAPTIVE_FROM:
                assert wrong_a == 0 and mean[1] <= mean[4]


def test_bench_isolation_flaky_node_and_bad_link() -> None:
    """1,024 nodes: a node that fails its first set only, and a slow link between two good
    nodes of one group."""
    hosts = hosts_of(1024)
    speeds = {h: 1.0 for h in hosts}
    flaky = run_adaptive(
        hosts, FLOORS, Network(dict(speeds), flaky={"node0500": 1}), max_concurrent=MAX_CONCURRENT
    )
    ends = ("node0130", "node0155")
    link = run_adaptive(
        hosts, FLOORS, Network(dict(speeds), links={ends: SLOW}), max_concurrent=MAX_CONCURRENT
    )
    print("\n1,024 nodes, no bad node:")
    print(
        f"  flaky node0500 (fails once): {flaky.tests} tests, {flaky.rounds} rounds, "
        f"named {sorted(flaky.blame)}, transient sets {len(flaky.transient)}"
    )
    print(
        f"  slow link {ends[0]} - {ends[1]}: {link.tests} tests, {link.rounds} rounds, "
        f"named {sorted(link.blame)}, links {sorted(link.links)}"
    )
    assert flaky.blame == {} and len(flaky.transient) == 1
    assert link.blame == {} and list(link.links) == [ends]
